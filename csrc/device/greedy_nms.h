// Greedy non-maximum suppression on the device, over boxes already in visiting order (the
// order of the CPU kernels' greedy loop): position j is dropped when a kept position i < j
// suppresses it. As on GPUs since Faster R-CNN: every pair's test runs in parallel into a
// bit mask (row i: the positions i suppresses), then one pass over the rows in order keeps
// a row unless an earlier kept row's bits remove it. The mask is made for a band of rows at
// a time, so its memory stays bounded whatever the count.
#pragma once

#include <algorithm>
#include <cstdint>

#include "device/device_io.h"

namespace ortops::device {

inline constexpr int64_t kMaskBits = 64;
// Rows per band: a band's mask is at most this many 64-bit words (32 MiB).
inline constexpr int64_t kMaxMaskWords = int64_t{1} << 22;

// Mask word `w` of row `first_row + r`: bit b for position 64 w + b when it lies after the
// row and suppresses(row, position). Words before the row's own are never read.
template <typename Suppresses>
struct MaskWord {
  Suppresses suppresses;
  uint64_t* mask;
  int64_t first_row, words, count;

  ORTOPS_HD void operator()(int64_t i) const {
    const int64_t row = first_row + i / words, w = i % words;
    if (w < row / kMaskBits) return;
    uint64_t bits = 0;
    const int64_t end = (w + 1) * kMaskBits < count ? (w + 1) * kMaskBits : count;
    for (int64_t j = w * kMaskBits > row + 1 ? w * kMaskBits : row + 1; j < end; ++j) {
      if (suppresses(row, j)) bits |= uint64_t{1} << (j % kMaskBits);
    }
    mask[i] = bits;
  }
};

// The greedy pass over a band's rows, in order: one sequential walk (a single thread on a
// GPU), carrying the removed positions and the kept count across bands.
struct KeepRows {
  const uint64_t* mask;
  uint64_t* removed;
  int64_t* kept;
  int64_t* kept_count;
  int64_t first_row, rows, words;

  ORTOPS_HD void operator()(int64_t) const {
    int64_t k = *kept_count;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row = first_row + r;
      if ((removed[row / kMaskBits] >> (row % kMaskBits)) & 1u) continue;
      kept[k++] = row;
      const uint64_t* bits = mask + r * words;
      for (int64_t w = row / kMaskBits; w < words; ++w) removed[w] |= bits[w];
    }
    *kept_count = k;
  }
};

#if defined(__CUDACC__)
// KeepRows on a GPU, for speed (GPU only; KeepRows is its twin, which the emulated device
// runs and the tests check): one warp walks the rows, each lane OR-ing every 32nd word of a
// kept row into the removed set, where one thread would OR them all. The warp synchronises
// after each kept row, so every lane sees the whole set before reading the next row's bit.
static __global__ void KeepRowsInWarp(KeepRows rows) {
  const int64_t lane = threadIdx.x;
  int64_t k = *rows.kept_count;
  for (int64_t r = 0; r < rows.rows; ++r) {
    const int64_t row = rows.first_row + r;
    if ((rows.removed[row / kMaskBits] >> (row % kMaskBits)) & 1u) continue;
    if (lane == 0) rows.kept[k] = row;
    ++k;
    const uint64_t* bits = rows.mask + r * rows.words;
    for (int64_t w = row / kMaskBits + lane; w < rows.words; w += 32) rows.removed[w] |= bits[w];
    __syncwarp();
  }
  if (lane == 0) *rows.kept_count = k;
}
#endif

// Keeps positions of [0, count) greedily: writes the kept ones, in order, to kept[0, K) (device
// memory, count elements) and returns K, which it copies to the host (waiting for the stream).
// `suppresses(i, j)`, for positions i < j, is called on the device.
template <typename Suppresses>
int64_t GreedyKeep(const DeviceIO& io, int64_t count, const Suppresses& suppresses, int64_t* kept) {
  if (count <= 0) return 0;
  const int64_t words = (count + kMaskBits - 1) / kMaskBits;
  const int64_t band = std::max<int64_t>(1, std::min(count, kMaxMaskWords / words));
  Scratch<uint64_t> mask = io.Allocate<uint64_t>(static_cast<size_t>(band * words));
  Scratch<uint64_t> removed = io.Allocate<uint64_t>(static_cast<size_t>(words));
  Scratch<int64_t> kept_count = io.Allocate<int64_t>(1);
  io.Fill(removed.data(), 0, removed.size() * sizeof(uint64_t));
  io.Fill(kept_count.data(), 0, sizeof(int64_t));
  for (int64_t first = 0; first < count; first += band) {
    const int64_t rows = std::min(band, count - first);
    io.ForEach(rows * words, MaskWord<Suppresses>{suppresses, mask.data(), first, words, count});
    const KeepRows keep{mask.data(), removed.data(), kept, kept_count.data(), first, rows, words};
#if defined(__CUDACC__)
    KeepRowsInWarp<<<1, 32, 0, io.stream()>>>(keep);
    io.CheckLaunch("the greedy pass of NMS");
#else
    io.ForEach(1, keep);
#endif
  }
  int64_t result = 0;
  io.CopyToHost(&result, kept_count.data(), 1);
  return result;
}

}  // namespace ortops::device
