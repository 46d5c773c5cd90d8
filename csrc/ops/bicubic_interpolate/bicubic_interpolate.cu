// TRTBicubicInterpolate's device path: one thread per output value, which interpolates its
// four input rows along x and then sums them along y, with the CPU kernel's taps and order of
// operations (cubic_taps.h), so the same bits. The CPU kernel interpolates each input row
// once for the output rows that share it; here each thread does its own 4 x 4 taps.
#include "device/device_kernel.h"
#include "ops/bicubic_interpolate/bicubic_interpolate.h"
#include "ops/bicubic_interpolate/cubic_taps.h"

namespace ortops::bicubic_interpolate {
namespace {

template <typename T>
struct CopyValue {
  const T* input;
  T* output;
  ORTOPS_HD void operator()(int64_t i) const { output[i] = input[i]; }
};

// Output value i of the [N, C, H_out, W_out] output.
template <typename T>
struct ResizeValue {
  const T* input;  // [N, C, H, W]
  T* output;
  int64_t out_h, out_w;
  ResizeAxis<T> y_axis, x_axis;

  ORTOPS_HD void operator()(int64_t i) const {
    const int64_t x = i % out_w, y = i / out_w % out_h, plane = i / (out_w * out_h);
    const AxisTaps<T> tx = x_axis.TapsAt(x), ty = y_axis.TapsAt(y);
    const int64_t width = x_axis.in_size;
    const T* image = input + plane * (y_axis.in_size * width);
    T line[4];
    for (int k = 0; k < 4; ++k) line[k] = InterpolateAlong(image + ty.index[k] * width, tx);
    output[i] = SumRows(line[0], line[1], line[2], line[3], ty);
  }
};

template <typename T>
struct BicubicDeviceKernel : OpKernel<T, kSchema, BicubicAttributes, device::DeviceKernelBase> {
  using OpKernel<T, kSchema, BicubicAttributes, device::DeviceKernelBase>::OpKernel;

  void Compute(const device::DeviceIO& io, const BicubicAttributes& attributes) const {
    const ResizeCall<T> call = PrepareCall<T>(io, attributes);
    if (call.copies()) {
      io.ForEach(call.size, CopyValue<T>{call.input.data, call.output});
      return;
    }
    const ResizeAxis<T> y_axis(call.height(), call.out_h, attributes.scale_h, attributes.align_corners);
    const ResizeAxis<T> x_axis(call.width(), call.out_w, attributes.scale_w, attributes.align_corners);
    io.ForEach(call.size, ResizeValue<T>{call.input.data, call.output, call.out_h, call.out_w, y_axis, x_axis});
  }
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<BicubicDeviceKernel, float, double>(def); }

}  // namespace ortops::bicubic_interpolate
