// mmdeploy's TRTBicubicInterpolate: F.interpolate(mode='bicubic') by a scale factor, with
// PyTorch's arithmetic (A = -0.75, indices clamped to the border).
#include "ops/bicubic_interpolate/bicubic_interpolate.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ops/bicubic_interpolate/cubic_taps.h"

namespace ortops::bicubic_interpolate {

namespace {

template <typename T>
struct BicubicKernel : OpKernel<T, kSchema, BicubicAttributes> {
  using OpKernel<T, kSchema, BicubicAttributes>::OpKernel;
  using A = T;  // float32 in float32, as PyTorch's CPU and CUDA kernels compute

  void Compute(const KernelIO& io, const BicubicAttributes& attributes) const {
    const ResizeCall<T> call = PrepareCall<T>(io, attributes);
    const ConstTensor<T>& input = call.input;
    T* output = call.output;
    const int64_t height = call.height(), width = call.width(), out_h = call.out_h, out_w = call.out_w;
    const int64_t planes = input.dim(0) * input.dim(1), out_size = call.size;
    if (out_size == 0) return;
    if (call.copies()) {
      std::memcpy(output, input.data, static_cast<size_t>(out_size) * sizeof(T));
      return;
    }

    const Scratch<AxisTaps<A>> rows = io.Allocate<AxisTaps<A>>(static_cast<size_t>(out_h));
    const Scratch<AxisTaps<A>> columns = io.Allocate<AxisTaps<A>>(static_cast<size_t>(out_w));
    const ResizeAxis<A> y_axis(height, out_h, attributes.scale_h, attributes.align_corners);
    const ResizeAxis<A> x_axis(width, out_w, attributes.scale_w, attributes.align_corners);
    for (int64_t y = 0; y < out_h; ++y) rows[static_cast<size_t>(y)] = y_axis.TapsAt(y);
    for (int64_t x = 0; x < out_w; ++x) columns[static_cast<size_t>(x)] = x_axis.TapsAt(x);

    // Output rows of all planes, in ranges of about kValuesPerTask outputs per task. Each input
    // row a range reads is interpolated along x once, into one of four rows kept by the task:
    // the four rows an output row reads are consecutive (clamped at the border), so row i
    // lives in slot i % 4 and an upscale by 2 interpolates half a row per output row instead
    // of four. Then each output row is its four rows' weighted sum, a loop over x that
    // vectorises. The same operations in PyTorch's order, so the same bits as interpolating
    // the 4 x 4 taps of each output pixel.
    constexpr int64_t kValuesPerTask = int64_t{1} << 14;
    constexpr int kSlots = 4;
    const int64_t total_rows = planes * out_h;
    const int64_t tasks = std::clamp<int64_t>(out_size / kValuesPerTask, 1, total_rows);
    io.ParallelForRanges(static_cast<size_t>(total_rows), static_cast<size_t>(tasks), [&](size_t begin, size_t end) {
      const Scratch<A> along_x = io.Allocate<A>(static_cast<size_t>(kSlots * out_w));
      int64_t held[kSlots] = {-1, -1, -1, -1};  // the input row (plane * H + row) in each slot
      for (auto r = static_cast<int64_t>(begin); r < static_cast<int64_t>(end); ++r) {
        const int64_t plane = r / out_h, y = r % out_h;
        const AxisTaps<A> ty = rows[static_cast<size_t>(y)];
        const A* line[kSlots];
        for (int i = 0; i < kSlots; ++i) {
          const int64_t slot = ty.index[i] % kSlots, input_row = plane * height + ty.index[i];
          A* along = along_x.data() + slot * out_w;
          if (held[slot] != input_row) {
            InterpolateRow(input.data + input_row * width, columns.data(), out_w, along);
            held[slot] = input_row;
          }
          line[i] = along;
        }
        const A* __restrict l0 = line[0];
        const A* __restrict l1 = line[1];
        const A* __restrict l2 = line[2];
        const A* __restrict l3 = line[3];
        T* __restrict out = output + r * out_w;
        // PyTorch's order: each row interpolated along x, then the rows along y.
        for (int64_t x = 0; x < out_w; ++x) out[x] = static_cast<T>(SumRows(l0[x], l1[x], l2[x], l3[x], ty));
      }
    });
  }

 private:
  // out[x] = the input row interpolated along x at output column x.
  static void InterpolateRow(const T* __restrict row, const AxisTaps<A>* columns, int64_t out_w, A* __restrict out) {
    for (int64_t x = 0; x < out_w; ++x) out[x] = InterpolateAlong(row, columns[x]);
  }
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<BicubicKernel, float, double>(def); }

}  // namespace ortops::bicubic_interpolate
