#pragma once

#include <cmath>
#include <utility>

#include "core/op_kernel.h"

namespace ortops::rotated_feature_align {
extern const OpSchema kSchema;
KernelFactory Make, MakeDevice;

inline constexpr const char* kBoxesNaN = "input 'best_rbboxes' contains NaN";

// The attributes of a rotated feature alignment node, read and checked once, as its CPU and
// device kernels take them.
struct RotatedFeatureAlignAttributes {
  RotatedFeatureAlignAttributes(const Attributes& attrs, const OpDef& def)
      : spatial_scale(attrs.Float("spatial_scale")), points(attrs.Int("points")), y_first(def.compat) {
    Check(points == 1 || points == 5, "attribute 'points' must be 1 or 5, got ", points);
    Check(std::isfinite(spatial_scale), "attribute 'spatial_scale' must be finite, got ", spatial_scale);
  }

  float spatial_scale;
  int64_t points;
  bool y_first;  // mmcv's boxes are (y, x, w, h, angle)
};

// Checks the shapes of inputs 0 (features) and 1 (best_rbboxes) of a KernelIO or a
// device::DeviceIO; returns them.
template <typename T, typename IO>
std::pair<ConstTensor<T>, ConstTensor<T>> FeaturesAndBoxes(const IO& io) {
  ConstTensor<T> features = io.template Input<T>(0, 4);
  ConstTensor<T> boxes = io.template Input<T>(1, 4);
  const int64_t batch = features.dim(0), height = features.dim(2), width = features.dim(3);
  Check(boxes.dim(0) == batch && boxes.dim(1) == height && boxes.dim(2) == width && boxes.dim(3) == 5,
        "input 'best_rbboxes' must have shape [N, H, W, 5] = [", batch, ", ", height, ", ", width, ", 5], got ",
        ShapeText{boxes.shape});
  return {std::move(features), std::move(boxes)};
}

}  // namespace ortops::rotated_feature_align
