// Geometry of the RoIAlign family (axis-aligned and rotated, one level or several), shared
// by the CPU kernels and the device path: the attributes every variant has, each roi's
// bins and adaptive sampling grid, where a bin's samples lie, and the checks of rois.
// Functions marked ORTOPS_HD also run on the device, where nothing throws: each returns an
// invalid grid where its host counterpart fails, and the host then reports why.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/error.h"
#include "core/host_device.h"
#include "core/kernel_io.h"

namespace ortops::roi_pooling {

// Bounds on the samples of one roi: beyond them a roi (or sampling_ratio) is so large that
// the op would run for minutes; that is reported instead of attempted.
inline constexpr int64_t kMaxSamplesPerAxis = 1 << 16;
inline constexpr int64_t kMaxTapsPerRoi = 1 << 24;

// The attributes every RoIAlign variant has, read and checked once. The multi-level ops,
// whose spatial scale comes per level from 'featmap_strides', pass nullptr as
// `scale_attribute` (spatial_scale is then 1).
struct PoolingAttributes {
  explicit PoolingAttributes(const Attributes& attrs, const char* scale_attribute = "spatial_scale")
      : PoolingAttributes(attrs.Int("output_height"), attrs.Int("output_width"),
                          scale_attribute ? attrs.Float(scale_attribute) : 1.0f, attrs.Int("sampling_ratio"),
                          attrs.Int("aligned")) {}
  // For ops whose attributes carry these under other names or encodings (TensorRT's
  // ROIAlign_TRT: `aligned` is its coordinate_transformation_mode).
  PoolingAttributes(int64_t height, int64_t width, float scale, int64_t samples, int64_t shift_half_pixel)
      : output_height(height),
        output_width(width),
        spatial_scale(scale),
        sampling_ratio(samples),
        aligned(shift_half_pixel) {
    Check(output_height >= 1 && output_width >= 1,
          "attributes 'output_height' and 'output_width' must be at least 1, got ", output_height, " and ",
          output_width);
    // Divided, not multiplied: the product of two huge sizes would overflow and pass.
    Check(output_height <= kMaxTapsPerRoi / output_width, "output size ", output_height, " x ", output_width,
          " is too large: more than ", kMaxTapsPerRoi, " bins per roi");
    Check(std::isfinite(spatial_scale), "attribute 'spatial_scale' must be finite, got ", spatial_scale);
    Check(aligned == 0 || aligned == 1, "attribute 'aligned' must be 0 or 1, got ", aligned);
    Check(sampling_ratio <= kMaxSamplesPerAxis, "attribute 'sampling_ratio' must be at most ", kMaxSamplesPerAxis,
          ", got ", sampling_ratio);
  }
  ORTOPS_HD int64_t bins() const { return output_height * output_width; }

  int64_t output_height, output_width;
  float spatial_scale;
  int64_t sampling_ratio, aligned;
};

// Max pooling's running start and the value of a bin without samples (avg pooling: unused).
// `of_corners`: ONNX's max mode as ONNX Runtime and TensorRT compute it, each sample the
// largest of its four weighted corners (BilinearTap::ReadMaxOfCorners), the samples' largest
// taken NaN-skipping (MaxSkippingNaN) from the first; max_start is then unused.
template <typename A>
struct PoolMode {
  bool max;
  A max_start, empty_bin;
  bool of_corners = false;
};

// Average pooling: the rotated nodes' only mode, and ROIAlign_TRT's mode 1.
template <typename A>
constexpr PoolMode<A> kAveragePool{.max = false, .max_start = A(0), .empty_bin = A(0)};

// ONNX's max mode (ONNX Runtime's RoiAlign, TensorRT's ROIAlign_TRT): 0 for a bin without samples.
template <typename A>
constexpr PoolMode<A> kMaxOfCorners{.max = true, .max_start = A(0), .empty_bin = A(0), .of_corners = true};

// Whether roi `roi` (`columns` values, the first a batch index into `images` images) passes
// CheckRoi: finite values, and an index that names an image after truncation toward zero.
template <typename T>
ORTOPS_HD bool RoiIsValid(const T* roi, int64_t columns, int64_t images) {
  for (int64_t k = 0; k < columns; ++k) {
    if (!std::isfinite(roi[k])) return false;
  }
  const auto index = static_cast<int64_t>(roi[0]);
  return index >= 0 && index < images;
}

// Fails unless roi number `r` passes RoiIsValid, saying why. `input_name` is the input whose
// first dimension counts the images.
template <typename T>
void CheckRoi(const T* roi, int64_t r, int64_t columns, const Shape& input_shape, const char* input_name = "input") {
  for (int64_t k = 0; k < columns; ++k) Check(std::isfinite(roi[k]), "roi ", r, " in input 'rois' is not finite");
  const int64_t images = input_shape[0];
  const auto index = static_cast<int64_t>(roi[0]);
  Check(index >= 0 && index < images, "roi ", r, " has batch index ", roi[0], ", but input '", input_name, "' has ",
        images, " images (shape ", ShapeText{input_shape}, ")");
}

// The shape of rois [R, columns] (`layout` names the columns in the message).
template <typename T>
void CheckRoisShape(const ConstTensor<T>& rois, int64_t columns, const char* layout) {
  Check(rois.dim(1) == columns, "input 'rois' must have shape [R, ", columns, "] ", layout, ", got ",
        ShapeText{rois.shape});
}

// CheckRoisShape, and CheckRoi for every roi (host memory).
template <typename T>
void CheckRois(const ConstTensor<T>& rois, int64_t columns, const char* layout, const Shape& input_shape,
               const char* input_name = "input") {
  CheckRoisShape(rois, columns, layout);
  for (int64_t r = 0; r < rois.dim(0); ++r) CheckRoi(rois.data + columns * r, r, columns, input_shape, input_name);
}

// Samples per bin along one axis: sampling_ratio if positive, else ceil(roi size / bins)
// (0 for an empty or negative size); -1 when that is more than kMaxSamplesPerAxis.
template <typename T>
ORTOPS_HD int64_t GridSizeOrInvalid(int64_t sampling_ratio, T roi_size, int64_t bins) {
  if (sampling_ratio > 0) return sampling_ratio;
  const T grid = std::ceil(roi_size / static_cast<T>(bins));
  if (!(grid > 0)) return 0;
  if (!(grid <= static_cast<T>(kMaxSamplesPerAxis))) return -1;
  return static_cast<int64_t>(grid);
}

// A grid of grid_h x grid_w samples per bin that PoolingAttributes' bounds allow.
ORTOPS_HD inline bool GridIsValid(int64_t grid_h, int64_t grid_w, int64_t bins) {
  return grid_h >= 0 && grid_w >= 0 && grid_h * grid_w <= kMaxTapsPerRoi / bins;
}

// Fails for the geometry `g` (AlignedRoi, RotatedRoi) whose grid GridIsValid refuses,
// saying why.
template <typename Geometry>
void CheckGrid(const Geometry& g, const PoolingAttributes& pooling) {
  using A = decltype(g.roi_height);
  const char* too_many =
      " samples per bin along one axis (adaptive sampling), more than this op allows; check the rois";
  Check(g.grid_h >= 0, "a roi needs ", std::ceil(g.roi_height / static_cast<A>(pooling.output_height)), too_many);
  Check(g.grid_w >= 0, "a roi needs ", std::ceil(g.roi_width / static_cast<A>(pooling.output_width)), too_many);
  Check(g.grid_h * g.grid_w <= kMaxTapsPerRoi / pooling.bins(), "a roi needs ", g.grid_h, " x ", g.grid_w,
        " samples per bin, more than this op allows; lower 'sampling_ratio' or check the rois");
}

// No lower bound on a roi's sides (RoIAlign with aligned = 1).
template <typename A>
constexpr A kNoMinSide = -std::numeric_limits<A>::infinity();

// Along one axis of a roi's frame: sample i of bin p, for bins of size `bin` from `start`
// with `grid` samples each (mmcv's and torchvision's arithmetic, in this order).
template <typename A>
ORTOPS_HD A SampleInFrame(A start, A bin, int64_t p, int64_t i, int64_t grid) {
  return start + static_cast<A>(p) * bin + static_cast<A>(static_cast<A>(i) + A(0.5)) * bin / static_cast<A>(grid);
}

// An axis-aligned roi on its feature map: the corner its bins start from, their size, and the
// samples per bin along each axis. Its frame is the map's own. (RotatedRoi has the same
// interface: sample (iy, ix) of bin (ph, pw) is at FrameY(ph, iy), FrameX(pw, ix) in the roi's
// frame, read on the map at FromFrame of those; Sample does both.)
template <typename A>
struct AlignedRoi {
  A start_h, start_w, bin_h, bin_w;
  int64_t grid_h, grid_w;
  A roi_height, roi_width;

  ORTOPS_HD A FrameY(int64_t ph, int64_t iy) const { return SampleInFrame(start_h, bin_h, ph, iy, grid_h); }
  ORTOPS_HD A FrameX(int64_t pw, int64_t ix) const { return SampleInFrame(start_w, bin_w, pw, ix, grid_w); }
  ORTOPS_HD void FromFrame(A yy, A xx, A& y, A& x) const {
    y = yy;
    x = xx;
  }
  ORTOPS_HD void Sample(int64_t ph, int64_t pw, int64_t iy, int64_t ix, A& y, A& x) const {
    FromFrame(FrameY(ph, iy), FrameX(pw, ix), y, x);
  }
};

// RoIAlign's geometry (mmcv, torchvision) for the box (x1, y1, x2, y2): corners times `scale`,
// shifted by -0.5 when aligned; sides below `min_side` raised to it (RoIAlign: 1 when not
// aligned, kNoMinSide when aligned). Its grid is invalid (GridIsValid) for a roi that needs
// too many samples.
template <typename A>
ORTOPS_HD AlignedRoi<A> AlignedRoiGeometryOf(const A* box, A scale, A min_side, const PoolingAttributes& pooling) {
  const A shift = pooling.aligned ? A(0.5) : A(0);
  AlignedRoi<A> g;
  g.start_w = box[0] * scale - shift;
  g.start_h = box[1] * scale - shift;
  g.roi_width = std::max(box[2] * scale - shift - g.start_w, min_side);
  g.roi_height = std::max(box[3] * scale - shift - g.start_h, min_side);
  g.bin_h = g.roi_height / static_cast<A>(pooling.output_height);
  g.bin_w = g.roi_width / static_cast<A>(pooling.output_width);
  g.grid_h = GridSizeOrInvalid(pooling.sampling_ratio, g.roi_height, pooling.output_height);
  g.grid_w = GridSizeOrInvalid(pooling.sampling_ratio, g.roi_width, pooling.output_width);
  return g;
}

// AlignedRoiGeometryOf, failing for a roi that needs too many samples.
template <typename A>
AlignedRoi<A> AlignedRoiGeometry(const A* box, A scale, A min_side, const PoolingAttributes& pooling) {
  const AlignedRoi<A> g = AlignedRoiGeometryOf(box, scale, min_side, pooling);
  CheckGrid(g, pooling);
  return g;
}

// A rotated roi on its feature map: its centre, the corner of its own frame the bins start
// from (-w/2, -h/2), their size, the rotation and the samples per bin along each axis.
template <typename A>
struct RotatedRoi {
  A center_h, center_w, start_h, start_w, bin_h, bin_w, cos_theta, sin_theta;
  int64_t grid_h, grid_w;
  A roi_height, roi_width;

  // Sample (iy, ix) of bin (ph, pw): at (xx, yy) = (FrameX(pw, ix), FrameY(ph, iy)) in the
  // roi's frame, read at x = yy sin + xx cos + cx, y = yy cos - xx sin + cy.
  ORTOPS_HD void Sample(int64_t ph, int64_t pw, int64_t iy, int64_t ix, A& y, A& x) const {
    FromFrame(FrameY(ph, iy), FrameX(pw, ix), y, x);
  }
  ORTOPS_HD A FrameY(int64_t ph, int64_t iy) const { return SampleInFrame(start_h, bin_h, ph, iy, grid_h); }
  ORTOPS_HD A FrameX(int64_t pw, int64_t ix) const { return SampleInFrame(start_w, bin_w, pw, ix, grid_w); }
  ORTOPS_HD void FromFrame(A yy, A xx, A& y, A& x) const {
    y = yy * cos_theta - xx * sin_theta + center_h;
    x = yy * sin_theta + xx * cos_theta + center_w;
  }
};

// RoIAlignRotated's geometry (mmcv, Detectron2) for the box (cx, cy, w, h, theta): the centre
// times `scale`, shifted by -0.5 when aligned; the sides times `scale`, raised to `min_side`
// (mmcv: 1 when not aligned, kNoMinSide when aligned); theta negated when clockwise. Its grid
// is invalid (GridIsValid) for a roi that needs too many samples.
template <typename A>
ORTOPS_HD RotatedRoi<A> RotatedRoiGeometryOf(const A* box, A scale, A min_side, bool clockwise,
                                             const PoolingAttributes& pooling) {
  const A shift = pooling.aligned ? A(0.5) : A(0);
  RotatedRoi<A> g;
  g.center_w = box[0] * scale - shift;
  g.center_h = box[1] * scale - shift;
  g.roi_width = std::max(box[2] * scale, min_side);
  g.roi_height = std::max(box[3] * scale, min_side);
  const A theta = clockwise ? -box[4] : box[4];
  g.cos_theta = std::cos(theta);
  g.sin_theta = std::sin(theta);
  g.bin_h = g.roi_height / static_cast<A>(pooling.output_height);
  g.bin_w = g.roi_width / static_cast<A>(pooling.output_width);
  g.grid_h = GridSizeOrInvalid(pooling.sampling_ratio, g.roi_height, pooling.output_height);
  g.grid_w = GridSizeOrInvalid(pooling.sampling_ratio, g.roi_width, pooling.output_width);
  g.start_h = -g.roi_height / A(2);
  g.start_w = -g.roi_width / A(2);
  return g;
}

// A box's geometry as a value: AlignedRoiGeometryOf for boxes (x1, y1, x2, y2), and
// RotatedRoiGeometryOf for (cx, cy, w, h, theta), with the parameters of one node.
template <typename A>
struct AlignedGeometry {
  static constexpr int64_t kBoxValues = 4;
  A scale, min_side;
  PoolingAttributes pooling;
  ORTOPS_HD AlignedRoi<A> operator()(const A* box) const { return AlignedRoiGeometryOf(box, scale, min_side, pooling); }
};

template <typename A>
struct RotatedGeometry {
  static constexpr int64_t kBoxValues = 5;
  A scale, min_side;
  bool clockwise;
  PoolingAttributes pooling;
  ORTOPS_HD RotatedRoi<A> operator()(const A* box) const {
    return RotatedRoiGeometryOf(box, scale, min_side, clockwise, pooling);
  }
};

}  // namespace ortops::roi_pooling
