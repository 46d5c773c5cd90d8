#pragma once

#include "core/op_kernel.h"
#include "ops/roi_align/roi_geometry.h"

namespace ortops::roi_align_rotated {
extern const OpSchema kSchema;
KernelFactory Make, MakeDevice;

inline constexpr const char* kRoiLayout = "(batch_index, cx, cy, w, h, theta)";

// The attributes of a RoIAlignRotated node, read and checked as every kernel of it does.
struct RotatedAttributes {
  explicit RotatedAttributes(const Attributes& attrs) : pooling(attrs), clockwise(attrs.Int("clockwise")) {
    Check(clockwise == 0 || clockwise == 1, "attribute 'clockwise' must be 0 or 1, got ", clockwise);
  }

  // The geometry of a roi's box in the compute type A.
  template <typename A>
  roi_pooling::RotatedGeometry<A> Geometry() const {
    // mmcv raised the sides of a legacy (not aligned) roi to 1.
    const A min_side = pooling.aligned ? roi_pooling::kNoMinSide<A> : A(1);
    return {static_cast<A>(pooling.spatial_scale), min_side, clockwise != 0, pooling};
  }

  roi_pooling::PoolingAttributes pooling;
  int64_t clockwise;
};

}  // namespace ortops::roi_align_rotated
