// CornerPool's device path: CumMax's scan on the device (ops/cummax/scan_device.h), one
// thread per row or column, with the CPU kernel's direction and step rule: the same bits.
#include "device/device_kernel.h"
#include "ops/corner_pool/corner_pool.h"
#include "ops/cummax/scan_device.h"

namespace ortops::corner_pool {
namespace {

template <typename T>
struct CornerPoolDeviceKernel : OpKernel<T, kSchema, Direction, device::DeviceKernelBase> {
  using OpKernel<T, kSchema, Direction, device::DeviceKernelBase>::OpKernel;

  void Compute(const device::DeviceIO& io, const Direction& direction) const {
    const ConstTensor<T> input = io.Input<T>(0, 4);
    T* output = io.Output<T>(0, input.shape);
    scan::CumulativeExtremeOnDevice<T, true>(io, input.data, output, nullptr, direction.LayoutOf(input),
                                             direction.reverse());
  }
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<CornerPoolDeviceKernel, float, double, Half>(def); }

}  // namespace ortops::corner_pool
