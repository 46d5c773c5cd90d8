// The running maximum or minimum of scan.h on the device (CumMax / CumMin, CornerPool): one
// thread per line along the axis, stepping with the CPU loops' own rule (Takes, Pick of
// scan_rows.h), so every value, bits included, and every index is the CPU kernel's. Lines
// along a non-innermost axis are read by neighbouring threads at neighbouring addresses.
#pragma once

#include <cstdint>

#include "device/device_io.h"
#include "ops/cummax/scan_rows.h"

namespace ortops::scan {

// Line `line` of the [outer, length, inner] input: outer slice line / inner, inner position
// line % inner, every position along the axis in scan order. The line is read kAhead
// positions at a time, all loads before the first use, so that a thread has that many in
// flight (a scan is bound by the latency of its loads, one thread per line).
template <typename T, bool kMax>
struct ScanLine {
  static constexpr int64_t kAhead = 8;
  const T* input;
  T* values;
  int64_t* indices;  // may be null
  Layout layout;
  bool reverse;

  ORTOPS_HD void operator()(int64_t line) const {
    const int64_t stride = layout.inner;
    const int64_t step = reverse ? -stride : stride;
    int64_t at = line / stride * layout.length * stride + line % stride + (reverse ? (layout.length - 1) * stride : 0);
    int64_t position = reverse ? layout.length - 1 : 0;
    // The first element takes over (Takes(x, x) holds), as from an identity.
    T best = input[at];
    int64_t best_index = position;
    for (int64_t s = 0; s < layout.length; s += kAhead) {
      const int64_t here = layout.length - s < kAhead ? layout.length - s : kAhead;
      T ahead[kAhead];
      ORTOPS_UNROLL
      for (int64_t u = 0; u < kAhead; ++u) {
        ahead[u] = u < here ? input[at + u * step] : best;  // past the line: never used
      }
      ORTOPS_UNROLL
      for (int64_t u = 0; u < kAhead; ++u) {
        if (u >= here) break;
        const bool take = rule::Takes<T, kMax>(ahead[u], best);
        best = rule::Pick(take, ahead[u], best);
        best_index = take ? position : best_index;
        values[at] = best;
        if (indices != nullptr) indices[at] = best_index;
        at += step;
        position += reverse ? -1 : 1;
      }
    }
  }
};

// As CumulativeExtreme (scan.h), on the device.
template <typename T, bool kMax>
void CumulativeExtremeOnDevice(const device::DeviceIO& io, const T* input, T* values, int64_t* indices, Layout layout,
                               bool reverse) {
  if (layout.outer * layout.length * layout.inner == 0) return;
  io.ForEach(layout.outer * layout.inner, ScanLine<T, kMax>{input, values, indices, layout, reverse});
}

}  // namespace ortops::scan
