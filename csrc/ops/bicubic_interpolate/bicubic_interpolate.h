#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/op_kernel.h"

namespace ortops::bicubic_interpolate {
extern const OpSchema kSchema;  // mmdeploy TRTBicubicInterpolate
KernelFactory Make, MakeDevice;

// The attributes of a TRTBicubicInterpolate node, read and checked once, as its CPU and device
// kernels take them.
struct BicubicAttributes {
  explicit BicubicAttributes(const Attributes& attrs) : align_corners(attrs.Int("align_corners") != 0) {
    const std::vector<float> scale = attrs.Floats("scale_factor");
    Check(scale.size() == 2, "attribute 'scale_factor' must have 2 values (scale_h, scale_w), got ", scale.size());
    for (float s : scale) {
      Check(std::isfinite(s) && s > 0, "attribute 'scale_factor' values must be finite and positive, got ", scale[0],
            ", ", scale[1]);
    }
    scale_h = scale[0];
    scale_w = scale[1];
  }

  bool align_corners;
  float scale_h = 1, scale_w = 1;
};

// floor(size * scale), forgiving the float32 rounding of the stored factor.
inline int64_t OutputSize(int64_t size, float scale, const char* axis, const Shape& shape) {
  const double product = static_cast<double>(size) * static_cast<double>(scale);
  const double result = std::floor(product + product * 0x1p-23);
  Check(result < 0x1p62, "the output ", axis, " = floor(", size, " * ", scale, ") of input 'input' ", ShapeText{shape},
        " is too large");
  return static_cast<int64_t>(result);
}

// The input of one call and its output [N, C, H_out, W_out] (`size` elements), from a
// KernelIO or a device::DeviceIO.
template <typename T>
struct ResizeCall {
  ConstTensor<T> input;
  T* output;
  int64_t out_h, out_w, size;

  int64_t height() const { return input.dim(2); }
  int64_t width() const { return input.dim(3); }
  // The output has the input's size: it is a copy of the input.
  bool copies() const { return out_h == height() && out_w == width(); }
};

// Checks input 0, sizes the output and makes it.
template <typename T, typename IO>
ResizeCall<T> PrepareCall(const IO& io, const BicubicAttributes& attributes) {
  ConstTensor<T> input = io.template Input<T>(0, 4);
  const int64_t batch = input.dim(0), channels = input.dim(1);
  const int64_t out_h = OutputSize(input.dim(2), attributes.scale_h, "H", input.shape);
  const int64_t out_w = OutputSize(input.dim(3), attributes.scale_w, "W", input.shape);
  int64_t out_plane = 0, size = 0;
  Check(
      !__builtin_mul_overflow(out_h, out_w, &out_plane) && !__builtin_mul_overflow(out_plane, batch * channels, &size),
      "the output [N, C, ", out_h, ", ", out_w, "] of input 'input' ", ShapeText{input.shape},
      " has more elements than int64 holds");
  T* output = io.template Output<T>(0, {batch, channels, out_h, out_w});
  return {std::move(input), output, out_h, out_w, size};
}

}  // namespace ortops::bicubic_interpolate
