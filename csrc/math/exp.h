// exp for softmax's shifted scores (x <= 0), written without branches, calls or float
// comparisons (which GCC will not turn into selects while floating-point traps are on), so
// that loops over it vectorise: std::exp, a libm call per element, made softmax half of
// attention's time.
#pragma once

#include <bit>
#include <cstdint>

#include "core/host_device.h"
#include "core/isa.h"

namespace ortops {
inline namespace ORTOPS_ISA_NS {  // compiled per instruction-set level (core/isa.h)

// e^x for x <= 0 in float: within 1 ulp of the exact value where that is a normal float
// (x >= -87.33; checked for every float there; 1.01 ulp where the compiler fuses the
// multiply-adds, as GCC does for ARM64), else 0 (the exact value is below 2^-126 and
// std::exp gives a subnormal); -infinity gives 0. Not for NaN or x > 0. Cody and Waite's
// reduction x = n ln2 + r, |r| <= ln2 / 2, a degree-6 polynomial for e^r (Cephes' expf
// coefficients), and 2^n written into the exponent bits.
ORTOPS_HD inline float ExpNonPositive(float x) {
  constexpr float kLowest = -87.33f;  // e^kLowest is just above the smallest normal float
  // x >= kLowest as an all-ones mask, compared as magnitudes in the integer domain (x <= 0).
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t keep =
      static_cast<uint32_t>(-static_cast<int32_t>((bits & 0x7fffffffu) <= std::bit_cast<uint32_t>(-kLowest)));
  const float clamped = std::bit_cast<float>((bits & keep) | (std::bit_cast<uint32_t>(kLowest) & ~keep));
  // Round to the nearest integer by adding and removing 1.5 * 2^23 (|x log2(e)| < 2^22 here).
  constexpr float kRound = 12582912.0f;
  const float n = (clamped * 1.44269504088896341f + kRound) - kRound;
  const float r = (clamped - n * 0.693359375f) - n * -2.12194440e-4f;  // ln 2 in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float exp_r = p * r * r + r + 1.0f;
  const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);  // n in [-126, 0]
  return std::bit_cast<float>(std::bit_cast<uint32_t>(exp_r * two_n) & keep);
}

}  // namespace ORTOPS_ISA_NS
}  // namespace ortops
