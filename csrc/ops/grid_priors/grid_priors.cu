// GridPriorsTRT's device path: one thread per anchor, shifted as the CPU kernel shifts it
// (float(x) * stride_w, ShiftAnchor), so the same bits.
#include "device/device_kernel.h"
#include "ops/grid_priors/grid_priors.h"

namespace ortops::grid_priors {
namespace {

// Anchor k = (y * W + x) * A + a of the [H * W * A, 4] output.
template <typename T>
struct PlaceAnchor {
  const T* base;  // [A, 4]
  T* out;
  int64_t width, anchors;
  T stride_h, stride_w;

  ORTOPS_HD void operator()(int64_t k) const {
    const int64_t a = k % anchors, cell = k / anchors, x = cell % width, y = cell / width;
    ShiftAnchor(base + a * 4, static_cast<T>(x) * stride_w, static_cast<T>(y) * stride_h, out + k * 4);
  }
};

template <typename T>
struct GridPriorsDeviceKernel : OpKernel<T, kSchema, Strides, device::DeviceKernelBase> {
  using OpKernel<T, kSchema, Strides, device::DeviceKernelBase>::OpKernel;

  void Compute(const device::DeviceIO& io, const Strides& strides) const {
    const PriorsCall<T> call = PrepareCall<T>(io);
    T* out = io.Output<T>(0, {call.count, 4});
    io.ForEach(call.count, PlaceAnchor<T>{call.base.data, out, call.width, call.anchors, static_cast<T>(strides.h),
                                          static_cast<T>(strides.w)});
  }
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<GridPriorsDeviceKernel, float, double>(def); }

}  // namespace ortops::grid_priors
