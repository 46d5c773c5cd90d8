#pragma once

#include <cstdint>
#include <utility>

#include "core/host_device.h"
#include "core/op_kernel.h"

namespace ortops::grid_priors {
extern const OpSchema kSchema;  // mmdeploy GridPriorsTRT
KernelFactory Make, MakeDevice;

// The attributes of a GridPriorsTRT node, as its CPU and device kernels take them.
struct Strides {
  explicit Strides(const Attributes& attrs) : h(attrs.Int("stride_h")), w(attrs.Int("stride_w")) {}
  int64_t h, w;
};

// The inputs of one call, from a KernelIO or a device::DeviceIO: the base anchors [A, 4], the
// grid's height and width (the lengths of feat_h and feat_w) and the anchors' count H * W * A.
template <typename T>
struct PriorsCall {
  ConstTensor<T> base;
  int64_t height, width, anchors, count;
};

// Checks the inputs' shapes and that the output's size fits in int64.
template <typename T, typename IO>
PriorsCall<T> PrepareCall(const IO& io) {
  ConstTensor<T> base = io.template Input<T>(0, 2);
  Check(base.dim(1) == 4, "input 'base_anchors' must have shape [A, 4], got ", ShapeText{base.shape});
  const int64_t height = io.template Input<int64_t>(1, 1).dim(0);
  const int64_t width = io.template Input<int64_t>(2, 1).dim(0);
  const int64_t anchors = base.dim(0);
  int64_t cells = 0, count = 0;
  Check(!__builtin_mul_overflow(height, width, &cells) && !__builtin_mul_overflow(cells, anchors, &count) &&
            count <= INT64_MAX / 4,
        "the output [H * W * A, 4] has more elements than int64 holds (H = ", height, ", W = ", width,
        ", A = ", anchors, ")");
  return {std::move(base), height, width, anchors, count};
}

// Base anchor `base` (x1, y1, x2, y2) shifted by (shift_x, shift_y), into `out`.
template <typename T>
ORTOPS_HD void ShiftAnchor(const T* base, T shift_x, T shift_y, T* out) {
  out[0] = base[0] + shift_x;
  out[1] = base[1] + shift_y;
  out[2] = base[2] + shift_x;
  out[3] = base[3] + shift_y;
}

}  // namespace ortops::grid_priors
