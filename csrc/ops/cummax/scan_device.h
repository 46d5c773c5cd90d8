// The running maximum or minimum of scan.h on the device (CumMax / CumMin, CornerPool): one
// thread per line along the axis (two for float16), stepping with the CPU loops' own rule (Takes, Pick of
// scan_rows.h), so every value, bits included, and every index is the CPU kernel's. Lines
// along a non-innermost axis are read by neighbouring threads at neighbouring addresses.
#pragma once

#include <cstdint>

#include "device/device_io.h"
#include "device/vector_load.h"
#include "ops/cummax/scan_rows.h"

namespace ortops::scan {

// Lines kLines g to kLines g + kLines - 1 of the [outer, length, inner] input (line l: outer
// slice l / inner, inner position l % inner; kLines divides inner, so the lines are
// neighbours in one slice), every position along the axis in scan order, each line with its
// own running extreme. The lines are read kAhead positions at a time, all loads before the
// first use, so that a thread has that many in flight (a scan is bound by the latency of its
// loads), and neighbouring lines' values in one vector load where `aligned` (float16: two
// lines, so that a warp reads 128 bytes a step, as with float).
template <typename T, bool kMax, int kLines>
struct ScanLines {
  static constexpr int64_t kAhead = 8;
  const T* input;
  T* values;
  int64_t* indices;  // may be null
  Layout layout;
  bool reverse;
  bool aligned;  // input, values and indices aligned for runs of kLines (device::AlignedForRuns)

  ORTOPS_HD void operator()(int64_t group) const {
    const int64_t line = group * kLines, stride = layout.inner;
    const int64_t step = reverse ? -stride : stride;
    int64_t at = line / stride * layout.length * stride + line % stride + (reverse ? (layout.length - 1) * stride : 0);
    int64_t position = reverse ? layout.length - 1 : 0;
    // The first elements take over (Takes(x, x) holds), as from an identity.
    T best[kLines];
    device::LoadRun<kLines>(input + at, aligned, best);
    int64_t best_index[kLines];
    ORTOPS_UNROLL
    for (int j = 0; j < kLines; ++j) best_index[j] = position;
    for (int64_t s = 0; s < layout.length; s += kAhead) {
      const int64_t here = layout.length - s < kAhead ? layout.length - s : kAhead;
      T ahead[kAhead][kLines];
      ORTOPS_UNROLL
      for (int64_t u = 0; u < kAhead; ++u) {
        if (u < here) device::LoadRun<kLines>(input + at + u * step, aligned, ahead[u]);  // past the line: unused
      }
      ORTOPS_UNROLL
      for (int64_t u = 0; u < kAhead; ++u) {
        if (u >= here) break;
        ORTOPS_UNROLL
        for (int j = 0; j < kLines; ++j) {
          const bool take = rule::Takes<T, kMax>(ahead[u][j], best[j]);
          best[j] = rule::Pick(take, ahead[u][j], best[j]);
          best_index[j] = take ? position : best_index[j];
        }
        device::StoreRun<kLines>(values + at, aligned, best);
        if (indices != nullptr) device::StoreRun<kLines>(indices + at, aligned, best_index);
        at += step;
        position += reverse ? -1 : 1;
      }
    }
  }
};

// As CumulativeExtreme (scan.h), on the device. Float16 lines along an axis other than the
// innermost go two to a thread.
template <typename T, bool kMax>
void CumulativeExtremeOnDevice(const device::DeviceIO& io, const T* input, T* values, int64_t* indices, Layout layout,
                               bool reverse) {
  if (layout.outer * layout.length * layout.inner == 0) return;
  const int64_t lines = layout.outer * layout.inner;
  if (sizeof(T) == 2 && layout.inner % 2 == 0) {
    const bool aligned = device::AlignedForRuns<2>(input) && device::AlignedForRuns<2>(values) &&
                         (indices == nullptr || device::AlignedForRuns<2>(indices));
    io.ForEach(lines / 2, ScanLines<T, kMax, 2>{input, values, indices, layout, reverse, aligned});
    return;
  }
  io.ForEach(lines, ScanLines<T, kMax, 1>{input, values, indices, layout, reverse, false});
}

}  // namespace ortops::scan
