// The base of every device kernel. A device kernel is written as a CPU kernel is
// (core/custom_op.h), with `void Compute(const device::DeviceIO&) const`, and shares the CPU
// kernel's attribute parsing, checks and math; MakeOps registers it like any other.
#pragma once

#include "core/custom_op.h"
#include "device/device_io.h"

namespace ortops::device {

class DeviceKernelBase : public KernelBase {
 public:
  using IO = DeviceIO;
  static constexpr const char* kExecutionProvider = device::kExecutionProvider;
  using KernelBase::KernelBase;
};

// The base of a device kernel that reads inputs kHostInputs... on the host: small tensors that
// parametrise it (a threshold given as an input, as mmdeploy's NMSMatch takes them), which
// it needs before it launches anything. ONNX Runtime hands them over in host memory (copying
// them from the device first where a GPU node made them); the kernel reads them with
// DeviceIO::HostInput, the others with DeviceIO::Input as always.
template <size_t... kHostInputs>
class DeviceKernelWithHostInputs : public DeviceKernelBase {
 public:
  using DeviceKernelBase::DeviceKernelBase;
  static OrtMemType InputMemoryType(size_t index) {
    return ((index == kHostInputs) || ...) ? OrtMemTypeCPUInput : OrtMemTypeDefault;
  }
};

}  // namespace ortops::device
