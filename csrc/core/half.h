// IEEE 754 binary16 (ONNX float16) as a storage type: kernels load it as float, compute in
// float (or double), and store the result rounded to nearest, ties to even.
//
// Not _Float16: GCC 12 converts that through libgcc_s's __extendhfsf2 / __truncsfhf2, new
// in GCC 12, which the oldest systems the library loads on do not have. Not F16C: x86 only.
// These conversions are plain integer code, identical on every target.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

namespace ortops {

// float16 bits -> float, exactly (every half is a float). Branch-free, so loops vectorise.
constexpr float HalfBitsToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t shifted = static_cast<uint32_t>(half & 0x7fffu) << 13;  // exponent and mantissa, float-aligned
  const uint32_t exponent = shifted & 0x0f800000u;
  const uint32_t rebiased = shifted + (112u << 23);  // exponent bias 15 -> 127
  // Infinity and NaN: exponent 31 becomes 255 (the mantissa, NaN payload included, is kept).
  const uint32_t normal = rebiased + (exponent == 0x0f800000u ? 112u << 23 : 0u);
  // Zero and subnormals (mantissa x 2^-24): 2^-14 x (1 + mantissa / 2^10) - 2^-14, exact,
  // and without float subnormals, so flush-to-zero modes do not change it.
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(rebiased + (1u << 23)) - 0x1p-14f);
  // Selected as integers: GCC keeps a select of floats as a branch, and the loop scalar.
  const uint32_t magnitude = exponent == 0 ? subnormal : normal;
  return std::bit_cast<float>(magnitude | sign);
}

// float -> float16 bits, rounded to nearest, ties to even; overflow gives infinity, NaN
// stays NaN (quiet, sign and the payload's top bits kept). Every case is computed and one
// selected, without branches, so that loops storing halves vectorise.
constexpr uint16_t FloatToHalfBits(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  // Normal (2^-14 and up): rebias, then round the 13 dropped bits; a carry out of the
  // mantissa moves to the next exponent, and from 65520 on to infinity.
  const uint32_t normal = (magnitude - (112u << 23) + 0xfffu + ((magnitude >> 13) & 1u)) >> 13;
  // Subnormal or zero (below 2^-14): added to 0.5, whose float ulp is 2^-24 (the subnormal
  // half's), the value is rounded to nearest even by the addition itself; the bits above
  // 0.5's are then the half's. (Float subnormals read as 0 under denormals-are-zero: they
  // round to 0 anyway.)
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(magnitude) + 0.5f) - 0x3f000000u;
  uint32_t half = magnitude < 0x38800000u ? subnormal : normal;
  half = magnitude >= 0x47800000u ? 0x7c00u : half;  // 2^16 and up, infinity included
  half = magnitude > 0x7f800000u ? 0x7e00u | ((magnitude >> 13) & 0x3ffu) : half;
  return static_cast<uint16_t>(sign | half);
}

// double -> float16 bits, rounded once: to float with rounding to odd (an inexact result
// gets an odd last bit, so it stays off the halfway points of float16), then to float16.
// Rounding double -> float -> float16 by nearest twice could land on a tie and round wrong.
constexpr uint16_t DoubleToHalfBits(double value) {
  const auto single = static_cast<float>(value);
  const auto back = static_cast<double>(single);
  // Whether rounding went away from zero (both have value's sign), without branches.
  const bool away = ((back > value) & (value > 0)) | ((back < value) & (value < 0));
  // The neighbour toward zero (sign-magnitude: one step down), made odd when inexact. NaN
  // compares unequal to itself and stays NaN.
  const uint32_t toward_zero = std::bit_cast<uint32_t>(single) - (away ? 1u : 0u);
  return FloatToHalfBits(std::bit_cast<float>(toward_zero | (back != value ? 1u : 0u)));
}

// A float16 element. Reads as float implicitly (so expressions over it compute in float);
// made from a number only explicitly, so no kernel rounds an intermediate to half by accident.
struct Half {
  uint16_t bits;

  Half() = default;
  template <typename U>
    requires std::is_arithmetic_v<U>
  constexpr explicit Half(U value)
      : bits(std::is_same_v<U, double> ? DoubleToHalfBits(static_cast<double>(value))
                                       : FloatToHalfBits(static_cast<float>(value))) {}
  constexpr operator float() const { return HalfBitsToFloat(bits); }
};
static_assert(sizeof(Half) == 2 && std::is_trivially_copyable_v<Half> && std::is_standard_layout_v<Half>);

// The type a kernel over elements of T computes in: float for Half, T itself otherwise.
template <typename T>
struct ComputeTypeOf {
  using type = T;
};
template <>
struct ComputeTypeOf<Half> {
  using type = float;
};
template <typename T>
using ComputeType = typename ComputeTypeOf<T>::type;

}  // namespace ortops
