// core/packed_gemm.h at the level this process uses, against a plain loop of correctly
// rounded fused multiply-adds (FusedMultiplyAdd below): the same bits, since each sum is
// documented as one chain of fused multiply-adds in k order. Shapes cover partial panels
// and partial tiles; the output's padding between rows must stay untouched.
#include "core/packed_gemm.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace ortops {
namespace {

struct Shape {
  int64_t m, depth, n;
};

std::vector<float> Pack(const std::vector<float>& weights, int64_t m, int64_t depth) {
  std::vector<float> packed(static_cast<size_t>(PackedGemmSize(m, depth)), 0.0f);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t k = 0; k < depth; ++k) packed[PackedGemmIndex(i, k, depth)] = weights[i * depth + k];
  }
  return packed;
}

// a * b + c rounded once to float, in double arithmetic: a product of floats is exact in
// double, and the sum's rounding error is recovered exactly (Knuth's TwoSum). Rounding the
// double sum to float again is wrong only where it fell exactly halfway between two floats
// while the exact value did not: then the sum is moved off the halfway point towards it.
// Not std::fma: MinGW-w64's fmaf (Debian's, version 10) is not fused, and differs from the
// FMA instruction on about a quarter of random inputs.
float FusedMultiplyAdd(float a, float b, float c) {
  const double product = double{a} * b;
  const double sum = product + c;
  const float rounded = static_cast<float>(sum);
  if (!std::isfinite(sum) || double{rounded} == sum) return rounded;
  const double product_part = sum - c, c_part = sum - product_part;
  const double error = (product - product_part) + (c - c_part);
  constexpr float kInfinity = std::numeric_limits<float>::infinity();
  const float neighbour = std::nextafter(rounded, sum > rounded ? kInfinity : -kInfinity);
  if (error == 0 || (double{rounded} + neighbour) / 2 != sum) return rounded;
  return static_cast<float>(std::nextafter(sum, error > 0 ? double{kInfinity} : -double{kInfinity}));
}

TEST(FusedMultiplyAdd, RoundsOnceWhereTheDoubleSumIsHalfway) {
  // (1 + 2^-23) 2^-24 (1 - 2^-23) = 2^-24 - 2^-70: the exact sum with c = 1 + 2^-23 lies just
  // below the halfway point 1 + 2^-23 + 2^-24, which the double sum rounds to; rounding that
  // to float again would go to the even neighbour 1 + 2^-22.
  const float a = 1.0f + 0x1p-23f, b = 0x1p-24f * (1.0f - 0x1p-23f), c = 1.0f + 0x1p-23f;
  EXPECT_EQ(FusedMultiplyAdd(a, b, c), c);
  EXPECT_EQ(FusedMultiplyAdd(-a, b, -c), -c);
  EXPECT_EQ(FusedMultiplyAdd(a, -b, c + 0x1p-22f), c + 0x1p-22f);  // just above halfway, rounded up
  EXPECT_EQ(FusedMultiplyAdd(3.0f, 5.0f, -15.0f), 0.0f);
  EXPECT_EQ(FusedMultiplyAdd(0x1p-100f, 0x1p-100f, 1.0f), 1.0f);
}

float Reference(const std::vector<float>& weights, const std::vector<float>& columns, int64_t depth, int64_t i,
                int64_t j, float bias) {
  float sum = 0.0f;
  for (int64_t k = 0; k < depth; ++k) sum = FusedMultiplyAdd(weights[i * depth + k], columns[j * depth + k], sum);
  return sum + bias;
}

// NaNs compare as "both NaN"; everything else bit for bit.
bool SameBits(float a, float b) {
  return std::isnan(a) ? std::isnan(b) : std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

TEST(Isa, PackedGemmSumsAsOneChainOfFusedMultiplyAdds) {
  if (!HasPackedGemm()) GTEST_SKIP() << "this level has no packed GEMM";
  std::mt19937 random(7);
  std::normal_distribution<float> normal;
  constexpr float kSentinel = -1234.0f;  // exact in float16 too
  for (const Shape shape : {Shape{1, 1, 1}, Shape{32, 9, 14}, Shape{33, 300, 15}, Shape{70, 7, 29}, Shape{5, 2304, 3},
                            Shape{64, 64, 112}, Shape{31, 1, 13}, Shape{33, 129, 151}, Shape{16, 128, 6}}) {
    SCOPED_TRACE(::testing::Message() << "m " << shape.m << " depth " << shape.depth << " n " << shape.n);
    std::vector<float> weights(static_cast<size_t>(shape.m * shape.depth));
    std::vector<float> columns(static_cast<size_t>(shape.n * shape.depth));
    std::vector<float> bias(static_cast<size_t>(shape.m));
    for (float& v : weights) v = normal(random);
    for (float& v : columns) v = normal(random);
    for (float& v : bias) v = normal(random);
    // Values that must propagate, where the shape has room for them.
    if (shape.n > 2 && shape.m > 2) {
      columns[1 * shape.depth] = std::numeric_limits<float>::quiet_NaN();
      weights[2 * shape.depth] = std::numeric_limits<float>::infinity();
    }
    const std::vector<float> packed = Pack(weights, shape.m, shape.depth);
    const int64_t stride = shape.n + 3;  // the 3 columns past n of each row must stay untouched
    for (const bool with_bias : {false, true}) {
      std::vector<float> out(static_cast<size_t>(shape.m * stride), kSentinel);
      std::vector<Half> out_half(out.size(), Half(kSentinel));
      std::vector<Half> bias_half(bias.begin(), bias.end());
      PackedGemm(PackedProduct<float>{packed.data(), columns.data(), shape.m, shape.depth, shape.n,
                                      with_bias ? bias.data() : nullptr, out.data(), stride});
      PackedGemm(PackedProduct<Half>{packed.data(), columns.data(), shape.m, shape.depth, shape.n,
                                     with_bias ? bias_half.data() : nullptr, out_half.data(), stride});
      for (int64_t i = 0; i < shape.m; ++i) {
        for (int64_t j = 0; j < stride; ++j) {
          const size_t at = static_cast<size_t>(i * stride + j);
          if (j >= shape.n) {
            ASSERT_EQ(out[at], kSentinel) << "row " << i << " column " << j;
            ASSERT_EQ(static_cast<float>(out_half[at]), kSentinel) << "row " << i << " column " << j;
            continue;
          }
          const float expected = Reference(weights, columns, shape.depth, i, j, with_bias ? bias[i] : 0.0f);
          ASSERT_TRUE(SameBits(out[at], expected))
              << "row " << i << " column " << j << ": " << out[at] << " against " << expected;
          const float expected_half = static_cast<float>(
              Half(Reference(weights, columns, shape.depth, i, j,
                             with_bias ? static_cast<float>(bias_half[static_cast<size_t>(i)]) : 0.0f)));
          ASSERT_TRUE(SameBits(static_cast<float>(out_half[at]), expected_half))
              << "float16, row " << i << " column " << j;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ortops
