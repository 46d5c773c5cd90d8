#pragma once

#include "core/op_kernel.h"
#include "ops/cummax/scan_rows.h"

namespace ortops::corner_pool {
extern const OpSchema kSchema;
KernelFactory Make, MakeDevice;

// The attribute 'mode', read and checked once, and the scan it asks for, as the CPU and
// device kernels take them.
struct Direction {
  explicit Direction(const Attributes& attrs) : mode(attrs.Int("mode")) {
    Check(mode >= 0 && mode <= 3, "attribute 'mode' must be 0 (top), 1 (bottom), 2 (left) or 3 (right), got ", mode);
  }

  // The [N, C, H, W] input as lines along H (top, bottom) or W (left, right).
  template <typename T>
  scan::Layout LayoutOf(const ConstTensor<T>& input) const {
    const int64_t planes = input.dim(0) * input.dim(1), height = input.dim(2), width = input.dim(3);
    return mode <= 1 ? scan::Layout{planes, height, width} : scan::Layout{planes * height, width, 1};
  }
  bool reverse() const { return mode == 0 || mode == 2; }  // top and left scan toward the start

  int64_t mode;
};

}  // namespace ortops::corner_pool
