// Greedy non-maximum suppression for many sets that each keep a few positions (the batched
// NMS nodes: a set per image and class, at most max_output kept of each), without the host
// knowing any set's size. device/greedy_nms.h tests every pair of a set into a bit mask first,
// which needs the largest set's size on the host to shape its launches and bound its memory,
// and so a wait. Here each set's positions are visited 64 at a time (a chunk): each is tested
// against the positions kept so far (at most `limit`), then against the chunk's other
// positions (its 64x64 diagonal), and device/greedy_chunk.h's ResolveChunk keeps the
// survivors in order. A set of n positions costs n x (kept + 64) tests, not n^2 / 2, and the
// launch is one block per set, whatever the sets' sizes: nothing comes back to the host.
#pragma once

#include <cstdint>

#include "device/device_io.h"
#include "device/greedy_chunk.h"

namespace ortops::device {

// `segments` sets: set s has positions [0, sizes[s]) (device memory), keeps at most `limit`,
// and writes its kept positions, in order, to kept[s * capacity + k] (capacity >= the most a
// set can keep) and their number to kept_count[s].
struct GreedySets {
  const int64_t* sizes;
  int64_t* kept;
  int64_t* kept_count;
  int64_t capacity, limit;
};

// The bits of a chunk whose first position leaves `remaining` positions in its set.
ORTOPS_HD inline uint64_t ChunkBits(int64_t remaining) {
  return remaining >= kMaskBits ? ~uint64_t{0} : (uint64_t{1} << remaining) - 1;
}

// The greedy pass of set s, one after another: what the emulated device runs (and the GPU's
// KeepAgainstKeptInBlock does with a block of threads). suppresses(s, i, j) for positions
// i < j of set s.
template <typename Suppresses>
struct KeepAgainstKept {
  Suppresses suppresses;
  GreedySets sets;

  ORTOPS_HD void operator()(int64_t s) const {
    const int64_t size = sets.sizes[s];
    int64_t* kept = sets.kept + s * sets.capacity;
    int64_t k = 0;
    uint64_t diagonal[kMaskBits];
    for (int64_t first = 0; first < size && k < sets.limit; first += kMaskBits) {
      uint64_t live = ChunkBits(size - first);
      for (uint64_t bits = live; bits != 0; bits &= bits - 1) {
        const int b = LowestBit(bits);
        for (int64_t j = 0; j < k; ++j) {
          if (suppresses(s, kept[j], first + b)) {
            live &= ~Bit(b);
            break;
          }
        }
      }
      for (uint64_t bits = live; bits != 0; bits &= bits - 1) {
        const int b = LowestBit(bits);
        uint64_t word = 0;
        for (uint64_t later = live & ~(Bit(b) | (Bit(b) - 1)); later != 0; later &= later - 1) {
          const int u = LowestBit(later);
          if (suppresses(s, first + b, first + u)) word |= Bit(u);
        }
        diagonal[b] = word;
      }
      const uint64_t kept_bits = ResolveChunk(diagonal, live, sets.limit - k);
      for (uint64_t bits = kept_bits; bits != 0; bits &= bits - 1) kept[k++] = first + LowestBit(bits);
    }
    sets.kept_count[s] = k;
  }
};

#if defined(__CUDACC__)
// Four groups of 64 threads: thread t takes row t % 64 of each chunk, and the kept positions
// and diagonal columns of group t / 64.
inline constexpr int kAgainstKeptThreads = 256;

// KeepAgainstKept on a GPU (GPU only; KeepAgainstKept is its twin, which the emulated device
// runs and the tests check, with the same ResolveChunk): one block per set. Per chunk, every
// thread tests its row against its share of the kept positions and of the chunk's later
// rows, OR-ing what it finds into shared words; after a barrier every warp resolves the
// chunk from them (the same answer in each), and the first 64 threads write the kept rows.
// The shared words are double-buffered, so a chunk takes two barriers.
template <typename Suppresses>
static __global__ void __launch_bounds__(kAgainstKeptThreads) KeepAgainstKeptInBlock(KeepAgainstKept<Suppresses> keep) {
  __shared__ uint64_t diagonal[2][kMaskBits];
  __shared__ unsigned long long removed[2];  // rows a kept position suppresses
  const GreedySets& sets = keep.sets;
  const int64_t s = blockIdx.x, size = sets.sizes[s];
  int64_t* kept = sets.kept + s * sets.capacity;
  constexpr int kWordBits = static_cast<int>(kMaskBits);
  const int t = static_cast<int>(threadIdx.x), row = t % kWordBits;
  const int group = t / kWordBits, groups = static_cast<int>(blockDim.x) / kWordBits;
  if (t < kWordBits) diagonal[0][t] = diagonal[1][t] = 0;
  if (t == 0) removed[0] = removed[1] = 0;
  __syncthreads();
  int64_t k = 0;
  int buffer = 0;
  for (int64_t first = 0; first < size && k < sets.limit; first += kMaskBits, buffer ^= 1) {
    const uint64_t in_range = ChunkBits(size - first);
    if ((in_range & Bit(row)) != 0) {
      bool suppressed = false;
      for (int64_t j = group; j < k && !suppressed; j += groups) suppressed = keep.suppresses(s, kept[j], first + row);
      if (suppressed) atomicOr(&removed[buffer], static_cast<unsigned long long>(Bit(row)));
      uint64_t word = 0;
      // Columns u > row with u % groups == group.
      for (int u = row + 1 + (group - row - 1 + kWordBits * groups) % groups; u < kWordBits; u += groups) {
        if ((in_range & Bit(u)) != 0 && keep.suppresses(s, first + row, first + u)) word |= Bit(u);
      }
      if (word != 0) atomicOr(reinterpret_cast<unsigned long long*>(&diagonal[buffer][row]), word);
    }
    __syncthreads();  // the chunk's words
    const uint64_t live = in_range & ~removed[buffer];
    const uint64_t kept_bits =
        ResolveChunk(diagonal[buffer], live, sets.limit - k, SuppressorsInWarp(diagonal[buffer], live));
    if (t < kWordBits && (kept_bits & Bit(t)) != 0) kept[k + BitCount(kept_bits & (Bit(t) - 1))] = first + t;
    k += BitCount(kept_bits);
    // The other buffer was last read before the barrier above: cleared for the next chunk.
    if (t < kWordBits) diagonal[buffer ^ 1][t] = 0;
    if (t == 0) removed[buffer ^ 1] = 0;
    __syncthreads();  // the kept rows, and the cleared buffer
  }
  if (t == 0) sets.kept_count[s] = k;
}
#endif

// Keeps positions of each set greedily (see GreedySets); `suppresses(s, i, j)`, for positions
// i < j of set s, is called on the device. One launch; the host never waits.
template <typename Suppresses>
void GreedyKeepAgainstKept(const DeviceIO& io, int64_t segments, const GreedySets& sets, const Suppresses& suppresses) {
  if (segments <= 0) return;
  const KeepAgainstKept<Suppresses> keep{suppresses, sets};
#if defined(__CUDACC__)
  io.NoteLaunch();
  KeepAgainstKeptInBlock<<<static_cast<unsigned>(segments), kAgainstKeptThreads, 0, io.stream()>>>(keep);
  io.CheckLaunch("the greedy pass of batched NMS");
#else
  io.ForEach(segments, keep);
#endif
}

}  // namespace ortops::device
