// Compiled once per instruction-set level (core/isa.h).
#include "core/half_convert.h"

namespace ortops::half_convert::ORTOPS_ISA_NS {

void Widen(const uint16_t* halves, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = HalfBitsToFloat(halves[i]);
}

void Narrow(const float* values, int64_t count, uint16_t* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = FloatToHalfBits(values[i]);
}

}  // namespace ortops::half_convert::ORTOPS_ISA_NS
