// CornerPool's device path: CumMax's scan on the device (ops/cummax/scan_device.h), one
// thread per row or column, with the CPU kernel's direction and step rule: the same bits.
#include "device/device_kernel.h"
#include "ops/corner_pool/corner_pool.h"
#include "ops/cummax/scan_device.h"

namespace ortops::corner_pool {
namespace {

template <typename T>
class CornerPoolDeviceKernel : public device::DeviceKernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = corner_pool::kSchema;

  CornerPoolDeviceKernel(const Attributes& attrs, const OpDef& def) : DeviceKernelBase(def), direction_(attrs) {}

  void Compute(const device::DeviceIO& io) const {
    const ConstTensor<T> input = io.Input<T>(0, 4);
    T* output = io.Output<T>(0, input.shape);
    scan::CumulativeExtremeOnDevice<T, true>(io, input.data, output, nullptr, direction_.LayoutOf(input),
                                             direction_.reverse());
  }

 private:
  Direction direction_;
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<CornerPoolDeviceKernel, float, double, Half>(def); }

}  // namespace ortops::corner_pool
