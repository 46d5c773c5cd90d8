// The float16 conversions against the compiler's own half type (IEEE binary16, rounding to
// nearest even): every half, and floats and doubles over and around the half range. The
// library cannot use _Float16 (it needs libgcc_s from GCC 12); a test binary can. GCC 12
// has no C++ _Float16 on aarch64, where its __fp16 is the same IEEE type.
#include "core/half.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/half_convert.h"

namespace ortops {
namespace {

#if defined(__aarch64__)
using CompilerHalf = __fp16;
#else
using CompilerHalf = _Float16;
#endif

uint16_t Bits(CompilerHalf h) { return std::bit_cast<uint16_t>(h); }

// NaNs compare as "both NaN"; everything else bit for bit (signed zeros included).
void ExpectSameHalf(uint16_t actual, uint16_t expected, double from) {
  const bool actual_nan = (actual & 0x7fff) > 0x7c00, expected_nan = (expected & 0x7fff) > 0x7c00;
  if (actual_nan || expected_nan) {
    EXPECT_TRUE(actual_nan && expected_nan) << std::hexfloat << from;
    return;
  }
  EXPECT_EQ(actual, expected) << std::hexfloat << from;
}

TEST(Half, EveryHalfConvertsToTheSameFloatAndBack) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const float expected = static_cast<float>(std::bit_cast<CompilerHalf>(h));
    const float actual = HalfBitsToFloat(h);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(actual)) << bits;
      EXPECT_EQ(FloatToHalfBits(actual) & 0x7e00, 0x7e00) << bits;  // quiet NaN
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(actual), std::bit_cast<uint32_t>(expected)) << bits;
    ASSERT_EQ(FloatToHalfBits(actual), h) << bits;
    ASSERT_EQ(Half(actual).bits, h) << bits;
    ASSERT_EQ(static_cast<float>(Half(actual)), expected) << bits;
  }
}

TEST(Half, FloatsRoundToNearestEven) {
  // Every float whose exponent reaches the half range or its rounding edges (2^-26 to 2^17),
  // in steps that cover each mantissa's low bits, plus all the ties and their neighbours.
  int checked = 0;
  for (uint32_t exponent = 100; exponent <= 145; ++exponent) {
    for (uint32_t mantissa = 0; mantissa < (1u << 23); mantissa += 61) {
      for (uint32_t sign : {0u, 0x80000000u}) {
        const float f = std::bit_cast<float>(sign | exponent << 23 | mantissa);
        ExpectSameHalf(FloatToHalfBits(f), Bits(static_cast<CompilerHalf>(f)), f);
        ++checked;
      }
    }
  }
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    // The float halfway between half h and h + 1, and one float either side of it.
    const float low = HalfBitsToFloat(static_cast<uint16_t>(h)), high = HalfBitsToFloat(static_cast<uint16_t>(h + 1));
    const float tie = std::bit_cast<float>((std::bit_cast<uint32_t>(low) + std::bit_cast<uint32_t>(high)) / 2);
    for (float f : {tie, std::nextafter(tie, 0.0f), std::nextafter(tie, 1e9f), -tie}) {
      ExpectSameHalf(FloatToHalfBits(f), Bits(static_cast<CompilerHalf>(f)), f);
      ++checked;
    }
  }
  for (float f : {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::max(), 65504.0f, 65519.99f, 65520.0f, 0x1p-25f, 0x1.000002p-25f}) {
    ExpectSameHalf(FloatToHalfBits(f), Bits(static_cast<CompilerHalf>(f)), f);
  }
  EXPECT_GT(checked, 1000000);
}

TEST(Half, DoublesRoundOnce) {
  // Doubles just off a half tie: rounding to float first would land on the tie.
  for (uint32_t h = 0; h < 0x7c00; h += 7) {
    const double low = HalfBitsToFloat(static_cast<uint16_t>(h)), high = HalfBitsToFloat(static_cast<uint16_t>(h + 1));
    const double tie = (low + high) / 2;
    for (double d : {tie, std::nextafter(tie, 0.0), std::nextafter(tie, 1e9), -std::nextafter(tie, 1e9)}) {
      ExpectSameHalf(DoubleToHalfBits(d), Bits(static_cast<CompilerHalf>(d)), d);
    }
  }
  std::mt19937_64 random(7);
  std::uniform_real_distribution<double> exponent(-30, 17);
  for (int i = 0; i < 200000; ++i) {
    const double d =
        std::ldexp(1.0 + static_cast<double>(random() >> 11) * 0x1p-53, static_cast<int>(exponent(random)));
    ExpectSameHalf(DoubleToHalfBits(d), Bits(static_cast<CompilerHalf>(d)), d);
    ExpectSameHalf(Half(-d).bits, Bits(static_cast<CompilerHalf>(-d)), -d);
  }
  for (double d : {65519.999999, 65520.0, 1e300, -1e300, 1e-300, std::numeric_limits<double>::quiet_NaN(),
                   std::numeric_limits<double>::infinity()}) {
    ExpectSameHalf(DoubleToHalfBits(d), Bits(static_cast<CompilerHalf>(d)), d);
  }
}

// The dispatched runs (core/half_convert.h) at the level this process uses (test.sh runs
// the Isa tests under emulated SSE2 and AVX2 CPUs too): the scalar conversions' bits, NaN
// payloads included, over every half and random float bit patterns, at an odd offset and
// length so that vector bodies and remainders both run.
TEST(Isa, HalfRunsConvertLikeOneAtATime) {
  std::vector<Half> halves(0x10000 + 3);
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) halves[bits + 3].bits = static_cast<uint16_t>(bits);
  std::vector<float> widened(halves.size());
  WidenHalves(halves.data() + 3, 0x10000, widened.data() + 3);
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    ASSERT_EQ(std::bit_cast<uint32_t>(widened[bits + 3]),
              std::bit_cast<uint32_t>(HalfBitsToFloat(static_cast<uint16_t>(bits))))
        << bits;
  }
  std::mt19937 random(7);
  std::vector<float> values(100003);
  for (float& v : values) v = std::bit_cast<float>(static_cast<uint32_t>(random()));
  for (size_t i = 0; i < 1000; ++i) values[i] = static_cast<float>(i) * 0x1p-34f + 65504.0f * static_cast<float>(i % 3);
  std::vector<Half> narrowed(values.size());
  NarrowToHalves(values.data() + 1, static_cast<int64_t>(values.size() - 1), narrowed.data() + 1);
  for (size_t i = 1; i < values.size(); ++i) ASSERT_EQ(narrowed[i].bits, FloatToHalfBits(values[i])) << i;
}

TEST(Half, ComputeTypes) {
  static_assert(std::is_same_v<ComputeType<Half>, float>);
  static_assert(std::is_same_v<ComputeType<float>, float>);
  static_assert(std::is_same_v<ComputeType<double>, double>);
  static_assert(Half(1.0f).bits == 0x3c00 && Half(-2).bits == 0xc000 && Half(0.5).bits == 0x3800);
  EXPECT_EQ(static_cast<float>(Half(0.1f)), 0.0999755859375f);
}

}  // namespace
}  // namespace ortops
