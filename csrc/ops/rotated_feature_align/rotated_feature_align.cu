// Rotated feature alignment's device path: one thread per output value, with the CPU
// kernel's taps (box_taps.h), bilinear rule and summation order. The CPU kernel computes a
// pixel's taps once for all channels; here each thread computes its own from the box (a
// sine, a cosine and five taps against up to twenty reads of the map).
#include "device/device_kernel.h"
#include "math/bilinear.h"
#include "ops/rotated_feature_align/box_taps.h"
#include "ops/rotated_feature_align/rotated_feature_align.h"

namespace ortops::rotated_feature_align {
namespace {

// Output value i of the [N, C, H, W] output: the feature plus its samples.
template <typename T>
struct AlignValue {
  const T* features;  // [N, C, H, W]
  const T* boxes;     // [N, H, W, 5]
  T* output;
  int64_t channels, height, width, points;
  T scale;
  bool y_first;

  ORTOPS_HD void operator()(int64_t i) const {
    const int64_t plane = height * width, map_index = i / plane, pixel = i % plane;  // map_index: n * C + c
    const T* box = boxes + (map_index / channels * plane + pixel) * 5;
    // A NaN box, which the data check refuses: met only where it could not run (a CUDA graph).
    for (int k = 0; k < 5; ++k) {
      if (box[k] != box[k]) {
        output[i] = device::RefusedValue<T>();
        return;
      }
    }
    BilinearTap<T> taps[5];
    BoxTaps(box, scale, y_first, points, height, width, taps);
    const T* map = features + map_index * plane;
    T value = features[i];
    for (int64_t p = 0; p < points; ++p) value += taps[p].Read(map);
    output[i] = value;
  }
};

template <typename T>
class RotatedFeatureAlignDeviceKernel
    : public OpKernel<T, kSchema, RotatedFeatureAlignAttributes, device::DeviceKernelBase> {
 public:
  using OpKernel<T, kSchema, RotatedFeatureAlignAttributes, device::DeviceKernelBase>::OpKernel;

  void Compute(const device::DeviceIO& io, const RotatedFeatureAlignAttributes& attributes) const {
    const auto inputs = FeaturesAndBoxes<T>(io);
    const ConstTensor<T>& features = inputs.first;
    const ConstTensor<T>& boxes = inputs.second;
    Check(io.FirstWhere(boxes.size(), device::IsNaN<T>{boxes.data}) < 0, kBoxesNaN);
    T* output = io.Output<T>(0, features.shape);
    io.ForEach(features.size(),
               AlignValue<T>{features.data, boxes.data, output, features.dim(1), features.dim(2), features.dim(3),
                             attributes.points, static_cast<T>(attributes.spatial_scale), attributes.y_first});
  }
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<RotatedFeatureAlignDeviceKernel, float, double>(def); }

}  // namespace ortops::rotated_feature_align
