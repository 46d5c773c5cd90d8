// The chunk arithmetic of the device's greedy NMS pass (device/greedy_chunk.h) against a plain
// walk written here: ResolveChunk on random 64x64 diagonal blocks, live sets and room, and
// RemovedAfter against OR-ing the kept rows one by one.
#include "device/greedy_chunk.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>

namespace ortops::device {
namespace {

// Row b suppresses the later rows whose bits are set; a row is kept, in order, unless a kept
// row suppresses it, until `room` are kept.
uint64_t Walk(const std::array<uint64_t, 64>& diagonal, uint64_t live, int64_t room) {
  uint64_t kept = 0, removed = ~live;
  for (int b = 0; b < 64 && room > 0; ++b) {
    if ((removed >> b & 1) != 0) continue;
    kept |= uint64_t{1} << b;
    removed |= diagonal[b];
    --room;
  }
  return kept;
}

// Each row suppresses each later row with probability `density`; rows at or before it never.
std::array<uint64_t, 64> RandomDiagonal(std::mt19937_64& rng, double density) {
  std::bernoulli_distribution suppresses(density);
  std::array<uint64_t, 64> diagonal{};
  for (int b = 0; b < 64; ++b) {
    for (int j = b + 1; j < 64; ++j) diagonal[b] |= suppresses(rng) ? uint64_t{1} << j : 0;
  }
  return diagonal;
}

TEST(ResolveChunk, KeepsWhatAWalkInOrderKeeps) {
  std::mt19937_64 rng(7);
  for (const double density : {0.0, 0.01, 0.05, 0.2, 0.6, 1.0}) {
    for (int trial = 0; trial < 400; ++trial) {
      const std::array<uint64_t, 64> diagonal = RandomDiagonal(rng, density);
      const uint64_t live = trial % 4 == 0 ? ~uint64_t{0} : rng() | rng();
      const int64_t room = trial % 3 == 0 ? 64 : static_cast<int64_t>(rng() % 66);
      ASSERT_EQ(ResolveChunk(diagonal.data(), live, room), Walk(diagonal, live, room))
          << "density " << density << ", trial " << trial << ", room " << room;
    }
  }
}

TEST(ResolveChunk, NothingLiveOrNoRoomKeepsNothing) {
  std::mt19937_64 rng(3);
  const std::array<uint64_t, 64> diagonal = RandomDiagonal(rng, 0.1);
  EXPECT_EQ(ResolveChunk(diagonal.data(), 0, 64), 0u);
  EXPECT_EQ(ResolveChunk(diagonal.data(), ~uint64_t{0}, 0), 0u);
  EXPECT_EQ(ResolveChunk(diagonal.data(), ~uint64_t{0}, 1), 1u);
}

TEST(RemovedAfter, OrsTheKeptRowsWords) {
  std::mt19937_64 rng(11);
  // 64 rows of 5 words, a row after another; the pass ORs in one word of each kept row.
  constexpr int64_t kWords = 5;
  std::array<uint64_t, 64 * kWords> rows{};
  for (int trial = 0; trial < 200; ++trial) {
    for (uint64_t& word : rows) word = rng();
    const uint64_t kept = trial % 5 == 0 ? 0 : rng() & rng();
    const uint64_t word = rng() & rng() & rng();
    const int64_t w = trial % kWords;
    uint64_t expected = word;
    for (int b = 0; b < 64; ++b) expected |= (kept >> b & 1) != 0 ? rows[b * kWords + w] : 0;
    ASSERT_EQ(RemovedAfter(rows.data() + w, kWords, kept, word), expected) << "trial " << trial;
  }
}

}  // namespace
}  // namespace ortops::device
