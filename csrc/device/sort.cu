#include <thrust/functional.h>
#include <thrust/sort.h>

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

// The segment of the item at each place of an order: a fixed run of segment_size, or given.
struct SegmentOf {
  const int64_t* order;
  const int64_t* given;
  int64_t* segment;
  int64_t segment_size;
  ORTOPS_HD void operator()(int64_t i) const {
    segment[i] = given != nullptr ? given[order[i]] : order[i] / segment_size;
  }
};

// Sorts `order` (by score already) stably by segment, so each segment keeps its score order.
void StableBySegment(const DeviceIO& io, int64_t count, const int64_t* given, int64_t segment_size, int64_t* order) {
  Scratch<int64_t> segment = io.Allocate<int64_t>(static_cast<size_t>(count));
  io.ForEach(count, SegmentOf{order, given, segment.data(), segment_size});
  thrust::stable_sort_by_key(io.policy(), segment.data(), segment.data() + count, order);
}

}  // namespace

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
  OrderByScore(io, scores, count, order);
  if (segments > 1) StableBySegment(io, count, nullptr, segment_size, order);
}

template <typename T>
void OrderByScoreWithinSegments(const DeviceIO& io, const T* scores, const int64_t* segment, int64_t count,
                                int64_t* order) {
  OrderByScore(io, scores, count, order);
  if (count > 1) StableBySegment(io, count, segment, 1, order);
}

#define ORTOPS_INSTANTIATE(T)                                                                         \
  template void OrderByScore<T>(const DeviceIO&, const T*, int64_t, int64_t*);                        \
  template void OrderByScoreWithinSegments<T>(const DeviceIO&, const T*, int64_t, int64_t, int64_t*); \
  template void OrderByScoreWithinSegments<T>(const DeviceIO&, const T*, const int64_t*, int64_t, int64_t*);
ORTOPS_INSTANTIATE(float)
ORTOPS_INSTANTIATE(double)
ORTOPS_INSTANTIATE(Half)
#undef ORTOPS_INSTANTIATE

}  // namespace ortops::device
