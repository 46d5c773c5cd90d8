// Stream compaction on the device: the items of [0, count) that pass a test, in order, for
// the NMS family's data-dependent selections (candidates above a score threshold, kept rows
// to report). One selection pass (CUB's on a GPU) writes the passing items and their number.
#pragma once

#include <thrust/copy.h>
#include <thrust/iterator/counting_iterator.h>

#include <cstdint>

#include "device/device_io.h"

namespace ortops::device {

// Writes the passing items of [0, count), in order, to items (device memory, room for all
// count) and returns how many, which comes back to the host (the stream is waited for): for
// an output whose size they decide.
template <typename Passes>
int64_t Compact(const DeviceIO& io, int64_t count, const Passes& passes, int64_t* items) {
  if (count <= 0) return 0;
  io.RequireNoCapture("the host must read what the device computed (an output's size)");
  const thrust::counting_iterator<int64_t> first(0);
  const int64_t passing = thrust::copy_if(io.policy(), first, first + count, items, passes) - items;
  io.NoteWait();
  return passing;
}

}  // namespace ortops::device
