// Rotated feature alignment (R3Det's feature refinement; mmcv's MMCVRotatedFeatureAlign).
#include "ops/rotated_feature_align/rotated_feature_align.h"

#include <cmath>
#include <vector>

#include "math/bilinear.h"

namespace ortops::rotated_feature_align {
namespace {

constexpr IoSpec kInputs[] = {
    {"features", ElemType::kTypeParam, "`[N, C, H, W]` feature maps"},
    {"best_rbboxes", ElemType::kTypeParam,
     "`[N, H, W, 5]` one rotated box per pixel: (y, x, w, h, angle) in the `mmcv` domain, (x, y, w, h, angle) in "
     "`ortops`; angle in radians"},
};
constexpr IoSpec kOutputs[] = {
    {"output", ElemType::kTypeParam, "`[N, C, H, W]` features plus the sampled features"},
};
constexpr AttrSpec kAttributes[] = {
    {"spatial_scale", AttrType::kFloat, "1.0", "multiplies box centres and sizes (not angles)"},
    {"points", AttrType::kInt, "1", "1: sample each box's centre; 5: its centre and four corners"},
};

// Where each compatibility name's node differs from the runtime that defined it.
constexpr CompatDifferences kCompatDifferences[] = {
    {"mmcv",
     "None in the sampling (the (y, x, w, h, a) order of `best_rbboxes` is kept). mmcv 1.x's kernel "
     "turned a NaN in `best_rbboxes` into a pixel index (undefined in C++); ortops reports it as an "
     "error. It took float32 only; ortops also takes float64."},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "For every pixel, adds to the features the bilinear samples (RoIAlign's rule) of the same "
        "channel at the centre of that pixel's box, and with `points` = 5 also at its four corners "
        "centre +- u +- v, u = (cos a, sin a) w/2, v = (-sin a, cos a) h/2 (as (x, y) vectors), all "
        "lengths scaled by `spatial_scale`. The `mmcv` domain reads each box as (y, x, w, h, a), y "
        "first, as the original kernel did; the `ortops` domain reads (x, y, w, h, a). NaN in "
        "`best_rbboxes` is an error.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = kAttributes,
    .compat_differences = kCompatDifferences,
};

namespace {

template <typename T>
class RotatedFeatureAlignKernel : public KernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = rotated_feature_align::kSchema;

  RotatedFeatureAlignKernel(const Attributes& attrs, const OpDef& def)
      : KernelBase(def),
        spatial_scale_(attrs.Float("spatial_scale")),
        points_(attrs.Int("points")),
        y_first_(def.compat) {
    Check(points_ == 1 || points_ == 5, "attribute 'points' must be 1 or 5, got ", points_);
    Check(std::isfinite(spatial_scale_), "attribute 'spatial_scale' must be finite, got ", spatial_scale_);
  }

  void Compute(const KernelIO& io) const {
    const ConstTensor<T> features = io.Input<T>(0, 4);
    const ConstTensor<T> boxes = io.Input<T>(1, 4);
    const int64_t batch = features.dim(0), channels = features.dim(1), height = features.dim(2),
                  width = features.dim(3);
    Check(boxes.dim(0) == batch && boxes.dim(1) == height && boxes.dim(2) == width && boxes.dim(3) == 5,
          "input 'best_rbboxes' must have shape [N, H, W, 5] = [", batch, ", ", height, ", ", width, ", 5], got ",
          ShapeText{boxes.shape});
    for (int64_t i = 0; i < boxes.size(); ++i) Check(!std::isnan(boxes.data[i]), "input 'best_rbboxes' contains NaN");
    T* output = io.Output<T>(0, features.shape);
    if (features.size() == 0) return;
    const int64_t plane = height * width;
    io.ParallelFor(static_cast<size_t>(batch * height), [&](size_t task) {
      const int64_t n = static_cast<int64_t>(task) / height, h = static_cast<int64_t>(task) % height;
      ScratchVector<BilinearTap<T>> taps = io.Vector<BilinearTap<T>>(static_cast<size_t>(width * points_));
      for (int64_t w = 0; w < width; ++w)
        SamplePoints(boxes.data + ((n * height + h) * width + w) * 5, height, width, &taps[w * points_]);
      for (int64_t c = 0; c < channels; ++c) {
        const int64_t row = (n * channels + c) * plane + h * width;
        const T* map = features.data + (n * channels + c) * plane;
        for (int64_t w = 0; w < width; ++w) {
          T value = features.data[row + w];
          for (int64_t p = 0; p < points_; ++p) value += taps[w * points_ + p].Read(map);
          output[row + w] = value;
        }
      }
    });
  }

 private:
  // The taps of one pixel's box, in mmcv's order and arithmetic: centre, then the corners.
  void SamplePoints(const T* box, int64_t height, int64_t width, BilinearTap<T>* taps) const {
    const T scale = static_cast<T>(spatial_scale_);
    const T roi_y = (y_first_ ? box[0] : box[1]) * scale;
    const T roi_x = (y_first_ ? box[1] : box[0]) * scale;
    taps[0] = RoiAlignTap(roi_y, roi_x, height, width);
    if (points_ == 1) return;
    const T roi_w = box[2] * scale, roi_h = box[3] * scale, angle = box[4];
    const T half_w = roi_w / 2, half_h = roi_h / 2;
    const T cos_a = std::cos(angle), sin_a = std::sin(angle);
    const T wx = cos_a * half_w, wy = sin_a * half_w;
    const T hx = -sin_a * half_h, hy = cos_a * half_h;
    taps[1] = RoiAlignTap(roi_y + wy + hy, roi_x + wx + hx, height, width);
    taps[2] = RoiAlignTap(roi_y - wy + hy, roi_x - wx + hx, height, width);
    taps[3] = RoiAlignTap(roi_y - wy - hy, roi_x - wx - hx, height, width);
    taps[4] = RoiAlignTap(roi_y + wy - hy, roi_x + wx - hx, height, width);
  }

  float spatial_scale_;
  int64_t points_;
  bool y_first_;
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<RotatedFeatureAlignKernel, float, double>(def); }

}  // namespace ortops::rotated_feature_align
