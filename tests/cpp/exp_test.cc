// ExpNonPositive (softmax's exponential) against std::exp in double: within 1 float ulp of
// the exact value at every 61st float of [-87.33, 0] (the whole range was checked once; the
// stride keeps the test short), and 0 below, at -infinity and for subnormal results.
#include "math/exp.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace ortops {
namespace {

TEST(ExpNonPositive, WithinOneUlpWhereTheResultIsNormal) {
  const uint32_t lowest = std::bit_cast<uint32_t>(-87.33f);
  double worst = 0;
  for (uint32_t bits = 0x80000000u; bits <= lowest; bits += 61) {
    const float x = std::bit_cast<float>(bits);
    const double exact = std::exp(static_cast<double>(x));
    const auto rounded = static_cast<float>(exact);
    const double ulp = static_cast<double>(std::nextafter(rounded, std::numeric_limits<float>::infinity())) - rounded;
    worst = std::max(worst, std::abs(static_cast<double>(ExpNonPositive(x)) - exact) / ulp);
  }
  // Where the compiler fuses the polynomial's multiply-adds (GCC does on ARM64), the rounding
  // differs slightly from the unfused arithmetic the bound was derived for.
#if defined(__FP_FAST_FMAF)
  EXPECT_LE(worst, 1.01);
#else
  EXPECT_LE(worst, 1.0);
#endif
  EXPECT_EQ(ExpNonPositive(0.0f), 1.0f);
  EXPECT_EQ(ExpNonPositive(-0.0f), 1.0f);
}

TEST(ExpNonPositive, ZeroWhereTheResultIsNotNormal) {
  EXPECT_EQ(ExpNonPositive(-87.34f), 0.0f);
  EXPECT_EQ(ExpNonPositive(-100.0f), 0.0f);
  EXPECT_EQ(ExpNonPositive(-std::numeric_limits<float>::max()), 0.0f);
  EXPECT_EQ(ExpNonPositive(-std::numeric_limits<float>::infinity()), 0.0f);
}

}  // namespace
}  // namespace ortops
