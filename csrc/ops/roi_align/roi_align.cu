// RoIAlign's device path: one thread per pooled value, with the CPU kernel's geometry,
// bilinear rule, summation order and checks (roi_pool_device.h, shared by the family), so
// that both return the same bits.
#include "device/device_kernel.h"
#include "ops/roi_align/roi_align.h"
#include "ops/roi_align/roi_pool_device.h"

namespace ortops::roi_align {
namespace {

template <typename T>
struct RoiAlignDeviceKernel : OpKernel<T, kSchema, RoiAlignAttributes<ComputeType<T>>, device::DeviceKernelBase> {
  using OpKernel<T, kSchema, RoiAlignAttributes<ComputeType<T>>, device::DeviceKernelBase>::OpKernel;
  using A = ComputeType<T>;

  void Compute(const device::DeviceIO& io, const RoiAlignAttributes<A>& attributes) const {
    const roi_pooling::PoolingAttributes& pooling = attributes.pooling;
    const ConstTensor<T> input = io.Input<T>(0, 4);
    const ConstTensor<T> rois = io.Input<T>(1, 2);
    roi_pooling::CheckRoisShape(rois, 5, "(batch_index, x1, y1, x2, y2)");
    // mmcv raised the sides of a legacy (not aligned) roi to 1.
    const A min_side = pooling.aligned ? roi_pooling::kNoMinSide<A> : A(1);
    roi_pooling::PoolIndexedRois(
        io, input, rois, roi_pooling::AlignedGeometry<A>{static_cast<A>(pooling.spatial_scale), min_side, pooling},
        roi_pooling::MeanOrMax<A>{attributes.mode});
  }
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<RoiAlignDeviceKernel, float, double, Half>(def); }

}  // namespace ortops::roi_align
