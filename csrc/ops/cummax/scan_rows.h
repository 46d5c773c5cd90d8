// The loops of the running maximum / minimum (scan.h), compiled per instruction-set level
// (core/isa.h) in scan_simd.cc.
#pragma once

#include <cstdint>

#include "core/half.h"
#include "core/isa.h"

namespace ortops::scan {

// A tensor viewed as [outer, length, inner], scanned along `length`.
struct Layout {
  int64_t outer, length, inner;
};

// values[i] = extreme of input over positions 0..i (or i..length-1 when `reverse`) along the
// axis; indices (may be null) receive the position it came from. torch.cummax/cummin's
// rules: ties take the later position, and a NaN, once seen, stays (each later NaN takes
// over its position).
template <typename T>
struct ScanArgs {
  const T* input;
  T* values;
  int64_t* indices;
  Layout layout;
  bool reverse;
  bool max;  // false: minimum
};

// ScanLines: with inner == 1, the contiguous lines [begin, end) of the outer * length input.
// ScanColumns: with inner > 1, outer slice `outer`, inner positions [begin, end) (at most
// kColumnChunk of them), every step along the axis.
inline constexpr int64_t kColumnChunk = 1024;
#define ORTOPS_SCAN_DECLARE(T)                                         \
  void ScanLines(const ScanArgs<T>& args, int64_t begin, int64_t end); \
  void ScanColumns(const ScanArgs<T>& args, int64_t outer, int64_t begin, int64_t end)
ORTOPS_ISA_DECLARE(ORTOPS_SCAN_DECLARE(float); ORTOPS_SCAN_DECLARE(double); ORTOPS_SCAN_DECLARE(int64_t);
                   ORTOPS_SCAN_DECLARE(Half))
#undef ORTOPS_SCAN_DECLARE

}  // namespace ortops::scan
