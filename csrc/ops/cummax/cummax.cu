// CumMax / CumMin's device path: one thread per line along `dim` (scan_device.h), with the
// CPU kernel's layout, checks and step rule, so the same values, bits and indices.
#include "device/device_kernel.h"
#include "ops/cummax/cummax.h"
#include "ops/cummax/scan_device.h"

namespace ortops::cummax {
namespace {

template <typename T, bool kMax>
struct CumulativeDeviceKernel : OpKernel<T, kSchema, Axis, device::DeviceKernelBase> {
  using OpKernel<T, kSchema, Axis, device::DeviceKernelBase>::OpKernel;

  void Compute(const device::DeviceIO& io, const Axis& axis) const {
    const ScanCall<T> call = PrepareCall<T>(io, axis);
    scan::CumulativeExtremeOnDevice<T, kMax>(io, call.input.data, call.values, call.indices, call.layout, false);
  }
};

}  // namespace

std::vector<OpPtr> MakeMaxDevice(const OpDef& def) {
  return MakeOps<CumulativeDeviceKernel, true, float, double, int64_t, Half>(def);
}
std::vector<OpPtr> MakeMinDevice(const OpDef& def) {
  return MakeOps<CumulativeDeviceKernel, false, float, double, int64_t, Half>(def);
}

}  // namespace ortops::cummax
