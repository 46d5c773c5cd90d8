// The loops of the running maximum / minimum (scan.h), compiled per instruction-set level
// (core/isa.h) in scan_simd.cc, and the rule of one step, which the device path
// (scan_device.h) takes too.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/half.h"
#include "core/host_device.h"
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

// One step of the scan, shared with the device path. (In a namespace of its own: the level
// namespaces of ortops::scan are declared above, not inline.)
namespace rule {
inline namespace ORTOPS_ISA_NS {  // compiled per instruction-set level (core/isa.h)

// Whether the running extreme moves to `candidate`: it is at least as good, or NaN. Once
// the current value is NaN every comparison with it is false, so only a NaN takes over.
// Written without branches so the loops of scan_simd.cc vectorise.
// float16 compares by integer keys in float's order (magnitude, negated when the sign is
// set, so -0 and +0 tie), which vectorises where converting to float would not.
template <typename T, bool kMax>
ORTOPS_HD inline bool Takes(T candidate, T current) {
  if constexpr (std::is_same_v<T, Half>) {
    const int32_t c = candidate.bits & 0x7fff, k = current.bits & 0x7fff;
    const int32_t c_key = candidate.bits & 0x8000 ? -c : c, k_key = current.bits & 0x8000 ? -k : k;
    const bool better = kMax ? c_key >= k_key : c_key <= k_key;
    return (c > 0x7c00) | ((k <= 0x7c00) & better);  // NaN takes over; after a NaN only a NaN
  } else {
    const bool better = kMax ? candidate >= current : candidate <= current;
    if constexpr (std::is_floating_point_v<T>) {
      return better | (candidate != candidate);
    } else {
      return better;
    }
  }
}

// take ? a : b, on the bits for float16 (a select of two structs would copy through memory
// and keep the loops of scan_simd.cc scalar).
template <typename T>
ORTOPS_HD inline T Pick(bool take, T a, T b) {
  if constexpr (std::is_same_v<T, Half>) {
    Half h;
    h.bits = take ? a.bits : b.bits;
    return h;
  } else {
    return take ? a : b;
  }
}

}  // namespace ORTOPS_ISA_NS
}  // namespace rule
}  // namespace ortops::scan
