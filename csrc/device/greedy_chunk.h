// The arithmetic of one chunk of device/greedy_nms.h's greedy pass (64 rows, one mask word),
// apart from the pass itself so that the C++ tests check it against a plain walk
// (tests/cpp/greedy_chunk_test.cc): the GPU kernel and its host twin both call it.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace ortops::device {

inline constexpr int64_t kMaskBits = 64;

ORTOPS_HD inline uint64_t Bit(int64_t position) { return uint64_t{1} << (position % kMaskBits); }
ORTOPS_HD inline bool IsSet(const uint64_t* bits, int64_t position) {
  return (bits[position / kMaskBits] & Bit(position)) != 0;
}
// The lowest set bit's position of a non-zero word.
ORTOPS_HD inline int LowestBit(uint64_t bits) {
#if defined(__CUDA_ARCH__)
  return __ffsll(static_cast<long long>(bits)) - 1;
#else
  return __builtin_ctzll(bits);
#endif
}
// The highest set bit's position of a non-zero word.
ORTOPS_HD inline int HighestBit(uint64_t bits) {
#if defined(__CUDA_ARCH__)
  return 63 - __clzll(static_cast<long long>(bits));
#else
  return 63 - __builtin_clzll(bits);
#endif
}
ORTOPS_HD inline int BitCount(uint64_t bits) {
#if defined(__CUDA_ARCH__)
  return __popcll(bits);
#else
  return __builtin_popcountll(bits);
#endif
}

// The live rows of a chunk that suppress a live row of it (diagonal as in ResolveChunk).
ORTOPS_HD inline uint64_t Suppressors(const uint64_t* diagonal, uint64_t live) {
  uint64_t suppressors = 0;
  for (uint64_t bits = live; bits != 0; bits &= bits - 1) {
    const int b = LowestBit(bits);
    if ((diagonal[b] & live) != 0) suppressors |= Bit(b);
  }
  return suppressors;
}

// The greedy decision within one chunk: of the `live` rows (not removed by earlier chunks),
// in order, each is kept unless a row kept before it in the chunk suppresses it;
// diagonal[b] is row b's mask word over the chunk's own positions (bits after b only; read
// for live rows only). At most `room` rows are kept. Returns the kept rows' bits.
// `suppressors` is Suppressors(diagonal, live), which a GPU finds in two warp votes.
//
// Only live rows that suppress a live row need a step of their own: every live row before
// the next such one is kept at once (nothing in the chunk can remove it any more), and so is
// every row left after the last. Rows are kept in order, so the first `room` of them are the
// ones a walk that stops at `room` keeps.
ORTOPS_HD inline uint64_t ResolveChunk(const uint64_t* diagonal, uint64_t live, int64_t room, uint64_t suppressors) {
  uint64_t kept = 0;
  for (uint64_t active = live & suppressors; active != 0; active = live & suppressors) {
    const int b = LowestBit(active);
    const uint64_t through_b = Bit(b) | (Bit(b) - 1);
    kept |= live & through_b;
    live &= ~through_b & ~diagonal[b];
  }
  kept |= live;
  // The first `room` kept rows.
  for (int64_t extra = BitCount(kept) - room; extra > 0; --extra) kept &= ~Bit(HighestBit(kept));
  return kept;
}

ORTOPS_HD inline uint64_t ResolveChunk(const uint64_t* diagonal, uint64_t live, int64_t room) {
  return ResolveChunk(diagonal, live, room, Suppressors(diagonal, live));
}

#if defined(__CUDACC__)
// Suppressors(diagonal, live) by a whole warp (every lane calls it, and every lane gets it):
// lane l tests rows l and l + 32 at once, where the loop tests 64 rows one after another.
__device__ inline uint64_t SuppressorsInWarp(const uint64_t* diagonal, uint64_t live) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const bool low = (live >> lane & 1) != 0 && (diagonal[lane] & live) != 0;
  const bool high = (live >> (lane + 32) & 1) != 0 && (diagonal[lane + 32] & live) != 0;
  return uint64_t{__ballot_sync(0xffffffffu, low)} | uint64_t{__ballot_sync(0xffffffffu, high)} << 32;
}
#endif

// Word w of the removed set once the kept rows `kept_bits` of a chunk have suppressed theirs:
// `word` OR-ed with row b's word w for every kept row b, which is at words[b * row_stride]
// (the mask is stored a row after another). Every load is predicated on its row's bit and
// none waits for another, so the GPU has several in flight (ptxas for sm_90 keeps about six,
// the ORs close behind); as a warp's threads take neighbouring words, each of its loads reads
// one row's contiguous words.
ORTOPS_HD inline uint64_t RemovedAfter(const uint64_t* words, int64_t row_stride, uint64_t kept_bits, uint64_t word) {
  constexpr int kHalf = 32;
  for (int half = 0; half < 2; ++half) {
    const auto bits = static_cast<uint32_t>(kept_bits >> (half * kHalf));
    if (bits == 0) continue;
    // A pointer stepped a row at a time: the GPU's address arithmetic per load is one add.
    const uint64_t* row = words + half * kHalf * row_stride;
    uint64_t loaded[kHalf];
    ORTOPS_UNROLL
    for (int b = 0; b < kHalf; ++b, row += row_stride) loaded[b] = (bits & (uint32_t{1} << b)) != 0 ? *row : 0;
    ORTOPS_UNROLL
    for (int b = 0; b < kHalf; ++b) word |= loaded[b];
  }
  return word;
}

}  // namespace ortops::device
