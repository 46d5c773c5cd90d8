// mmdeploy's TRTBicubicInterpolate: F.interpolate(mode='bicubic') by a scale factor, with
// PyTorch's arithmetic (A = -0.75, indices clamped to the border).
#include "ops/bicubic_interpolate/bicubic_interpolate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "math/cubic.h"

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

// Where output index i of one axis reads: four clamped source indices and their weights.
template <typename A>
struct AxisTaps {
  int64_t index[4];
  A weight[4];
};

template <typename T>
class BicubicKernel : public KernelBase {
 public:
  using Element = T;
  using A = T;  // float32 in float32, as PyTorch's CPU and CUDA kernels compute
  static constexpr const OpSchema& kSchema = bicubic_interpolate::kSchema;

  BicubicKernel(const Attributes& attrs, const OpDef& def)
      : KernelBase(def), align_corners_(attrs.Int("align_corners") != 0) {
    const std::vector<float> scale = attrs.Floats("scale_factor");
    Check(scale.size() == 2, "attribute 'scale_factor' must have 2 values (scale_h, scale_w), got ", scale.size());
    for (float s : scale) {
      Check(std::isfinite(s) && s > 0, "attribute 'scale_factor' values must be finite and positive, got ", scale[0],
            ", ", scale[1]);
    }
    scale_h_ = scale[0];
    scale_w_ = scale[1];
  }

  void Compute(const KernelIO& io) const {
    const ConstTensor<T> input = io.Input<T>(0, 4);
    const int64_t batch = input.dim(0), channels = input.dim(1), height = input.dim(2), width = input.dim(3);
    const int64_t out_h = OutputSize(height, scale_h_, "H", input.shape);
    const int64_t out_w = OutputSize(width, scale_w_, "W", input.shape);
    const int64_t planes = batch * channels;
    int64_t out_plane = 0, out_size = 0;
    Check(!__builtin_mul_overflow(out_h, out_w, &out_plane) && !__builtin_mul_overflow(out_plane, planes, &out_size),
          "the output [N, C, ", out_h, ", ", out_w, "] of input 'input' ", ShapeText{input.shape},
          " has more elements than int64 holds");
    T* output = io.Output<T>(0, {batch, channels, out_h, out_w});
    if (out_size == 0) return;
    if (out_h == height && out_w == width) {
      std::memcpy(output, input.data, static_cast<size_t>(out_size) * sizeof(T));
      return;
    }

    const Scratch<AxisTaps<A>> rows = io.Allocate<AxisTaps<A>>(static_cast<size_t>(out_h));
    const Scratch<AxisTaps<A>> columns = io.Allocate<AxisTaps<A>>(static_cast<size_t>(out_w));
    FillTaps(rows.data(), height, out_h, scale_h_);
    FillTaps(columns.data(), width, out_w, scale_w_);

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
        const AxisTaps<A>& ty = rows[static_cast<size_t>(y)];
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
        const A w0 = ty.weight[0], w1 = ty.weight[1], w2 = ty.weight[2], w3 = ty.weight[3];
        const A* __restrict l0 = line[0];
        const A* __restrict l1 = line[1];
        const A* __restrict l2 = line[2];
        const A* __restrict l3 = line[3];
        T* __restrict out = output + r * out_w;
        // PyTorch's order: each row interpolated along x, then the rows along y.
        for (int64_t x = 0; x < out_w; ++x)
          out[x] = static_cast<T>(((l0[x] * w0 + l1[x] * w1) + l2[x] * w2) + l3[x] * w3);
      }
    });
  }

 private:
  // out[x] = the input row interpolated along x at output column x.
  static void InterpolateRow(const T* __restrict row, const AxisTaps<A>* columns, int64_t out_w, A* __restrict out) {
    for (int64_t x = 0; x < out_w; ++x) {
      const AxisTaps<A>& tx = columns[x];
      out[x] = row[tx.index[0]] * tx.weight[0] + row[tx.index[1]] * tx.weight[1] + row[tx.index[2]] * tx.weight[2] +
               row[tx.index[3]] * tx.weight[3];
    }
  }

  // floor(size * scale), forgiving the float32 rounding of the stored factor.
  static int64_t OutputSize(int64_t size, float scale, const char* axis, const Shape& shape) {
    const double product = static_cast<double>(size) * static_cast<double>(scale);
    const double result = std::floor(product + product * 0x1p-23);
    Check(result < 0x1p62, "the output ", axis, " = floor(", size, " * ", scale, ") of input 'input' ",
          ShapeText{shape}, " is too large");
    return static_cast<int64_t>(result);
  }

  // PyTorch's area_pixel_compute_source_index (cubic: unclamped) and get_cubic_upsample_coefficients.
  void FillTaps(AxisTaps<A>* taps, int64_t in_size, int64_t out_size, float scale) const {
    A ratio;
    if (align_corners_) {
      ratio = out_size > 1 ? static_cast<A>(in_size - 1) / static_cast<A>(out_size - 1) : A(0);
    } else {
      ratio = static_cast<A>(1.0 / static_cast<double>(scale));
    }
    for (int64_t i = 0; i < out_size; ++i) {
      const A source = align_corners_ ? ratio * static_cast<A>(i) : ratio * (static_cast<A>(i) + A(0.5)) - A(0.5);
      const A floor = std::floor(source);
      CubicCoefficients<A>(source - floor, taps[i].weight);
      const auto first = static_cast<int64_t>(floor) - 1;
      for (int64_t k = 0; k < 4; ++k) taps[i].index[k] = std::clamp<int64_t>(first + k, 0, in_size - 1);
    }
  }

  bool align_corners_;
  float scale_h_ = 1, scale_w_ = 1;
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<BicubicKernel, float, double>(def); }

}  // namespace ortops::bicubic_interpolate
