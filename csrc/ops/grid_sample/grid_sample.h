#pragma once

#include <cstdint>
#include <utility>

#include "core/op_kernel.h"
#include "ops/grid_sample/grid_points.h"

namespace ortops::grid_sample {
extern const OpSchema kSchema;
KernelFactory Make, MakeDevice;

// The attributes of a grid_sample node, read and checked once, as its CPU and device kernels
// take them.
struct GridSampleAttributes {
  explicit GridSampleAttributes(const Attributes& attrs)
      : mode(attrs.Int("interpolation_mode")),
        padding(attrs.Int("padding_mode")),
        align_corners(attrs.Int("align_corners")) {
    Check(mode >= 0 && mode <= 2,
          "attribute 'interpolation_mode' must be 0 (bilinear), 1 (nearest) or 2 (bicubic), got ", mode);
    Check(padding >= 0 && padding <= 2,
          "attribute 'padding_mode' must be 0 (zeros), 1 (border) or 2 (reflection), got ", padding);
    Check(align_corners == 0 || align_corners == 1, "attribute 'align_corners' must be 0 or 1, got ", align_corners);
  }
  Interpolation interpolation() const { return static_cast<Interpolation>(mode); }
  // The axis of the map's width (x) or height (y), `size` long.
  template <typename A>
  Axis<A> AxisOf(int64_t size) const {
    return {size, align_corners == 1, static_cast<Padding>(padding)};
  }

  int64_t mode, padding, align_corners;
};

// The inputs of one call and its output [N, C, H_out, W_out], from a KernelIO or a
// device::DeviceIO. `empty`: the output has no element, and nothing is left to do (the map's
// size is then not checked).
template <typename T>
struct GridSampleCall {
  ConstTensor<T> input, grid;
  T* output;
  bool empty;

  int64_t batch() const { return input.dim(0); }
  int64_t channels() const { return input.dim(1); }
  int64_t height() const { return input.dim(2); }
  int64_t width() const { return input.dim(3); }
  int64_t out_plane() const { return grid.dim(1) * grid.dim(2); }
};

// Checks the shapes of inputs 0 (input) and 1 (grid), makes the output and, unless it is
// empty, checks the map that the points read.
template <typename T, typename IO>
GridSampleCall<T> PrepareCall(const IO& io) {
  ConstTensor<T> input = io.template Input<T>(0, 4);
  ConstTensor<T> grid = io.template Input<T>(1, 4);
  const int64_t batch = input.dim(0), channels = input.dim(1), height = input.dim(2), width = input.dim(3);
  Check(grid.dim(0) == batch && grid.dim(3) == 2, "input 'grid' must have shape [N, H_out, W_out, 2] with N = ", batch,
        ", got ", ShapeText{grid.shape});
  const int64_t out_h = grid.dim(1), out_w = grid.dim(2);
  T* output = io.template Output<T>(0, {batch, channels, out_h, out_w});
  const bool empty = batch * channels * out_h * out_w == 0;
  if (!empty) {
    Check(height > 0 && width > 0, "input 'input' has an empty map (shape ", ShapeText{input.shape},
          ") to sample from");
    Check(height * width < (int64_t{1} << 31), "input 'input' has planes of ", height, " x ", width,
          " elements, more than this op supports (2^31)");
  }
  return {std::move(input), std::move(grid), output, empty};
}

}  // namespace ortops::grid_sample
