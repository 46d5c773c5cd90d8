// Whole runs of float16 converted to and from float with half.h's branch-free conversions,
// compiled per instruction-set level (half_convert_simd.cc) so that the wider levels convert
// 8 or 16 elements at a time. The same integer code at every level: the same bits.
#pragma once

#include <cstdint>

#include "core/half.h"
#include "core/isa.h"

namespace ortops {

namespace half_convert {
ORTOPS_ISA_DECLARE(void Widen(const uint16_t* halves, int64_t count, float* out);
                   void Narrow(const float* values, int64_t count, uint16_t* out))
inline void WidenAtLevel(const uint16_t* halves, int64_t count, float* out) {
  ORTOPS_ISA_CALL(Widen, halves, count, out);
}
inline void NarrowAtLevel(const float* values, int64_t count, uint16_t* out) {
  ORTOPS_ISA_CALL(Narrow, values, count, out);
}
}  // namespace half_convert

// out[i] = float(halves[i]) for i < count (exact).
inline void WidenHalves(const Half* halves, int64_t count, float* out) {
  half_convert::WidenAtLevel(reinterpret_cast<const uint16_t*>(halves), count, out);
}

// out[i] = values[i] rounded to float16 (to nearest, ties to even) for i < count.
inline void NarrowToHalves(const float* values, int64_t count, Half* out) {
  half_convert::NarrowAtLevel(values, count, reinterpret_cast<uint16_t*>(out));
}

}  // namespace ortops
