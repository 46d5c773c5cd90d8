// Greedy non-maximum suppression on the device, over boxes already in visiting order (the
// order of the CPU kernels' greedy loop): position j is dropped when a kept position i < j
// suppresses it. As on GPUs since Faster R-CNN: every pair's test runs in parallel into a
// bit mask (row i: the positions i suppresses), then one pass over the rows in order keeps
// a row unless an earlier kept row's bits remove it. The mask is made for a band of rows at
// a time, so its memory stays bounded whatever the count.
//
// Many independent sets (segments: one per batch and class, say) run at once: each has its
// own mask rows, removed bits and greedy pass, and a segment that has kept `limit` positions
// stops (its later rows are neither tested nor kept).
#pragma once

#include <algorithm>
#include <cstdint>

#include "device/device_io.h"

namespace ortops::device {

inline constexpr int64_t kMaskBits = 64;
// Rows per band: a band's mask is at most this many 64-bit words (32 MiB).
inline constexpr int64_t kMaxMaskWords = int64_t{1} << 22;

// The kept positions a segment can hold: kept[s * KeptCapacity + k] is segment s's k-th.
inline int64_t KeptCapacity(int64_t count, int64_t limit) { return std::max<int64_t>(0, std::min(count, limit)); }

// The shape of a segmented greedy pass: `segments` sets of positions [0, size(s)), where
// size(s) = sizes[s] <= count (device memory), or count when sizes is null; at most `limit`
// kept per set. The mask covers segments [first_segment, + mask_segments) and rows
// [first_row, + rows) of each, `words` 64-bit words a row.
struct GreedyBand {
  const int64_t* sizes;
  uint64_t* removed;  // [segments, words]: the positions an earlier kept row suppresses
  int64_t* kept;      // [segments, KeptCapacity(count, limit)]
  int64_t* kept_count;
  int64_t count, limit, words, first_segment, first_row, rows;

  ORTOPS_HD int64_t SizeOf(int64_t segment) const { return sizes != nullptr ? sizes[segment] : count; }
  ORTOPS_HD uint64_t* RemovedOf(int64_t segment) const { return removed + segment * words; }
  ORTOPS_HD int64_t* KeptOf(int64_t segment) const { return kept + segment * (count < limit ? count : limit); }
  // Row first_row + r of the band's segment first_segment + s in `mask`.
  ORTOPS_HD const uint64_t* MaskRow(const uint64_t* mask, int64_t s, int64_t r) const {
    return mask + (s * rows + r) * words;
  }
};

ORTOPS_HD inline bool IsSet(const uint64_t* bits, int64_t position) {
  return (bits[position / kMaskBits] >> (position % kMaskBits)) & 1u;
}

// Mask word `w` of row `first_row + r` of segment `first_segment + s` (i = (s rows + r) words
// + w): bit b for position 64 w + b when it lies after the row and suppresses(segment, row,
// position). Rows past the segment's size, rows already removed and rows of a segment that
// has reached its limit are never read: they are not computed. Neither are words before the
// row's own.
template <typename Suppresses>
struct MaskWord {
  Suppresses suppresses;
  uint64_t* mask;
  GreedyBand band;

  ORTOPS_HD void operator()(int64_t i) const {
    const int64_t w = i % band.words, r = i / band.words % band.rows;
    const int64_t segment = band.first_segment + i / (band.words * band.rows), row = band.first_row + r;
    const int64_t size = band.SizeOf(segment);
    if (row >= size || w < row / kMaskBits || band.kept_count[segment] >= band.limit) return;
    if (IsSet(band.RemovedOf(segment), row)) return;
    uint64_t bits = 0;
    const int64_t end = (w + 1) * kMaskBits < size ? (w + 1) * kMaskBits : size;
    for (int64_t j = w * kMaskBits > row + 1 ? w * kMaskBits : row + 1; j < end; ++j) {
      if (suppresses(segment, row, j)) bits |= uint64_t{1} << (j % kMaskBits);
    }
    mask[i] = bits;
  }
};

// The greedy pass over a band's rows of segment `first_segment + s`, in order: one
// sequential walk per segment (a warp on a GPU: KeepRowsInWarp), carrying the removed
// positions and the kept count across bands.
struct KeepRows {
  const uint64_t* mask;
  GreedyBand band;

  ORTOPS_HD void operator()(int64_t s) const {
    const int64_t segment = band.first_segment + s, size = band.SizeOf(segment);
    uint64_t* removed = band.RemovedOf(segment);
    int64_t* kept = band.KeptOf(segment);
    int64_t k = band.kept_count[segment];
    for (int64_t r = 0; r < band.rows && k < band.limit; ++r) {
      const int64_t row = band.first_row + r;
      if (row >= size) break;
      if (IsSet(removed, row)) continue;
      kept[k++] = row;
      const uint64_t* bits = band.MaskRow(mask, s, r);
      for (int64_t w = row / kMaskBits; w < band.words; ++w) removed[w] |= bits[w];
    }
    band.kept_count[segment] = k;
  }
};

#if defined(__CUDACC__)
// KeepRows on a GPU, for speed (GPU only; KeepRows is its twin, which the emulated device
// runs and the tests check): one warp per segment (block) walks the rows, each lane OR-ing
// every 32nd word of a kept row into the removed set, where one thread would OR them all.
// The warp synchronises after each kept row, so every lane sees the whole set before reading
// the next row's bit. k is the same in every lane, so all leave the loop together.
static __global__ void KeepRowsInWarp(KeepRows keep) {
  const GreedyBand& band = keep.band;
  const int64_t lane = threadIdx.x, s = blockIdx.x;
  const int64_t segment = band.first_segment + s, size = band.SizeOf(segment);
  uint64_t* removed = band.RemovedOf(segment);
  int64_t* kept = band.KeptOf(segment);
  int64_t k = band.kept_count[segment];
  for (int64_t r = 0; r < band.rows && k < band.limit; ++r) {
    const int64_t row = band.first_row + r;
    if (row >= size) break;
    if (IsSet(removed, row)) continue;
    if (lane == 0) kept[k] = row;
    ++k;
    const uint64_t* bits = band.MaskRow(keep.mask, s, r);
    for (int64_t w = row / kMaskBits + lane; w < band.words; w += 32) removed[w] |= bits[w];
    __syncwarp();
  }
  __syncwarp();  // every lane has read kept_count before lane 0 writes it
  if (lane == 0) band.kept_count[segment] = k;
}
#endif

// Keeps positions of each of `segments` sets greedily (see GreedyBand for sizes and limit):
// segment s's kept positions, in order, go to kept[s * KeptCapacity(count, limit) + k] and
// their number to kept_count[s] (device memory both; nothing is copied to the host).
// `suppresses(segment, i, j)`, for positions i < j of a segment, is called on the device.
template <typename Suppresses>
void GreedyKeepSegments(const DeviceIO& io, int64_t segments, int64_t count, const int64_t* sizes, int64_t limit,
                        const Suppresses& suppresses, int64_t* kept, int64_t* kept_count) {
  if (segments <= 0) return;
  io.Fill(kept_count, 0, static_cast<size_t>(segments) * sizeof(int64_t));
  if (count <= 0 || limit <= 0) return;
  const int64_t words = (count + kMaskBits - 1) / kMaskBits;
  // As many rows of every segment as fit; when one row of each does not, fewer segments.
  const int64_t rows = std::clamp<int64_t>(kMaxMaskWords / words / segments, 1, count);
  const int64_t mask_segments = std::clamp<int64_t>(kMaxMaskWords / words / rows, 1, segments);
  Scratch<uint64_t> mask = io.Allocate<uint64_t>(static_cast<size_t>(mask_segments * rows * words));
  Scratch<uint64_t> removed = io.Allocate<uint64_t>(static_cast<size_t>(segments * words));
  io.Fill(removed.data(), 0, removed.size() * sizeof(uint64_t));
  for (int64_t first_segment = 0; first_segment < segments; first_segment += mask_segments) {
    const int64_t band_segments = std::min(mask_segments, segments - first_segment);
    for (int64_t first_row = 0; first_row < count; first_row += rows) {
      const GreedyBand band{sizes, removed.data(), kept,          kept_count, count,
                            limit, words,          first_segment, first_row,  std::min(rows, count - first_row)};
      io.ForEach(band_segments * band.rows * words, MaskWord<Suppresses>{suppresses, mask.data(), band});
      const KeepRows keep{mask.data(), band};
#if defined(__CUDACC__)
      KeepRowsInWarp<<<static_cast<unsigned>(band_segments), 32, 0, io.stream()>>>(keep);
      io.CheckLaunch("the greedy pass of NMS");
#else
      io.ForEach(band_segments, keep);
#endif
    }
  }
}

// suppresses(i, j) of a single set as the segmented pass calls it.
template <typename Suppresses>
struct OneSegment {
  Suppresses suppresses;
  ORTOPS_HD bool operator()(int64_t, int64_t i, int64_t j) const { return suppresses(i, j); }
};

// Keeps positions of [0, count) greedily: writes the kept ones, in order, to kept[0, K) (device
// memory, count elements) and returns K, which it copies to the host (waiting for the stream).
// `suppresses(i, j)`, for positions i < j, is called on the device.
template <typename Suppresses>
int64_t GreedyKeep(const DeviceIO& io, int64_t count, const Suppresses& suppresses, int64_t* kept) {
  if (count <= 0) return 0;
  Scratch<int64_t> kept_count = io.Allocate<int64_t>(1);
  GreedyKeepSegments(io, 1, count, nullptr, count, OneSegment<Suppresses>{suppresses}, kept, kept_count.data());
  int64_t result = 0;
  io.CopyToHost(&result, kept_count.data(), 1);
  return result;
}

}  // namespace ortops::device
