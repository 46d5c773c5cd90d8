// GridSample's device path: one thread per output value, with the arithmetic of the CPU
// kernel's planar loops (grid_points.h: PyTorch's unnormalization, padding, taps, and sums in
// its order), so that both return the same bits; the CPU kernel's vectorised loops give its
// planar loops' bits too (test_grid_sample checks that). Where the CPU kernel locates a point
// once for all channels, each thread here locates its own: the grid's point is read by the
// threads of all channels, and locating it costs a few operations against four to sixteen
// reads of the map.
#include <limits>

#include "device/device_kernel.h"
#include "ops/grid_sample/grid_points.h"
#include "ops/grid_sample/grid_sample.h"

namespace ortops::grid_sample {
namespace {

// Output value i of the [N, C, H_out, W_out] output. Float16 is read and summed as float, as
// the CPU kernel computes it, and rounded once on store.
template <typename T>
struct SamplePoint {
  using A = ComputeType<T>;
  const T* input;  // [N, C, H, W]
  const T* grid;   // [N, H_out, W_out, 2]
  T* output;
  int64_t channels, out_plane;
  Axis<A> x_axis, y_axis;
  Interpolation mode;

  ORTOPS_HD void operator()(int64_t i) const {
    const int64_t map_index = i / out_plane, point = i % out_plane;  // map_index: n * C + c
    const T* xy = grid + 2 * (map_index / channels * out_plane + point);
    const A gx = static_cast<A>(xy[0]), gy = static_cast<A>(xy[1]);
    const T* map = input + map_index * (y_axis.size * x_axis.size);
    const A value = mode == Interpolation::kBicubic
                        ? ReadBicubic(LocateBicubic(gx, gy, x_axis, y_axis), map, x_axis.size)
                        : ReadLinear(gx, gy, map);
    output[i] = static_cast<T>(value);
  }

  // Bilinear and nearest: PyTorch accumulates from 0 over the taps inside the map, in order.
  ORTOPS_HD A ReadLinear(A gx, A gy, const T* map) const {
    A sum = 0;
    const bool number = LocateLinear(mode, gx, gy, x_axis, y_axis,
                                     [&](int64_t offset, A weight) { sum += static_cast<A>(map[offset]) * weight; });
    return number ? sum : std::numeric_limits<A>::quiet_NaN();
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
    io.ForEach(call.batch() * call.channels() * out_plane,
               SamplePoint<T>{call.input.data, call.grid.data, call.output, call.channels(), out_plane,
                              attributes.AxisOf<A>(call.width()), attributes.AxisOf<A>(call.height()),
                              attributes.interpolation()});
  }
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<GridSampleDeviceKernel, float, double, Half>(def); }

}  // namespace ortops::grid_sample
