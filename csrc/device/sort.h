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
// all of scores, of the k-th highest score of segment s.
template <typename T>
void OrderByScoreWithinSegments(const DeviceIO& io, const T* scores, int64_t segments, int64_t segment_size,
                                int64_t* order);

// The same with item i in segment[i] (device memory; any int64 values): order lists the items
// by ascending segment, then descending score, then index. Items of one segment need not be
// contiguous.
template <typename T>
void OrderByScoreWithinSegments(const DeviceIO& io, const T* scores, const int64_t* segment, int64_t count,
                                int64_t* order);

}  // namespace ortops::device
