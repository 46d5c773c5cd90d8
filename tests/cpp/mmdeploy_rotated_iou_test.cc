// math/mmdeploy_rotated_iou.h's replica of libstdc++'s std::sort, which mmdeploy's
// NMSRotated sorts its hull points with under an order that is not strict weak: the same
// permutation as std::sort itself for every length up to 24 (the partition step starts at
// 17), on points placed as the hull places them (the lowest first, the others above it), with
// many nearly collinear and nearly coincident ones, where the order is inconsistent. The
// IoU itself is checked against a Python mirror of the original in test_nms_rotated.py.
#include "math/mmdeploy_rotated_iou.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace ortops::mmdeploy_rotated {
namespace {

#if defined(__GLIBCXX__)
TEST(MmdeployRotatedIou, SortIsLibstdcxxStdSort) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> coordinate(-4.0f, 4.0f), unit(0.0f, 1.0f);
  int partitioned = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const int n = trial % 25;
    std::vector<Point<float>> points(static_cast<size_t>(n));
    for (auto& p : points) {
      const float kind = unit(rng);
      if (kind < 0.3f) {
        p = {coordinate(rng), std::abs(coordinate(rng))};
      } else if (kind < 0.6f) {  // on a few rays: collinear, ordered by distance
        const float t = 1 + std::floor(unit(rng) * 4), d = 1e-3f + unit(rng) * 3;
        p = {d * std::cos(t * 0.7f), d * std::sin(t * 0.7f) + unit(rng) * 1e-7f};
      } else if (kind < 0.8f) {  // tiny: the cross product tolerance sorts them by distance
        p = {unit(rng) * 1e-3f - 5e-4f, unit(rng) * 1e-3f};
      } else if (!points.empty()) {  // a duplicate
        p = points[static_cast<size_t>(unit(rng) * static_cast<float>(points.size())) % points.size()];
      }
    }
    std::vector<Point<float>> expected = points;
    std::sort(expected.begin(), expected.end(), [](Point<float> a, Point<float> b) { return HullBefore(a, b); });
    SortAsLibstdcxx(points.data(), points.data() + n);
    partitioned += n > 16;
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(points[static_cast<size_t>(i)].x, expected[static_cast<size_t>(i)].x) << "trial " << trial;
      ASSERT_EQ(points[static_cast<size_t>(i)].y, expected[static_cast<size_t>(i)].y) << "trial " << trial;
    }
  }
  EXPECT_GT(partitioned, 5000);
}
#endif

TEST(MmdeployRotatedIou, TwoPointsAreZeroOverZero) {
  const float a[5] = {3, 4, 0, 0, 0.3f}, b[5] = {-7, 1, 0, 0, 2.0f}, c[5] = {3, 4, 0, 0, 1.0f};
  EXPECT_TRUE(std::isnan(OrtRotatedIoU(MakeRawBox(a), MakeRawBox(b))));
  EXPECT_TRUE(std::isnan(OrtRotatedIoU(MakeRawBox(a), MakeRawBox(c))));
  EXPECT_FALSE(IsProper(a));
}

TEST(MmdeployRotatedIou, ProperBoxes) {
  const float square[5] = {0, 0, 2, 2, 0}, unit[5] = {0, 0, 1, 1, 0}, thin[5] = {0, 0, 2, 0.4f, 0};
  const float negative[5] = {0, 0, -2, -2, 0}, flat[5] = {0, 0, 2, 0, 0};
  EXPECT_TRUE(IsProper(square));
  EXPECT_TRUE(IsProper(unit));
  EXPECT_FALSE(IsProper(thin));
  EXPECT_FALSE(IsProper(negative));
  EXPECT_FALSE(IsProper(flat));
  EXPECT_EQ(OrtRotatedIoU(MakeRawBox(square), MakeRawBox(square)), 1.0f);
  EXPECT_EQ(OrtRotatedIoU(MakeRawBox(square), MakeRawBox(unit)), 0.25f);
  EXPECT_TRUE(TrtRotatedTiny(flat));
  EXPECT_TRUE(TrtRotatedTiny(thin) == false);
}

}  // namespace
}  // namespace ortops::mmdeploy_rotated
