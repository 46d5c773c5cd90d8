// Score orders for the NMS family on the device: the order the CPU kernels visit boxes in,
// by descending score with ties by lower index (a stable sort). Compiled once, in sort.cu,
// for every element type, so that no op instantiates a sort of its own.
#pragma once

#include <cstdint>

#include "device/device_io.h"

namespace ortops::device {

// order[k] = the index of the box with the k-th highest of scores[0, count). -0 and +0 are
// equal, as they compare; scores hold no NaN.
template <typename T>
void OrderByScore(const DeviceIO& io, const T* scores, int64_t count, int64_t* order);

// The same within each of `segments` consecutive runs of `segment_size` scores (scores
// [B, C, N]: a segment per batch and class): order[s * segment_size + k] = the index, into
// all of scores, of the k-th highest score of segment s. Float scores (float16's too) take one
// radix sort of (segment, score) keys; double scores a sort by score, then a stable one by
// segment.
template <typename T>
void OrderByScoreWithinSegments(const DeviceIO& io, const T* scores, int64_t segments, int64_t segment_size,
                                int64_t* order);

// Sorts each of `segments` ranges [begin[s], end[s]) of keys (device memory, bounds included,
// ranges disjoint within [0, count)) by descending key, stably, carrying values along. The
// sort may move the ranges to the same places of the alternate arrays (each of count
// elements, its other places left as they were): returns 1 where it did, 0 where the result
// is in keys and values. Keys hold no NaN, and -0 only where +0 may rank after it. The
// ranges' bounds stay on the device: nothing comes back to the host (a segmented radix sort
// on a GPU, a block per range).
template <typename K>
int SortWithinRanges(const DeviceIO& io, K* keys, K* alternate_keys, int32_t* values, int32_t* alternate_values,
                     int64_t count, int64_t segments, const int64_t* begin, const int64_t* end);

}  // namespace ortops::device
