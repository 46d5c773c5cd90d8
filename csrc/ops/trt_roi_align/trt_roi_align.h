#pragma once

#include <cmath>
#include <cstdint>

#include "core/op_kernel.h"
#include "ops/roi_align/roi_geometry.h"

namespace ortops::trt_roi_align {
extern const OpSchema kSchema;
KernelFactory Make, MakeDevice;

// The attributes of a ROIAlign_TRT node, read and checked as every kernel of it does.
struct TrtAttributes {
  explicit TrtAttributes(const Attributes& attrs)
      : average(attrs.Int("mode")),
        pooling(attrs.Int("output_height"), attrs.Int("output_width"), attrs.Float("spatial_scale"),
                attrs.Int("sampling_ratio"), HalfPixel(attrs)) {
    Check(average == 0 || average == 1, "attribute 'mode' must be 0 (max) or 1 (avg), got ", average);
    Check(pooling.sampling_ratio >= 0, "attribute 'sampling_ratio' must be in [0, ", roi_pooling::kMaxSamplesPerAxis,
          "], got ", pooling.sampling_ratio);
    Check(pooling.spatial_scale > 0.0f, "attribute 'spatial_scale' must be positive and finite, got ",
          pooling.spatial_scale);
  }

  // The geometry of a roi (x1, y1, x2, y2) in the compute type A.
  template <typename A>
  roi_pooling::AlignedGeometry<A> Geometry() const {
    // output_half_pixel: malformed rois become 1 x 1 (sides raised to 1); half_pixel: no bound.
    const A min_side = pooling.aligned ? roi_pooling::kNoMinSide<A> : A(1);
    return {static_cast<A>(pooling.spatial_scale), min_side, pooling};
  }

  int64_t average;
  roi_pooling::PoolingAttributes pooling;

 private:
  // coordinate_transformation_mode, checked before PoolingAttributes reads it as `aligned`.
  static int64_t HalfPixel(const Attributes& attrs) {
    const int64_t mode = attrs.Int("coordinate_transformation_mode");
    Check(mode == 0 || mode == 1,
          "attribute 'coordinate_transformation_mode' must be 0 (output_half_pixel) or 1 (half_pixel), got ", mode);
    return mode;
  }
};

// The shapes of inputs rois [R, 4] and batch_indices [R].
template <typename T>
void CheckRoisShape(const ConstTensor<T>& rois, const ConstTensor<int32_t>& batch_indices) {
  Check(rois.dim(1) == 4, "input 'rois' must have shape [R, 4] as (x1, y1, x2, y2), got ", ShapeText{rois.shape});
  Check(batch_indices.dim(0) == rois.dim(0), "input 'batch_indices' must have shape [R] with R = ", rois.dim(0),
        " (from input 'rois' of shape ", ShapeText{rois.shape}, "), got ", ShapeText{batch_indices.shape});
}

// Whether roi r, `box` (x1, y1, x2, y2) of image `image`, passes CheckRoi.
template <typename A>
ORTOPS_HD bool RoiIsValid(const A* box, int32_t image, int64_t images) {
  for (int k = 0; k < 4; ++k) {
    if (!std::isfinite(box[k])) return false;
  }
  return image >= 0 && image < images;
}

// Fails unless roi r passes RoiIsValid, saying why.
template <typename A>
void CheckRoi(const A* box, int32_t image, int64_t r, const Shape& input_shape) {
  for (int64_t k = 0; k < 4; ++k) Check(std::isfinite(box[k]), "roi ", r, " in input 'rois' is not finite");
  const int64_t images = input_shape[0];
  Check(image >= 0 && image < images, "input 'batch_indices' names image ", image, " for roi ", r,
        ", but input 'X' has ", images, " images (shape ", ShapeText{input_shape}, ")");
}

}  // namespace ortops::trt_roi_align
