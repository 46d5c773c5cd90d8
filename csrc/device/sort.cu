#include <thrust/functional.h>
#include <thrust/sort.h>

#include <algorithm>
#include <bit>
#include <type_traits>

#if defined(__CUDACC__)
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>
#include <cub/util_type.cuh>
#endif

#include "core/half.h"
#include "device/sort.h"

namespace ortops::device {
namespace {

// The sort key of a score: in its compute type (float for float16, exactly), with -0 made
// +0 so that a radix sort of the bits orders them as comparisons do; beside it, its index.
template <typename T>
struct ScoreKey {
  const T* scores;
  ComputeType<T>* keys;
  int64_t* order;
  ORTOPS_HD void operator()(int64_t i) const {
    keys[i] = static_cast<ComputeType<T>>(scores[i]) + ComputeType<T>(0);
    order[i] = i;
  }
};

// The segment of the item at each place of an order: a fixed run of segment_size.
struct SegmentOf {
  const int64_t* order;
  int64_t* segment;
  int64_t segment_size;
  ORTOPS_HD void operator()(int64_t i) const { segment[i] = order[i] / segment_size; }
};

// Sorts `order` (by score already) stably by segment, so each segment keeps its score order.
void StableBySegment(const DeviceIO& io, int64_t count, int64_t segment_size, int64_t* order) {
  Scratch<int64_t> segment = io.Allocate<int64_t>(static_cast<size_t>(count));
  io.ForEach(count, SegmentOf{order, segment.data(), segment_size});
  thrust::stable_sort_by_key(io.policy(), segment.data(), segment.data() + count, order);
}

// A float score's bits as an unsigned key that ascends as the score descends (the sign bit
// flips positive scores below negative ones, the rest inverts within each sign); -0 becomes
// +0 first, as comparisons have them equal.
ORTOPS_HD inline uint32_t DescendingBits(float score) {
  const uint32_t bits = std::bit_cast<uint32_t>(score + 0.0f);
  return (bits & 0x80000000u) != 0 ? bits : ~bits & 0x7fffffffu;
}

// For float scores (float16's too) of at most 2^32 segments: one key per score, its segment
// in the high half and its descending bits in the low half, so that one stable radix sort of
// the low 32 + log2(segments) bits orders every segment at once; beside it, its index.
template <typename T>
struct SegmentScoreKey {
  const T* scores;
  uint64_t* keys;
  int64_t* order;
  int64_t segment_size;
  ORTOPS_HD void operator()(int64_t i) const {
    const auto segment = static_cast<uint64_t>(i / segment_size);
    keys[i] = segment << 32 | DescendingBits(static_cast<float>(scores[i]));
    order[i] = i;
  }
};

// Sorts keys (their bits [0, bits)) ascending, stably, carrying order_in along into order.
void SortByLowBits(const DeviceIO& io, uint64_t* keys, int64_t* order_in, int64_t* order, int64_t count, int bits) {
#if defined(__CUDACC__)
  Scratch<uint64_t> sorted_keys = io.Allocate<uint64_t>(static_cast<size_t>(count));
  size_t bytes = 0;
  const auto sort = [&](void* temporary) {
    return cub::DeviceRadixSort::SortPairs(temporary, bytes, keys, sorted_keys.data(), order_in, order, count, 0, bits,
                                           io.stream());
  };
  Check(sort(nullptr) == cudaSuccess, "the score sort could not be sized");
  Scratch<char> temporary = io.Allocate<char>(std::max<size_t>(bytes, 1));
  io.NoteLaunch();
  Check(sort(temporary.data()) == cudaSuccess, "the score sort could not start");
#else
  // Counted as the GPU's: its sorted keys and temporary storage, and its launch. The keys'
  // bits above `bits` are 0, so sorting all of them gives the same order.
  Scratch<uint64_t> sorted_keys = io.Allocate<uint64_t>(1);
  Scratch<char> temporary = io.Allocate<char>(1);
  static_cast<void>(bits);
  io.NoteLaunch();
  std::copy(order_in, order_in + count, order);
  thrust::stable_sort_by_key(thrust::cpp::par, keys, keys + count, order);
#endif
}

#if !defined(__CUDACC__)
// SortWithinRanges's twin on the emulated device: one range after another, into the
// alternate arrays (where a GPU's sort may leave it, so that the tests take that path).
template <typename K>
struct SortRange {
  const K* keys;
  const int32_t* values;
  const int64_t* begin;
  const int64_t* end;
  K* sorted_keys;
  int32_t* sorted_values;
  void operator()(int64_t s) const {
    std::copy(keys + begin[s], keys + end[s], sorted_keys + begin[s]);
    std::copy(values + begin[s], values + end[s], sorted_values + begin[s]);
    thrust::stable_sort_by_key(thrust::seq, sorted_keys + begin[s], sorted_keys + end[s], sorted_values + begin[s],
                               thrust::greater<K>());
  }
};
#endif

}  // namespace

template <typename K>
int SortWithinRanges(const DeviceIO& io, K* keys, K* alternate_keys, int32_t* values, int32_t* alternate_values,
                     int64_t count, int64_t segments, const int64_t* begin, const int64_t* end) {
  if (count <= 0 || segments <= 0) return 0;
#if defined(__CUDACC__)
  // Every range takes the same passes, so all end in the same buffer, which the host knows
  // from the key's width alone.
  cub::DoubleBuffer<K> key_buffers(keys, alternate_keys);
  cub::DoubleBuffer<int32_t> value_buffers(values, alternate_values);
  size_t bytes = 0;
  const auto sort = [&](void* temporary) {
    return cub::DeviceSegmentedRadixSort::SortPairsDescending(temporary, bytes, key_buffers, value_buffers, count,
                                                              segments, begin, end, 0, sizeof(K) * 8, io.stream());
  };
  Check(sort(nullptr) == cudaSuccess, "the segmented sort of batched NMS could not be sized");
  Scratch<char> temporary = io.Allocate<char>(std::max<size_t>(bytes, 1));
  io.NoteLaunch();
  Check(sort(temporary.data()) == cudaSuccess, "the segmented sort of batched NMS could not start");
  return key_buffers.selector;
#else
  // Counted as the GPU's: its temporary storage, and its launch.
  Scratch<char> temporary = io.Allocate<char>(1);
  io.ForEach(segments, SortRange<K>{keys, values, begin, end, alternate_keys, alternate_values});
  return 1;
#endif
}

template <typename T>
void OrderByScore(const DeviceIO& io, const T* scores, int64_t count, int64_t* order) {
  if (count <= 0) return;
  using Key = ComputeType<T>;
  Scratch<Key> keys = io.Allocate<Key>(static_cast<size_t>(count));
  io.ForEach(count, ScoreKey<T>{scores, keys.data(), order});
  thrust::stable_sort_by_key(io.policy(), keys.data(), keys.data() + count, order, thrust::greater<Key>());
}

template <typename T>
void OrderByScoreWithinSegments(const DeviceIO& io, const T* scores, int64_t segments, int64_t segment_size,
                                int64_t* order) {
  const int64_t count = segments * segment_size;
  if constexpr (std::is_same_v<ComputeType<T>, float>) {
    if (segments > 1 && count > 0 && segments <= (int64_t{1} << 32)) {
      const auto size = static_cast<size_t>(count);
      Scratch<uint64_t> keys = io.Allocate<uint64_t>(size);
      Scratch<int64_t> order_in = io.Allocate<int64_t>(size);
      io.ForEach(count, SegmentScoreKey<T>{scores, keys.data(), order_in.data(), segment_size});
      SortByLowBits(io, keys.data(), order_in.data(), order, count,
                    32 + static_cast<int>(std::bit_width(static_cast<uint64_t>(segments - 1))));
      return;
    }
  }
  OrderByScore(io, scores, count, order);
  if (segments > 1) StableBySegment(io, count, segment_size, order);
}

#define ORTOPS_INSTANTIATE(T)                                                  \
  template void OrderByScore<T>(const DeviceIO&, const T*, int64_t, int64_t*); \
  template void OrderByScoreWithinSegments<T>(const DeviceIO&, const T*, int64_t, int64_t, int64_t*);
ORTOPS_INSTANTIATE(float)
ORTOPS_INSTANTIATE(double)
ORTOPS_INSTANTIATE(Half)
#undef ORTOPS_INSTANTIATE

template int SortWithinRanges<float>(const DeviceIO&, float*, float*, int32_t*, int32_t*, int64_t, int64_t,
                                     const int64_t*, const int64_t*);
template int SortWithinRanges<double>(const DeviceIO&, double*, double*, int32_t*, int32_t*, int64_t, int64_t,
                                      const int64_t*, const int64_t*);

}  // namespace ortops::device
