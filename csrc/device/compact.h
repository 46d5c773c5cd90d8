// Stream compaction on the device: the items of [0, count) that pass a test, in order, for
// the NMS family's data-dependent selections (kept rows to report). An inclusive scan ranks
// the passing items and one pass writes them and their number, all on the stream: the host
// reads the number with whatever else it copies for the output's size, in one wait.
#pragma once

#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform_scan.h>

#include <cstdint>

#include "device/device_io.h"

namespace ortops::device {

template <typename Passes>
struct PassesAsOne {
  Passes passes;
  ORTOPS_HD int64_t operator()(int64_t i) const { return passes(i) ? 1 : 0; }
};

// Item i of [0, count) to items[rank[i] - 1] where it passes; the last item writes the count.
template <typename Passes>
struct WritePassing {
  Passes passes;
  const int64_t* rank;  // inclusive: the passing items up to and including i
  int64_t* items;
  int64_t* passing;
  int64_t count;
  ORTOPS_HD void operator()(int64_t i) const {
    if (passes(i)) items[rank[i] - 1] = i;
    if (i == count - 1) *passing = rank[i];
  }
};

// Writes the passing items of [0, count), in order, to items (device memory, room for all
// count) and how many pass to *passing (device memory). Nothing waits.
template <typename Passes>
void CompactInto(const DeviceIO& io, int64_t count, const Passes& passes, int64_t* items, int64_t* passing) {
  if (count <= 0) {
    io.Fill(passing, 0, sizeof(int64_t));
    return;
  }
  Scratch<int64_t> rank = io.Allocate<int64_t>(static_cast<size_t>(count));
  const thrust::counting_iterator<int64_t> first(0);
  thrust::transform_inclusive_scan(io.policy(), first, first + count, rank.data(), PassesAsOne<Passes>{passes},
                                   thrust::plus<int64_t>());
  io.ForEach(count, WritePassing<Passes>{passes, rank.data(), items, passing, count});
}

}  // namespace ortops::device
