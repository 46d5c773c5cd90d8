// RoIAlign's device path: one thread per pooled value, with the CPU kernel's geometry,
// bilinear rule, summation order and checks (roi_geometry.h, math/bilinear.h), so that both
// return the same bits.
#include "device/device_kernel.h"
#include "math/bilinear.h"
#include "ops/roi_align/roi_align.h"
#include "ops/roi_align/roi_geometry.h"

namespace ortops::roi_align {
namespace {

using roi_pooling::PoolingAttributes;
using roi_pooling::PoolMode;

template <typename T>
struct RoiIsBad {
  using A = ComputeType<T>;
  const T* rois;
  int64_t images;
  A scale, min_side;
  PoolingAttributes pooling;

  ORTOPS_HD bool operator()(int64_t r) const {
    A roi[5];
    for (int k = 0; k < 5; ++k) roi[k] = static_cast<A>(rois[5 * r + k]);
    if (!roi_pooling::RoiIsValid(roi, 5, images)) return true;
    const auto g = roi_pooling::AlignedRoiGeometryOf(roi + 1, scale, min_side, pooling);
    return !roi_pooling::GridIsValid(g.grid_h, g.grid_w, pooling.bins());
  }
};

// Pooled value i of the [R, C, output_height, output_width] output.
template <typename T>
struct PoolBin {
  using A = ComputeType<T>;
  const T* input;
  const T* rois;
  T* output;
  int64_t channels, height, width;
  A scale, min_side;
  PoolingAttributes pooling;
  PoolMode<A> mode;

  ORTOPS_HD void operator()(int64_t i) const {
    const int64_t pw = i % pooling.output_width, ph = i / pooling.output_width % pooling.output_height;
    const int64_t c = i / pooling.bins() % channels, r = i / (pooling.bins() * channels);
    A roi[5];
    for (int k = 0; k < 5; ++k) roi[k] = static_cast<A>(rois[5 * r + k]);
    const auto g = roi_pooling::AlignedRoiGeometryOf(roi + 1, scale, min_side, pooling);
    const int64_t plane = height * width;
    const T* map = input + (static_cast<int64_t>(roi[0]) * channels + c) * plane;
    A sum = 0, best = mode.max_start;
    for (int64_t iy = 0; iy < g.grid_h; ++iy) {
      const A y = g.SampleY(ph, iy);
      for (int64_t ix = 0; ix < g.grid_w; ++ix) {
        const A v = plane == 0 ? A(0) : RoiAlignTap(y, g.SampleX(pw, ix), height, width).Read(map);
        sum += v;
        if (v > best) best = v;
      }
    }
    const int64_t samples = g.grid_h * g.grid_w;
    if (!mode.max) {
      output[i] = static_cast<T>(sum / static_cast<A>(samples > 1 ? samples : 1));
    } else {
      output[i] = static_cast<T>(samples == 0 ? mode.empty_bin : best);
    }
  }
};

template <typename T>
class RoiAlignDeviceKernel : public device::DeviceKernelBase {
 public:
  using Element = T;
  using A = ComputeType<T>;
  static constexpr const OpSchema& kSchema = roi_align::kSchema;

  RoiAlignDeviceKernel(const Attributes& attrs, const OpDef& def)
      : DeviceKernelBase(def), pooling_(attrs), mode_(ReadMode<A>(attrs, def)) {}

  void Compute(const device::DeviceIO& io) const {
    const ConstTensor<T> input = io.Input<T>(0, 4);
    const ConstTensor<T> rois = io.Input<T>(1, 2);
    roi_pooling::CheckRoisShape(rois, 5, "(batch_index, x1, y1, x2, y2)");
    const A scale = static_cast<A>(pooling_.spatial_scale);
    // mmcv raised the sides of a legacy (not aligned) roi to 1.
    const A min_side = pooling_.aligned ? roi_pooling::kNoMinSide<A> : A(1);
    const int64_t roi_count = rois.dim(0), channels = input.dim(1);
    device::CheckEach(io, rois.data, roi_count, 5, RoiIsBad<T>{rois.data, input.dim(0), scale, min_side, pooling_},
                      [&](int64_t r, const T* roi_values) {
                        A roi[5];
                        for (int k = 0; k < 5; ++k) roi[k] = static_cast<A>(roi_values[k]);
                        roi_pooling::CheckRoi(roi, r, 5, input.shape);
                        roi_pooling::AlignedRoiGeometry(roi + 1, scale, min_side, pooling_);
                      });
    T* output = io.Output<T>(0, {roi_count, channels, pooling_.output_height, pooling_.output_width});
    io.ForEach(roi_count * channels * pooling_.bins(), PoolBin<T>{input.data, rois.data, output, channels, input.dim(2),
                                                                  input.dim(3), scale, min_side, pooling_, mode_});
  }

 private:
  PoolingAttributes pooling_;
  PoolMode<A> mode_;
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<RoiAlignDeviceKernel, float, double, Half>(def); }

}  // namespace ortops::roi_align
