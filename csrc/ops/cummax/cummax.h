#pragma once

#include <utility>

#include "core/op_kernel.h"
#include "ops/cummax/scan_rows.h"

namespace ortops::cummax {
extern const OpSchema kSchema;
KernelFactory MakeMax, MakeMin, MakeMaxDevice, MakeMinDevice;

// The attribute 'dim', read once, as both kernels take it.
struct Axis {
  explicit Axis(const Attributes& attrs) : dim(attrs.Int("dim")) {}
  int64_t dim;
};

// `input` viewed as [outer, length, inner] along attribute `dim` (negative counts from the
// end; a rank-0 input is one element, scanned along dim 0 or -1), checked as both kernels
// check it.
template <typename T>
scan::Layout LayoutAlong(const ConstTensor<T>& input, int64_t dim) {
  const auto rank = static_cast<int64_t>(input.rank());
  const int64_t axes = rank == 0 ? 1 : rank;
  Check(dim >= -axes && dim < axes, "attribute 'dim' = ", dim, " is out of range for input 'input' of rank ", rank,
        " (shape ", ShapeText{input.shape}, ")");
  const int64_t axis = dim < 0 ? dim + axes : dim;
  scan::Layout layout{1, 1, 1};
  for (int64_t a = 0; a < rank; ++a) {
    if (a < axis) layout.outer *= input.dim(static_cast<size_t>(a));
    if (a == axis) layout.length = input.dim(static_cast<size_t>(a));
    if (a > axis) layout.inner *= input.dim(static_cast<size_t>(a));
  }
  return layout;
}

// One call, from a KernelIO or a device::DeviceIO: the input, checked and viewed as lines along
// `dim`, and the two outputs of its shape.
template <typename T>
struct ScanCall {
  ConstTensor<T> input;
  scan::Layout layout;
  T* values;
  int64_t* indices;
};

template <typename T, typename IO>
ScanCall<T> PrepareCall(const IO& io, const Axis& axis) {
  ConstTensor<T> input = io.template Input<T>(0);
  const scan::Layout layout = LayoutAlong(input, axis.dim);
  T* values = io.template Output<T>(0, input.shape);
  int64_t* indices = io.template Output<int64_t>(1, input.shape);
  return {std::move(input), layout, values, indices};
}

}  // namespace ortops::cummax
