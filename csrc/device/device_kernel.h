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

}  // namespace ortops::device
