// Greedy non-maximum suppression on the device, over boxes already in visiting order (the
// order of the CPU kernels' greedy loop): position j is dropped when a kept position i < j
// suppresses it. As on GPUs since Faster R-CNN: every pair's test runs in parallel into a
// bit mask (row i: the positions i suppresses), then a pass over the rows in order keeps a
// row unless an earlier kept row's bits remove it. The mask is made for a band of rows at a
// time, so its memory stays bounded whatever the count.
//
// The pass resolves 64 rows (one mask word, a chunk) per step, not one: which of the chunk's
// live rows survive depends only on the chunk's own 64x64 diagonal block of the mask
// (ResolveChunk), and the kept rows' later words are then OR-ed into the removed set in
// parallel, one word per thread. So 10k boxes take 157 dependent steps, not 10k.
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
// A band's mask is at most this many 64-bit words (32 MiB).
inline constexpr int64_t kMaxMaskWords = int64_t{1} << 22;

// The kept positions a segment can hold: kept[s * KeptCapacity + k] is segment s's k-th.
inline int64_t KeptCapacity(int64_t count, int64_t limit) { return std::max<int64_t>(0, std::min(count, limit)); }

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
ORTOPS_HD inline int BitCount(uint64_t bits) {
#if defined(__CUDA_ARCH__)
  return __popcll(bits);
#else
  return __builtin_popcountll(bits);
#endif
}

// The greedy decision within one chunk: of the `live` rows (not removed by earlier chunks),
// in order, each is kept unless a row kept before it in the chunk suppresses it;
// diagonal[b] is row b's mask word over the chunk's own positions (bits after b only). At
// most `room` rows are kept. Returns the kept rows' bits.
ORTOPS_HD inline uint64_t ResolveChunk(const uint64_t* diagonal, uint64_t live, int64_t room) {
  uint64_t kept = 0;
  for (; live != 0 && room > 0; --room) {
    const int b = LowestBit(live);
    kept |= Bit(b);
    live &= ~diagonal[b] & ~Bit(b);
  }
  return kept;
}

// The shape of a segmented greedy pass: `segments` sets of positions [0, size(s)), where
// size(s) = sizes[s] <= count (device memory), or count when sizes is null; at most `limit`
// kept per set. The mask covers segments [first_segment, + mask_segments) and rows
// [first_row, + rows) of each, `words` 64-bit words a row; first_row is a chunk's first.
struct GreedyBand {
  const int64_t* sizes;
  uint64_t* removed;  // [segments, words]: the positions an earlier kept row suppresses
  int64_t* kept;      // [segments, KeptCapacity(count, limit)]
  int64_t* kept_count;
  int64_t count, limit, words, first_segment, first_row, rows;

  ORTOPS_HD int64_t SizeOf(int64_t segment) const { return sizes != nullptr ? sizes[segment] : count; }
  ORTOPS_HD uint64_t* RemovedOf(int64_t segment) const { return removed + segment * words; }
  ORTOPS_HD int64_t* KeptOf(int64_t segment) const { return kept + segment * (count < limit ? count : limit); }
  // Row `row` (of the band) of the band's segment first_segment + s in `mask`.
  ORTOPS_HD const uint64_t* MaskRow(const uint64_t* mask, int64_t s, int64_t row) const {
    return mask + (s * rows + row - first_row) * words;
  }
  // The end of the band's rows in a segment of `size` positions.
  ORTOPS_HD int64_t EndRow(int64_t size) const { return first_row + rows < size ? first_row + rows : size; }
  // The bits of chunk c's rows below end_row that are not removed.
  ORTOPS_HD static uint64_t LiveBits(const uint64_t* removed, int64_t c, int64_t end_row) {
    const int64_t valid = end_row - c * kMaskBits;
    const uint64_t in_range = valid >= kMaskBits ? ~uint64_t{0} : (uint64_t{1} << valid) - 1;
    return in_range & ~removed[c];
  }
  // Word w of the removed set once chunk c's kept rows `kept_bits` have suppressed theirs.
  ORTOPS_HD uint64_t RemovedAfter(const uint64_t* mask, int64_t s, int64_t c, uint64_t kept_bits, uint64_t word,
                                  int64_t w) const {
    // Four rows' loads at a time, all issued before their first use.
    while (kept_bits != 0) {
      uint64_t rows_bits[4];
      ORTOPS_UNROLL
      for (int q = 0; q < 4; ++q) {
        rows_bits[q] = kept_bits != 0 ? MaskRow(mask, s, c * kMaskBits + LowestBit(kept_bits))[w] : 0;
        kept_bits &= kept_bits - 1;
      }
      word |= rows_bits[0] | rows_bits[1] | rows_bits[2] | rows_bits[3];
    }
    return word;
  }
};

// Mask word `w` of row `first_row + r` of segment `first_segment + s`, for i = (s words + w)
// rows + r (neighbouring threads take neighbouring rows of one word, so that they read the
// same candidates at once): bit b for position 64 w + b when it lies after the row and
// suppresses(segment, row, position). Rows past the segment's size, rows already removed and
// rows of a segment that has reached its limit are never read: they are not computed.
// Neither are words before the row's own.
template <typename Suppresses>
struct MaskWord {
  Suppresses suppresses;
  uint64_t* mask;
  GreedyBand band;

  ORTOPS_HD void operator()(int64_t i) const {
    const int64_t r = i % band.rows, w = i / band.rows % band.words, s = i / (band.rows * band.words);
    const int64_t segment = band.first_segment + s, row = band.first_row + r;
    const int64_t size = band.SizeOf(segment);
    if (row >= size || w < row / kMaskBits || band.kept_count[segment] >= band.limit) return;
    if (IsSet(band.RemovedOf(segment), row)) return;
    uint64_t bits = 0;
    const int64_t end = (w + 1) * kMaskBits < size ? (w + 1) * kMaskBits : size;
    for (int64_t j = w * kMaskBits > row + 1 ? w * kMaskBits : row + 1; j < end; ++j) {
      if (suppresses(segment, row, j)) bits |= Bit(j);
    }
    mask[(s * band.rows + r) * band.words + w] = bits;
  }
};

// The greedy pass over a band's rows of segment `first_segment + s`, a chunk at a time: one
// sequential walk per segment (a block of threads on a GPU: KeepRowsInBlock), carrying the
// removed positions and the kept count across bands.
struct KeepRows {
  const uint64_t* mask;
  GreedyBand band;

  ORTOPS_HD void operator()(int64_t s) const {
    const int64_t segment = band.first_segment + s, end_row = band.EndRow(band.SizeOf(segment));
    uint64_t* removed = band.RemovedOf(segment);
    int64_t* kept = band.KeptOf(segment);
    int64_t k = band.kept_count[segment];
    uint64_t diagonal[kMaskBits];
    for (int64_t c = band.first_row / kMaskBits; c * kMaskBits < end_row && k < band.limit; ++c) {
      const uint64_t live = GreedyBand::LiveBits(removed, c, end_row);
      for (int64_t b = 0; b < kMaskBits; ++b) {
        diagonal[b] = (live & Bit(b)) != 0 ? band.MaskRow(mask, s, c * kMaskBits + b)[c] : 0;
      }
      const uint64_t kept_bits = ResolveChunk(diagonal, live, band.limit - k);
      for (uint64_t bits = kept_bits; bits != 0; bits &= bits - 1) kept[k++] = c * kMaskBits + LowestBit(bits);
      for (int64_t w = c + 1; w < band.words; ++w) removed[w] = band.RemovedAfter(mask, s, c, kept_bits, removed[w], w);
    }
    band.kept_count[segment] = k;
  }
};

#if defined(__CUDACC__)
// Removed sets of at most this many words (327,680 positions, 40 KiB) live in the block's
// shared memory during the pass; larger ones stay in device memory.
inline constexpr int64_t kSharedRemovedWords = 5120;

// KeepRows on a GPU (GPU only; KeepRows is its twin, which the emulated device runs and the
// tests check, with the same ResolveChunk and RemovedAfter): one block per segment. Per
// chunk, the first 64 threads load the live rows' diagonal words, every thread resolves the
// chunk from them (the same answer in each, so no broadcast is needed), and then each thread
// ORs the kept rows into its share of the later words. Two barriers per chunk.
static __global__ void KeepRowsInBlock(KeepRows keep, bool shared_removed) {
  extern __shared__ uint64_t removed_in_shared[];
  __shared__ uint64_t diagonal[kMaskBits];
  const GreedyBand& band = keep.band;
  const int64_t s = blockIdx.x, segment = band.first_segment + s;
  const int64_t end_row = band.EndRow(band.SizeOf(segment));
  int64_t k = band.kept_count[segment];
  if (k >= band.limit || band.first_row >= end_row) return;  // the same in every thread
  const int64_t first_chunk = band.first_row / kMaskBits, t = threadIdx.x, threads = blockDim.x;
  uint64_t* removed = band.RemovedOf(segment);
  if (shared_removed) {
    for (int64_t w = first_chunk + t; w < band.words; w += threads) removed_in_shared[w] = removed[w];
    removed = removed_in_shared;
    __syncthreads();
  }
  int64_t* kept = band.KeptOf(segment);
  for (int64_t c = first_chunk; c * kMaskBits < end_row && k < band.limit; ++c) {
    const uint64_t live = GreedyBand::LiveBits(removed, c, end_row);
    if (t < kMaskBits) diagonal[t] = (live & Bit(t)) != 0 ? band.MaskRow(keep.mask, s, c * kMaskBits + t)[c] : 0;
    __syncthreads();
    const uint64_t kept_bits = ResolveChunk(diagonal, live, band.limit - k);
    if (t < kMaskBits && (kept_bits & Bit(t)) != 0) kept[k + BitCount(kept_bits & (Bit(t) - 1))] = c * kMaskBits + t;
    if (kept_bits != 0) {
      for (int64_t w = c + 1 + t; w < band.words; w += threads) {
        removed[w] = band.RemovedAfter(keep.mask, s, c, kept_bits, removed[w], w);
      }
    }
    k += BitCount(kept_bits);
    __syncthreads();  // the removed words and `diagonal` are read again by the next chunk
  }
  if (shared_removed) {
    for (int64_t w = first_chunk + t; w < band.words; w += threads) band.RemovedOf(segment)[w] = removed[w];
  }
  if (t == 0) band.kept_count[segment] = k;
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
  // As many whole chunks of every segment as fit; when one chunk of each does not, fewer
  // segments.
  const int64_t chunks = std::clamp<int64_t>(kMaxMaskWords / words / segments / kMaskBits, 1, words);
  const int64_t rows = std::min(chunks * kMaskBits, count);
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
      const bool shared_removed = words <= kSharedRemovedWords;
      const auto threads = static_cast<unsigned>(std::clamp<int64_t>((words + 31) / 32 * 32, kMaskBits, 512));
      const size_t shared_bytes = shared_removed ? static_cast<size_t>(words) * sizeof(uint64_t) : 0;
      KeepRowsInBlock<<<static_cast<unsigned>(band_segments), threads, shared_bytes, io.stream()>>>(keep,
                                                                                                    shared_removed);
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
// memory, count elements) and K to kept_count[0] (device memory). `suppresses(i, j)`, for
// positions i < j, is called on the device.
template <typename Suppresses>
void GreedyKeep(const DeviceIO& io, int64_t count, const Suppresses& suppresses, int64_t* kept, int64_t* kept_count) {
  GreedyKeepSegments(io, 1, count, nullptr, count, OneSegment<Suppresses>{suppresses}, kept, kept_count);
}

}  // namespace ortops::device
