// RoIAlign over rotated rois (mmcv's MMCVRoIAlignRotated, Detectron2's ROIAlignRotated).
#include "ops/roi_align_rotated/roi_align_rotated.h"

#include <cmath>
#include <vector>

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

template <typename T>
class RoiAlignRotatedKernel : public KernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = roi_align_rotated::kSchema;

  RoiAlignRotatedKernel(const Attributes& attrs, const OpDef& def)
      : KernelBase(def), pooling_(attrs), clockwise_(attrs.Int("clockwise")) {
    Check(clockwise_ == 0 || clockwise_ == 1, "attribute 'clockwise' must be 0 or 1, got ", clockwise_);
  }

  void Compute(const KernelIO& io) const {
    const ConstTensor<T> input = io.Input<T>(0, 4);
    const ConstTensor<T> rois = io.Input<T>(1, 2);
    roi_pooling::CheckRois(rois, 6, "(batch_index, cx, cy, w, h, theta)", input.shape);
    const int64_t channels = input.dim(1), height = input.dim(2), width = input.dim(3);
    const int64_t roi_count = rois.dim(0), bins = pooling_.bins(), plane = height * width;
    T* output = io.Output<T>(0, {roi_count, channels, pooling_.output_height, pooling_.output_width});
    if (roi_count == 0 || channels == 0) return;
    io.ParallelFor(static_cast<size_t>(roi_count), [&](size_t task) {
      const auto r = static_cast<int64_t>(task);
      const T* roi = rois.data + 6 * r;
      const T scale = static_cast<T>(pooling_.spatial_scale);
      const T shift = pooling_.aligned ? T(0.5) : T(0);
      const T center_w = roi[1] * scale - shift, center_h = roi[2] * scale - shift;
      T roi_width = roi[3] * scale, roi_height = roi[4] * scale;
      const T theta = clockwise_ ? -roi[5] : roi[5];
      const T cos_theta = std::cos(theta), sin_theta = std::sin(theta);
      if (!pooling_.aligned) {
        roi_width = std::max(roi_width, T(1));
        roi_height = std::max(roi_height, T(1));
      }
      const T bin_h = roi_height / static_cast<T>(pooling_.output_height),
              bin_w = roi_width / static_cast<T>(pooling_.output_width);
      const int64_t grid_h = roi_pooling::GridSize(pooling_.sampling_ratio, roi_height, pooling_.output_height);
      const int64_t grid_w = roi_pooling::GridSize(pooling_.sampling_ratio, roi_width, pooling_.output_width);
      roi_pooling::CheckTapCount(grid_h, grid_w, bins);
      const T start_h = -roi_height / T(2), start_w = -roi_width / T(2);

      ScratchVector<BilinearTap<T>> taps = io.Vector<BilinearTap<T>>(static_cast<size_t>(bins * grid_h * grid_w));
      size_t t = 0;
      for (int64_t ph = 0; ph < pooling_.output_height; ++ph) {
        for (int64_t pw = 0; pw < pooling_.output_width; ++pw) {
          for (int64_t iy = 0; iy < grid_h; ++iy) {
            const T yy = start_h + static_cast<T>(ph) * bin_h +
                         static_cast<T>(static_cast<T>(iy) + T(0.5)) * bin_h / static_cast<T>(grid_h);
            for (int64_t ix = 0; ix < grid_w; ++ix) {
              const T xx = start_w + static_cast<T>(pw) * bin_w +
                           static_cast<T>(static_cast<T>(ix) + T(0.5)) * bin_w / static_cast<T>(grid_w);
              const T y = yy * cos_theta - xx * sin_theta + center_h;
              const T x = yy * sin_theta + xx * cos_theta + center_w;
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

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<RoiAlignRotatedKernel, float, double>(def); }

}  // namespace ortops::roi_align_rotated
