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

#include <thrust/copy.h>
#include <thrust/scan.h>

#include <algorithm>
#include <cstdint>

#include "device/device_io.h"
#include "device/greedy_chunk.h"

namespace ortops::device {

// A band's mask is at most this many 64-bit words (32 MiB).
inline constexpr int64_t kMaxMaskWords = int64_t{1} << 22;

// The kept positions a segment can hold: kept[s * KeptCapacity + k] is segment s's k-th.
inline int64_t KeptCapacity(int64_t count, int64_t limit) { return std::max<int64_t>(0, std::min(count, limit)); }

// The shape of a segmented greedy pass: `segments` sets of positions [0, size(s)), where
// size(s) = sizes[s] <= count (device memory), or count when sizes is null; at most `limit`
// kept per set. The mask covers segments [first_segment, + mask_segments) and rows
// [first_row, + rows) of each, `words` 64-bit words a row; first_row is a chunk's first.
//
// The mask is stored a row after another (Word): the greedy pass's threads take neighbouring
// words of the removed set, so a warp reads each kept row's words in one coalesced load. (In
// 64x64 tiles, which the mask's threads wrote at once, each thread's 512 bytes were lines of
// their own: a warp's load touched 32 lines, and it loaded every row of a half, kept or not.)
struct GreedyBand {
  const int64_t* sizes;
  uint64_t* removed;  // [segments, words]: the positions an earlier kept row suppresses
  int64_t* kept;      // [segments, KeptCapacity(count, limit)]
  int64_t* kept_count;
  int64_t count, limit, words, first_segment, first_row, rows;

  ORTOPS_HD int64_t SizeOf(int64_t segment) const { return sizes != nullptr ? sizes[segment] : count; }
  ORTOPS_HD uint64_t* RemovedOf(int64_t segment) const { return removed + segment * words; }
  ORTOPS_HD int64_t* KeptOf(int64_t segment) const { return kept + segment * (count < limit ? count : limit); }
  ORTOPS_HD int64_t Chunks() const { return (rows + kMaskBits - 1) / kMaskBits; }
  // Where word w of row `row` (of all rows) of the band's segment first_segment + s is.
  ORTOPS_HD int64_t Word(int64_t s, int64_t row, int64_t w) const {
    return (s * Chunks() * kMaskBits + row - first_row) * words + w;
  }
  // The end of the band's rows in a segment of `size` positions.
  ORTOPS_HD int64_t EndRow(int64_t size) const { return first_row + rows < size ? first_row + rows : size; }
  // The bits of chunk c's rows below end_row that are not removed.
  ORTOPS_HD static uint64_t LiveBits(const uint64_t* removed, int64_t c, int64_t end_row) {
    const int64_t valid = end_row - c * kMaskBits;
    const uint64_t in_range = valid >= kMaskBits ? ~uint64_t{0} : (uint64_t{1} << valid) - 1;
    return in_range & ~removed[c];
  }
};

// Mask word `w` of row 64 c + b of segment `first_segment + s`, for i = ((s chunks + c) words +
// w) 64 + b (a warp's threads take rows, and read the same candidates at once): bit u for
// position 64 w + u when it lies after the row and suppresses(segment, row, position). Rows
// past the segment's size, rows already removed and rows of a segment that has reached its
// limit are never read: they are not computed. Neither are words before the row's own.
template <typename Suppresses>
struct MaskWord {
  Suppresses suppresses;
  uint64_t* mask;
  GreedyBand band;

  ORTOPS_HD void operator()(int64_t i) const {
    const int64_t b = i % kMaskBits, w = i / kMaskBits % band.words, tile = i / (kMaskBits * band.words);
    const int64_t s = tile / band.Chunks(), segment = band.first_segment + s;
    const int64_t row = band.first_row + tile % band.Chunks() * kMaskBits + b;
    const int64_t size = band.SizeOf(segment);
    if (row >= band.EndRow(size) || w < row / kMaskBits || band.kept_count[segment] >= band.limit) return;
    if (IsSet(band.RemovedOf(segment), row)) return;
    // The word's positions after the row and inside the segment, as 32-bit offsets: the
    // loop below is the pass's hottest, and its bounds no longer need a test per position.
    const int64_t first = w * kMaskBits;
    const int begin = row + 1 > first ? static_cast<int>(row + 1 - first) : 0;
    const int end = size - first < kMaskBits ? static_cast<int>(size - first) : static_cast<int>(kMaskBits);
    uint64_t bits = 0;
    for (int u = begin; u < end; ++u) {
      if (suppresses(segment, row, first + u)) bits |= uint64_t{1} << u;
    }
    mask[band.Word(s, row, w)] = bits;
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
    for (int64_t c = band.first_row / kMaskBits; c * kMaskBits < end_row && k < band.limit; ++c) {
      const uint64_t live = GreedyBand::LiveBits(removed, c, end_row);
      // The live rows' words over the chunk's own positions (the others were not computed).
      uint64_t diagonal[kMaskBits];
      for (int b = 0; b < kMaskBits; ++b)
        diagonal[b] = (live & Bit(b)) != 0 ? mask[band.Word(s, c * kMaskBits + b, c)] : 0;
      const uint64_t kept_bits = ResolveChunk(diagonal, live, band.limit - k);
      for (uint64_t bits = kept_bits; bits != 0; bits &= bits - 1) kept[k++] = c * kMaskBits + LowestBit(bits);
      if (kept_bits == 0) continue;
      for (int64_t w = c + 1; w < band.words; ++w)
        removed[w] = RemovedAfter(mask + band.Word(s, c * kMaskBits, w), band.words, kept_bits, removed[w]);
    }
    band.kept_count[segment] = k;
  }
};

#if defined(__CUDACC__)
// Asks for the 128-byte line at `address` in the SM's L1 cache, without waiting for it.
__device__ inline void PrefetchToL1(const void* address) { asm volatile("prefetch.global.L1 [%0];" ::"l"(address)); }

// Removed sets of at most this many words (327,680 positions, 40 KiB) live in the block's
// shared memory during the pass; larger ones stay in device memory.
inline constexpr int64_t kSharedRemovedWords = 5120;
inline constexpr int kKeepThreads = 512;
// The next chunk's rows are fetched into L1 while a chunk is resolved when their later words
// take at most this many bytes (L1 holds 256 KiB, less the shared memory).
inline constexpr int64_t kPrefetchBytes = 128 * 1024;

// Asks for the lines that hold the words [first_word, words) of the live rows (`live`) of the
// band's chunk c of segment s in L1, thread t of `threads` taking every threads-th line.
__device__ inline void PrefetchRows(const uint64_t* mask, const GreedyBand& band, int64_t s, int64_t c, uint64_t live,
                                    int64_t first_word, int t, int threads) {
  constexpr int kLineBytes = 128;
  const int64_t row_bytes = (band.words - first_word) * static_cast<int64_t>(sizeof(uint64_t));
  if (live == 0 || row_bytes <= 0 || BitCount(live) * row_bytes > kPrefetchBytes) return;
  // The lines a row's words can touch, whatever the row's alignment; line `line` of row b is
  // item b span + line, and a thread steps over items without dividing.
  const int span = static_cast<int>((row_bytes + kLineBytes - 1) / kLineBytes) + 1;
  const int step_rows = threads / span, step_lines = threads % span;
  const uint64_t* first_row = mask + band.Word(s, c * kMaskBits, first_word);
  for (int b = t / span, line = t % span; b < kMaskBits;) {
    if ((live & Bit(b)) != 0) {
      const uint64_t* row = first_row + b * band.words;
      const uintptr_t address = reinterpret_cast<uintptr_t>(row) / kLineBytes * kLineBytes + line * kLineBytes;
      if (address < reinterpret_cast<uintptr_t>(row) + row_bytes) PrefetchToL1(reinterpret_cast<const void*>(address));
    }
    b += step_rows;
    line += step_lines;
    if (line >= span) {
      line -= span;
      ++b;
    }
  }
}

// KeepRows on a GPU (GPU only; KeepRows is its twin, which the emulated device runs and the
// tests check, with the same ResolveChunk and RemovedAfter): one block per segment. Per chunk,
// the first 64 threads put its diagonal in shared memory (loaded during the chunk before),
// every warp resolves the chunk from it (the same answer in each, so nothing is broadcast;
// the rows that suppress another are found by two warp votes, not a loop over 64 rows), and
// then each thread ORs the kept rows into its share of the later words. Meanwhile the next
// chunk's live rows are fetched into L1. Two barriers per chunk; the block's threads are a
// multiple of 32, so every lane takes part in the votes.
static __global__ void __launch_bounds__(kKeepThreads) KeepRowsInBlock(KeepRows keep, bool shared_removed) {
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
    __syncthreads();  // read below by other threads than wrote it
  }
  int64_t* kept = band.KeptOf(segment);
  // A diagonal word as loaded: the rows removed at the band's start were not computed, and
  // ResolveChunk reads live rows' only.
  const auto diagonal_word = [&](int64_t c) {
    return t < kMaskBits && c * kMaskBits + t < end_row ? keep.mask[band.Word(s, c * kMaskBits + t, c)] : 0;
  };
  uint64_t next_diagonal = diagonal_word(first_chunk);
  for (int64_t c = first_chunk; c * kMaskBits < end_row && k < band.limit; ++c) {
    if (t < kMaskBits) diagonal[t] = next_diagonal;
    next_diagonal = diagonal_word(c + 1);
    // The next chunk's rows that the chunks before this one leave live: read before the
    // barrier, since this chunk's threads write the removed words after it.
    const uint64_t next_live = (c + 1) * kMaskBits < end_row ? GreedyBand::LiveBits(removed, c + 1, end_row) : 0;
    __syncthreads();  // the diagonal, and the removed words of the chunk before
    // The next chunk ORs in the words after its own of the rows it keeps, which are among
    // next_live: into L1 now, while this chunk is resolved, so that the next chunk's loads
    // wait for L1, not for L2 (the loads of a chunk wait several times, a few at a time).
    PrefetchRows(keep.mask, band, s, c + 1, next_live, c + 2, static_cast<int>(t), static_cast<int>(threads));
    const uint64_t live = GreedyBand::LiveBits(removed, c, end_row);
    const uint64_t kept_bits = ResolveChunk(diagonal, live, band.limit - k, SuppressorsInWarp(diagonal, live));
    if (t < kMaskBits && (kept_bits & Bit(t)) != 0) kept[k + BitCount(kept_bits & (Bit(t) - 1))] = c * kMaskBits + t;
    if (kept_bits != 0) {
      for (int64_t w = c + 1 + t; w < band.words; w += threads) {
        removed[w] = RemovedAfter(keep.mask + band.Word(s, c * kMaskBits, w), band.words, kept_bits, removed[w]);
      }
    }
    k += BitCount(kept_bits);
    __syncthreads();  // `diagonal` is written again
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
  const int64_t mask_segments = std::clamp<int64_t>(kMaxMaskWords / words / (chunks * kMaskBits), 1, segments);
  Scratch<uint64_t> mask = io.Allocate<uint64_t>(static_cast<size_t>(mask_segments * chunks * kMaskBits * words));
  Scratch<uint64_t> removed = io.Allocate<uint64_t>(static_cast<size_t>(segments * words));
  io.Fill(removed.data(), 0, removed.size() * sizeof(uint64_t));
  for (int64_t first_segment = 0; first_segment < segments; first_segment += mask_segments) {
    const int64_t band_segments = std::min(mask_segments, segments - first_segment);
    for (int64_t first_row = 0; first_row < count; first_row += rows) {
      const GreedyBand band{sizes, removed.data(), kept,          kept_count, count,
                            limit, words,          first_segment, first_row,  std::min(rows, count - first_row)};
      io.ForEach(band_segments * band.Chunks() * words * kMaskBits,
                 MaskWord<Suppresses>{suppresses, mask.data(), band});
      const KeepRows keep{mask.data(), band};
#if defined(__CUDACC__)
      const bool shared_removed = words <= kSharedRemovedWords;
      const auto threads = static_cast<unsigned>(std::clamp<int64_t>((words + 31) / 32 * 32, kMaskBits, kKeepThreads));
      const size_t shared_bytes = shared_removed ? static_cast<size_t>(words) * sizeof(uint64_t) : 0;
      io.NoteLaunch();
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

// Row first[s] - kept_count[s] + k is (b, c, box index) for the k-th kept position of segment
// s = b classes + c (first: the inclusive scan of kept_count).
struct WriteBatchClassBoxRows {
  const int64_t* order;
  const int64_t* kept;
  const int64_t* kept_count;
  const int64_t* first;
  int64_t* out;
  int64_t capacity, classes, count;
  ORTOPS_HD void operator()(int64_t e) const {
    const int64_t s = e / capacity, k = e % capacity;
    if (k >= kept_count[s]) return;
    int64_t* row = out + 3 * (first[s] - kept_count[s] + k);
    row[0] = s / classes;
    row[1] = s % classes;
    row[2] = order[s * count + kept[e]] % count;
  }
};

// ONNX NonMaxSuppression's layout of what GreedyKeepSegments kept, as output `output` [rows, 3]
// int64, segment after segment: segment s = b classes + c keeps kept[s capacity + k] for
// k < kept_count[s], positions into its order order[s count + .] (box indices modulo count).
// The host waits once, for the number of rows it allocates, and with it reads `refused` (device
// memory: a check's first refused item, from DeviceIO::FirstWhereInto) where one is given:
// returns that (-1 where none), and allocates no output where it is not -1.
inline int64_t OutputBatchClassBoxRows(const DeviceIO& io, size_t output, int64_t segments, int64_t classes,
                                       int64_t count, int64_t capacity, const int64_t* order, const int64_t* kept,
                                       const int64_t* kept_count, const int64_t* refused = nullptr) {
  Scratch<int64_t> first = io.Allocate<int64_t>(static_cast<size_t>(segments) + 1);
  thrust::inclusive_scan(io.policy(), kept_count, kept_count + segments, first.data());
  int64_t host[2] = {0, -1};  // the rows, the refused item
  if (refused != nullptr) {
    thrust::copy(io.policy(), refused, refused + 1, first.data() + segments);
    io.CopyToHost(host, first.data() + segments - 1, 2);
  } else {
    io.CopyToHost(host, first.data() + segments - 1, 1);
  }
  if (host[1] >= 0) return host[1];
  const int64_t rows = host[0];
  int64_t* out = io.Output<int64_t>(output, {rows, 3});
  if (rows == 0) return -1;
  io.ForEach(segments * capacity,
             WriteBatchClassBoxRows{order, kept, kept_count, first.data(), out, capacity, classes, count});
  return -1;
}

}  // namespace ortops::device
