// Running maximum or minimum along one axis of a tensor viewed as [outer, length, inner],
// with torch.cummax/cummin's rules (scan_rows.h); the loops are in scan_simd.cc.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/kernel_io.h"
#include "ops/cummax/scan_rows.h"

namespace ortops::scan {

// Parallel over lines (the axis innermost) or over outer slices and chunks of the inner
// dimension (each step along the axis then updates a contiguous inner row).
template <typename T, bool kMax>
void CumulativeExtreme(const KernelIO& io, const T* input, T* values, int64_t* indices, Layout layout, bool reverse) {
  if (layout.outer * layout.length * layout.inner == 0) return;
  const ScanArgs<T> args{input, values, indices, layout, reverse, kMax};
  if (layout.inner == 1) {
    io.ParallelForRanges(static_cast<size_t>(layout.outer), 256, [&](size_t begin, size_t end) {
      ORTOPS_ISA_CALL(ScanLines, args, static_cast<int64_t>(begin), static_cast<int64_t>(end));
    });
    return;
  }
  const int64_t chunks = (layout.inner + kColumnChunk - 1) / kColumnChunk;
  io.ParallelFor(static_cast<size_t>(layout.outer * chunks), [&](size_t task) {
    const int64_t o = static_cast<int64_t>(task) / chunks;
    const int64_t begin = (static_cast<int64_t>(task) % chunks) * kColumnChunk;
    ORTOPS_ISA_CALL(ScanColumns, args, o, begin, std::min(layout.inner, begin + kColumnChunk));
  });
}

}  // namespace ortops::scan
