// RoIAlign over rotated rois (mmcv's MMCVRoIAlignRotated, Detectron2's ROIAlignRotated).
#include "ops/roi_align_rotated/roi_align_rotated.h"

#include <cmath>
#include <vector>

#include "core/upcast.h"
#include "math/bilinear.h"
#include "ops/roi_align/roi_pooling.h"

namespace ortops::roi_align_rotated {
namespace {

constexpr IoSpec kInputs[] = {
    {"input", ElemType::kTypeParam, "`[N, C, H, W]` feature maps"},
    {"rois", ElemType::kTypeParam,
     "`[R, 6]` rotated rois as (batch_index, cx, cy, w, h, theta), theta in radians, in input-image coordinates"},
};
constexpr IoSpec kOutputs[] = {
    {"output", ElemType::kTypeParam, "`[R, C, output_height, output_width]` pooled features"},
};
constexpr AttrSpec kAttributes[] = {
    {"output_height", AttrType::kInt, "1", "height of each pooled output"},
    {"output_width", AttrType::kInt, "1", "width of each pooled output"},
    {"spatial_scale", AttrType::kFloat, "1.0", "multiplies roi centres and sizes to give feature-map coordinates"},
    {"sampling_ratio", AttrType::kInt, "0",
     "samples per bin along each axis; 0 or less: adaptive, ceil(roi size / output size)"},
    {"aligned", AttrType::kInt, "1",
     "1: shift the scaled centre by -0.5 pixel; 0: legacy, no shift and roi sides of at least 1"},
    {"clockwise", AttrType::kInt, "0", "1: theta turns clockwise (it is negated)"},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "RoIAlign over rotated rois, average pooling, as mmcv's MMCVRoIAlignRotated and Detectron2. "
        "A roi's centre is scaled by `spatial_scale` (and shifted by -0.5 when `aligned` is 1; only the "
        "centre shifts), its sides are scaled (and clamped to at least 1 when `aligned` is 0). A sample at "
        "offset (xx, yy) from the centre in the roi's own frame, starting at (-w/2, -h/2), is read at "
        "x = yy sin(theta) + xx cos(theta) + cx, y = yy cos(theta) - xx sin(theta) + cy (theta negated "
        "when `clockwise` is 1), with RoIAlign's bilinear rule. Sampling and the adaptive grid are as in "
        "RoIAlign; validation of rois too (finite values, batch index naming an image).",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = kAttributes,
};

namespace {

// Elements of T are read as A = ComputeType<T> and all arithmetic is in A, so a float16
// kernel computes what the float32 kernel does on the same values, then rounds once on store.
template <typename T>
class RoiAlignRotatedKernel : public KernelBase {
 public:
  using Element = T;
  using A = ComputeType<T>;
  static constexpr const OpSchema& kSchema = roi_align_rotated::kSchema;

  RoiAlignRotatedKernel(const Attributes& attrs, const OpDef& def)
      : KernelBase(def), pooling_(attrs), clockwise_(attrs.Int("clockwise")) {
    Check(clockwise_ == 0 || clockwise_ == 1, "attribute 'clockwise' must be 0 or 1, got ", clockwise_);
  }

  void Compute(const KernelIO& io) const {
    const ConstTensor<T> input = io.Input<T>(0, 4);
    const ConstTensor<T> roi_input = io.Input<T>(1, 2);
    Scratch<A> roi_storage;
    const ConstTensor<A> rois{Upcast(io, roi_input, roi_storage), roi_input.shape};
    roi_pooling::CheckRois(rois, 6, "(batch_index, cx, cy, w, h, theta)", input.shape);
    const int64_t channels = input.dim(1), height = input.dim(2), width = input.dim(3);
    const int64_t roi_count = rois.dim(0), bins = pooling_.bins(), plane = height * width;
    T* output = io.Output<T>(0, {roi_count, channels, pooling_.output_height, pooling_.output_width});
    if (roi_count == 0 || channels == 0) return;
    io.ParallelFor(static_cast<size_t>(roi_count), [&](size_t task) {
      const auto r = static_cast<int64_t>(task);
      const A* roi = rois.data + 6 * r;
      const A scale = static_cast<A>(pooling_.spatial_scale);
      const A shift = pooling_.aligned ? A(0.5) : A(0);
      const A center_w = roi[1] * scale - shift, center_h = roi[2] * scale - shift;
      A roi_width = roi[3] * scale, roi_height = roi[4] * scale;
      const A theta = clockwise_ ? -roi[5] : roi[5];
      const A cos_theta = std::cos(theta), sin_theta = std::sin(theta);
      if (!pooling_.aligned) {
        roi_width = std::max(roi_width, A(1));
        roi_height = std::max(roi_height, A(1));
      }
      const A bin_h = roi_height / static_cast<A>(pooling_.output_height),
              bin_w = roi_width / static_cast<A>(pooling_.output_width);
      const int64_t grid_h = roi_pooling::GridSize(pooling_.sampling_ratio, roi_height, pooling_.output_height);
      const int64_t grid_w = roi_pooling::GridSize(pooling_.sampling_ratio, roi_width, pooling_.output_width);
      roi_pooling::CheckTapCount(grid_h, grid_w, bins);
      const A start_h = -roi_height / A(2), start_w = -roi_width / A(2);

      ScratchVector<BilinearTap<A>> taps = io.Vector<BilinearTap<A>>(static_cast<size_t>(bins * grid_h * grid_w));
      size_t t = 0;
      for (int64_t ph = 0; ph < pooling_.output_height; ++ph) {
        for (int64_t pw = 0; pw < pooling_.output_width; ++pw) {
          for (int64_t iy = 0; iy < grid_h; ++iy) {
            const A yy = start_h + static_cast<A>(ph) * bin_h +
                         static_cast<A>(static_cast<A>(iy) + A(0.5)) * bin_h / static_cast<A>(grid_h);
            for (int64_t ix = 0; ix < grid_w; ++ix) {
              const A xx = start_w + static_cast<A>(pw) * bin_w +
                           static_cast<A>(static_cast<A>(ix) + A(0.5)) * bin_w / static_cast<A>(grid_w);
              const A y = yy * cos_theta - xx * sin_theta + center_h;
              const A x = yy * sin_theta + xx * cos_theta + center_w;
              taps[t++] = RoiAlignTap(y, x, height, width);
            }
          }
        }
      }
      const auto image = static_cast<int64_t>(roi[0]);
      for (int64_t c = 0; c < channels; ++c) {
        const T* map = plane == 0 ? nullptr : input.data + (image * channels + c) * plane;
        roi_pooling::AveragePool(map, taps.data(), bins, grid_h * grid_w, output + (r * channels + c) * bins);
      }
    });
  }

 private:
  roi_pooling::PoolingAttributes pooling_;
  int64_t clockwise_;
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<RoiAlignRotatedKernel, float, double, Half>(def); }

}  // namespace ortops::roi_align_rotated
