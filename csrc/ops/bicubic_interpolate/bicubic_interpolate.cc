// mmdeploy's TRTBicubicInterpolate: F.interpolate(mode='bicubic') by a scale factor, with
// PyTorch's arithmetic (A = -0.75, indices clamped to the border).
#include "ops/bicubic_interpolate/bicubic_interpolate.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ops/bicubic_interpolate/cubic_taps.h"

namespace ortops::bicubic_interpolate {
namespace {

constexpr IoSpec kInputs[] = {
    {"input", ElemType::kTypeParam, "`[N, C, H, W]` images"},
};
constexpr IoSpec kOutputs[] = {
    {"output", ElemType::kTypeParam, "`[N, C, H_out, W_out]` with H_out = floor(H * scale_h), W_out likewise"},
};
constexpr AttrSpec kAttributes[] = {
    {"scale_factor", AttrType::kFloats, "", "(scale_h, scale_w), each finite and positive"},
    {"align_corners", AttrType::kInt, "0",
     "1: the corner pixels' centres of input and output coincide; 0: their outer edges do (PyTorch's default)"},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "mmdeploy's bicubic resize (`mmdeploy::TRTBicubicInterpolate`, written by its TensorRT rewrite of "
        "`F.interpolate(mode='bicubic')`), equal to `torch.nn.functional.interpolate(input, "
        "scale_factor=(scale_h, scale_w), mode='bicubic', align_corners=...)`. The output is H_out = "
        "floor(H * scale_h) by W_out = floor(W * scale_w) (a product less than 2^-23 of itself below an "
        "integer counts as that integer: the factor is stored as float32 while PyTorch used the Python "
        "float, so a factor computed as size / H still gives that size). Output pixel x reads source "
        "coordinate x * (W - 1) / (W_out - 1) with `align_corners` 1 (0 when W_out is 1), else (x + 0.5) / "
        "scale_w - 0.5, unclamped; the 4 x 4 taps around it, whose indices are clamped to the image, are "
        "weighted by Keys' cubic kernel with A = -0.75, rows first, as PyTorch does. When the output has the "
        "input's size it is a copy of the input, as in PyTorch's CUDA kernel and the plugin. NaN and "
        "infinities propagate through the taps that read them; an empty input or output size gives an "
        "empty output.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = kAttributes,
    .differences =
        "The plugin sizes its output with the integer part of each scale factor (TensorRT's "
        "`IExprBuilder::constant` takes an int) and then resamples by H / H_out: it matches PyTorch only for "
        "integer factors (a factor of 1.5 gave a copy, one below 1 an empty output). ortops sizes and resamples "
        "as the exported module did, floor(H * scale_h) and 1 / scale_h, which is the same for integer "
        "factors. A missing `align_corners` (mmdeploy leaves it out when the call passed None) means 0 here, "
        "as PyTorch's None does; the plugin then used 1. With `align_corners` 1 the plugin used (H - 1) / "
        "(H_out - 1) only when both output sides exceed 1; ortops decides per axis, as PyTorch does. A "
        "single float `scale_factor` (an int factor in the Python call, which the plugin refused) is an "
        "error here too. float64 is also accepted.",
};

namespace {

template <typename T>
class BicubicKernel : public OpKernel<T, kSchema, BicubicAttributes> {
 public:
  using OpKernel<T, kSchema, BicubicAttributes>::OpKernel;
  using A = T;  // float32 in float32, as PyTorch's CPU and CUDA kernels compute

  void Compute(const KernelIO& io) const {
    const BicubicAttributes& attributes = this->attributes();
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
