// RoIAlignRotated's device path: RoIAlign's (roi_pool_device.h) with the rotated geometry,
// average pooling, and the CPU kernel's checks; the same bits as the CPU kernel.
#include "device/device_kernel.h"
#include "ops/roi_align/roi_pool_device.h"
#include "ops/roi_align_rotated/roi_align_rotated.h"

namespace ortops::roi_align_rotated {
namespace {

template <typename T>
struct RoiAlignRotatedDeviceKernel : OpKernel<T, kSchema, RotatedAttributes, device::DeviceKernelBase> {
  using OpKernel<T, kSchema, RotatedAttributes, device::DeviceKernelBase>::OpKernel;
  using A = ComputeType<T>;

  void Compute(const device::DeviceIO& io, const RotatedAttributes& attributes) const {
    const ConstTensor<T> input = io.Input<T>(0, 4);
    const ConstTensor<T> rois = io.Input<T>(1, 2);
    roi_pooling::CheckRoisShape(rois, 6, kRoiLayout);
    roi_pooling::PoolIndexedRois(io, input, rois, attributes.Geometry<A>(),
                                 roi_pooling::MeanOrMax<A>{roi_pooling::kAveragePool<A>});
  }
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) {
  return MakeOps<RoiAlignRotatedDeviceKernel, float, double, Half>(def);
}

}  // namespace ortops::roi_align_rotated
