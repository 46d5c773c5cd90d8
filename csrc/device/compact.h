// Stream compaction on the device: the items of [0, count) that pass a test, in order, for
// the NMS family's data-dependent selections (candidates above a score threshold, kept rows
// to report). An inclusive count of the passing items places each one.
#pragma once

#include <thrust/scan.h>

#include <cstdint>

#include "device/device_io.h"

namespace ortops::device {

template <typename Passes>
struct PassCount {
  Passes passes;
  int64_t* places;
  ORTOPS_HD void operator()(int64_t i) const { places[i] = passes(i) ? 1 : 0; }
};

// places[i] = how many items of [0, i] pass (queued on the stream; nothing waits).
template <typename Passes>
void CountPassing(const DeviceIO& io, int64_t count, const Passes& passes, int64_t* places) {
  if (count <= 0) return;
  io.ForEach(count, PassCount<Passes>{passes, places});
  thrust::inclusive_scan(io.policy(), places, places + count, places);
}

// items[places[i] - 1] = i for every passing item i (one more than the count before it).
struct PlacePassing {
  const int64_t* places;
  int64_t* items;
  ORTOPS_HD void operator()(int64_t i) const {
    if (places[i] != (i > 0 ? places[i - 1] : 0)) items[places[i] - 1] = i;
  }
};

// Writes the passing items of [0, count), in order, to items (device memory, room for all
// count) and returns how many, which it copies to the host (waiting for the stream): for
// an output whose size they decide.
template <typename Passes>
int64_t Compact(const DeviceIO& io, int64_t count, const Passes& passes, int64_t* items) {
  if (count <= 0) return 0;
  Scratch<int64_t> places = io.Allocate<int64_t>(static_cast<size_t>(count));
  CountPassing(io, count, passes, places.data());
  int64_t total = 0;
  io.CopyToHost(&total, places.data() + count - 1, 1);
  io.ForEach(count, PlacePassing{places.data(), items});
  return total;
}

}  // namespace ortops::device
