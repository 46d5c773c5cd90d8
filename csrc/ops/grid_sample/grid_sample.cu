// GridSample's device path: one thread per grid point and four channels, with the
// arithmetic of the CPU kernel's planar loops (grid_points.h: PyTorch's unnormalization,
// padding, taps, and sums in its order), so that both return the same bits; the CPU
// kernel's vectorised loops give its planar loops' bits too (test_grid_sample checks that).
// As the CPU kernel locates a point once for all channels, a thread locates its point once
// for its four: their reads are independent (in flight together on a GPU), and neighbouring
// threads take neighbouring points, so that each channel's outputs are written side by side.
// Where the points are many beside the map's pixels, the map is first copied channels last
// and the threads of a warp take 32 channels of one point instead, each of its taps one line
// (device/channel_tiles.h): the same arithmetic per channel, so the same bits.
#include <limits>

#include "device/channel_tiles.h"
#include "device/device_kernel.h"
#include "device/transpose.h"
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

// The value of channel c at point `point` of image n, as SamplePoint computes it, from the
// input copied channels last ([N, H W, C]): tap pixel p reads element p C + c.
template <typename T>
struct ChannelsLastPoint {
  using A = ComputeType<T>;
  const T* input;  // [N, H W, C]
  const T* grid;   // [N, H_out, W_out, 2]
  int64_t channels, out_plane;
  Axis<A> x_axis, y_axis;
  Interpolation mode;

  ORTOPS_HD T operator()(int64_t n, int64_t point, int64_t c) const {
    const T* xy = grid + 2 * (n * out_plane + point);
    const A gx = static_cast<A>(xy[0]), gy = static_cast<A>(xy[1]);
    const T* map = input + n * channels * y_axis.size * x_axis.size + c;
    if (mode == Interpolation::kBicubic) {
      return static_cast<T>(ReadBicubic(LocateBicubic(gx, gy, x_axis, y_axis), map, x_axis.size, channels));
    }
    A value = 0;
    const bool number = LocateLinear(mode, gx, gy, x_axis, y_axis, [&](int64_t offset, A weight) {
      value += static_cast<A>(map[offset * channels]) * weight;
    });
    return static_cast<T>(number ? value : std::numeric_limits<A>::quiet_NaN());
  }
};

template <typename T>
struct GridSampleDeviceKernel : OpKernel<T, kSchema, GridSampleAttributes, device::DeviceKernelBase> {
  using OpKernel<T, kSchema, GridSampleAttributes, device::DeviceKernelBase>::OpKernel;
  using A = ComputeType<T>;

  void Compute(const device::DeviceIO& io, const GridSampleAttributes& attributes) const {
    const GridSampleCall<T> call = PrepareCall<T>(io);
    if (call.empty) return;
    const int64_t out_plane = call.out_plane(), batch = call.batch(), channels = call.channels();
    const int64_t plane = call.height() * call.width();
    const Axis<A> x_axis = attributes.AxisOf<A>(call.width()), y_axis = attributes.AxisOf<A>(call.height());
    if (!device::ReadsChannelsLast(batch * out_plane, batch * plane, channels,
                                   call.input.size() * static_cast<int64_t>(sizeof(T)))) {
      io.ForEach(batch * SamplePoint<T>::Groups(channels) * out_plane,
                 SamplePoint<T>{call.input.data, call.grid.data, call.output, channels, out_plane, x_axis, y_axis,
                                attributes.interpolation()});
      return;
    }
    Scratch<T> copy = io.Allocate<T>(static_cast<size_t>(call.input.size()));
    device::TransposeLastTwo(io, call.input.data, copy.data(), batch, channels, plane);
    device::WriteChannelTiles(io,
                              ChannelsLastPoint<T>{copy.data(), call.grid.data, channels, out_plane, x_axis, y_axis,
                                                   attributes.interpolation()},
                              call.output, batch, channels, out_plane);
  }
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<GridSampleDeviceKernel, float, double, Half>(def); }

}  // namespace ortops::grid_sample
