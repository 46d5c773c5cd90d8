// GridSample's device path: one thread per grid point and four channels, with the
// arithmetic of the CPU kernel's planar loops (grid_points.h: PyTorch's unnormalization,
// padding, taps, and sums in its order), so that both return the same bits; the CPU
// kernel's vectorised loops give its planar loops' bits too (test_grid_sample checks that).
// As the CPU kernel locates a point once for all channels, a thread locates its point once
// for its four: their reads are independent (in flight together on a GPU), and neighbouring
// threads take neighbouring points, so that each channel's outputs are written side by side.
#include <limits>

#include "device/device_kernel.h"
#include "ops/grid_sample/grid_points.h"
#include "ops/grid_sample/grid_sample.h"

namespace ortops::grid_sample {
namespace {

// Point i % out_plane of image n, channels kChannels g to kChannels g + kChannels - 1, for
// i / out_plane = n groups + g, of the [N, C, H_out, W_out] output. Float16 is read and
// summed as float, as the CPU kernel computes it, and rounded once on store.
template <typename T>
struct SamplePoint {
  using A = ComputeType<T>;
  static constexpr int64_t kChannels = 4;
  const T* input;  // [N, C, H, W]
  const T* grid;   // [N, H_out, W_out, 2]
  T* output;
  int64_t channels, out_plane;
  Axis<A> x_axis, y_axis;
  Interpolation mode;

  ORTOPS_HD static int64_t Groups(int64_t channels) { return (channels + kChannels - 1) / kChannels; }
  ORTOPS_HD void operator()(int64_t i) const {
    const int64_t groups = Groups(channels), point = i % out_plane;
    const int64_t n = i / out_plane / groups, first = i / out_plane % groups * kChannels;
    const int64_t here = channels - first < kChannels ? channels - first : kChannels;
    const T* xy = grid + 2 * (n * out_plane + point);
    const A gx = static_cast<A>(xy[0]), gy = static_cast<A>(xy[1]);
    const int64_t plane = y_axis.size * x_axis.size;
    const T* map = input + (n * channels + first) * plane;
    A value[kChannels];
    if (mode == Interpolation::kBicubic) {
      const PointTaps<A> taps = LocateBicubic(gx, gy, x_axis, y_axis);
      ORTOPS_UNROLL
      for (int64_t k = 0; k < kChannels; ++k) value[k] = k < here ? ReadBicubic(taps, map + k * plane, x_axis.size) : 0;
    } else {
      // Bilinear and nearest: PyTorch accumulates from 0 over the taps inside the map, in order.
      ORTOPS_UNROLL
      for (int64_t k = 0; k < kChannels; ++k) value[k] = 0;
      const bool number = LocateLinear(mode, gx, gy, x_axis, y_axis, [&](int64_t offset, A weight) {
        ORTOPS_UNROLL
        for (int64_t k = 0; k < kChannels; ++k) {
          if (k < here) value[k] += static_cast<A>(map[k * plane + offset]) * weight;
        }
      });
      if (!number) {
        ORTOPS_UNROLL
        for (int64_t k = 0; k < kChannels; ++k) value[k] = std::numeric_limits<A>::quiet_NaN();
      }
    }
    T* out = output + (n * channels + first) * out_plane + point;
    ORTOPS_UNROLL
    for (int64_t k = 0; k < kChannels; ++k) {
      if (k < here) out[k * out_plane] = static_cast<T>(value[k]);
    }
  }
};

template <typename T>
struct GridSampleDeviceKernel : OpKernel<T, kSchema, GridSampleAttributes, device::DeviceKernelBase> {
  using OpKernel<T, kSchema, GridSampleAttributes, device::DeviceKernelBase>::OpKernel;
  using A = ComputeType<T>;

  void Compute(const device::DeviceIO& io, const GridSampleAttributes& attributes) const {
    const GridSampleCall<T> call = PrepareCall<T>(io);
    if (call.empty) return;
    const int64_t out_plane = call.out_plane();
    io.ForEach(call.batch() * SamplePoint<T>::Groups(call.channels()) * out_plane,
               SamplePoint<T>{call.input.data, call.grid.data, call.output, call.channels(), out_plane,
                              attributes.AxisOf<A>(call.width()), attributes.AxisOf<A>(call.height()),
                              attributes.interpolation()});
  }
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<GridSampleDeviceKernel, float, double, Half>(def); }

}  // namespace ortops::grid_sample
