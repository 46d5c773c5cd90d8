// Deformable convolution v1 and v2 (modulated), equal to torchvision.ops.deform_conv2d:
// deformed im2col, then a GEMM through ONNX Runtime's own MatMul.
#include "ops/deform_conv/deform_conv.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/ort_matmul.h"

namespace ortops::deform_conv {
namespace {

constexpr AttrSpec kConvAttributes[] = {
    {"stride", AttrType::kInts, "1,1", "(stride_h, stride_w)"},
    {"padding", AttrType::kInts, "0,0", "(pad_h, pad_w), applied on both sides"},
    {"dilation", AttrType::kInts, "1,1", "(dilation_h, dilation_w)"},
    {"groups", AttrType::kInt, "1", "convolution groups; C and C_out must be divisible by it"},
    {"deform_groups", AttrType::kInt, "1", "offset (and mask) groups; C must be divisible by it"},
};
constexpr AttrSpec kV1Attributes[] = {
    {"stride", AttrType::kInts, "1,1", "(stride_h, stride_w)"},
    {"padding", AttrType::kInts, "0,0", "(pad_h, pad_w), applied on both sides"},
    {"dilation", AttrType::kInts, "1,1", "(dilation_h, dilation_w)"},
    {"groups", AttrType::kInt, "1", "convolution groups; C and C_out must be divisible by it"},
    {"deform_groups", AttrType::kInt, "1", "offset groups; C must be divisible by it"},
    {"bias", AttrType::kInt, "0", "present in mmcv's files; ignored (this op has no bias input)"},
    {"im2col_step", AttrType::kInt, "32", "present in mmcv's files; ignored"},
};

constexpr IoSpec kInput = {"input", ElemType::kTypeParam, "`[N, C, H, W]` input feature maps"};
constexpr IoSpec kOffset = {"offset", ElemType::kTypeParam,
                            "`[N, 2 * deform_groups * kh * kw, H_out, W_out]`: channel 2k is dy and 2k+1 is dx for "
                            "kernel tap k = i * kw + j, per deform group"};
constexpr IoSpec kMask = {"mask", ElemType::kTypeParam,
                          "`[N, deform_groups * kh * kw, H_out, W_out]` modulation of each sample"};
constexpr IoSpec kWeight = {"weight", ElemType::kTypeParam, "`[C_out, C / groups, kh, kw]`"};
constexpr IoSpec kOutputs[] = {{"output", ElemType::kTypeParam, "`[N, C_out, H_out, W_out]`"}};

constexpr IoSpec kModulatedInputs[] = {
    kInput, kOffset, kMask, kWeight, {"bias", ElemType::kTypeParam, "`[C_out]` (optional)", true}};
constexpr IoSpec kV1Inputs[] = {kInput, kOffset, kWeight};
// torchvision's order. Both float and double kernels exist, so no input may be optional
// (ONNX Runtime 1.17 cannot type such a node): an empty tensor stands for "none" instead.
constexpr IoSpec kOrtopsInputs[] = {
    kInput,
    kOffset,
    kWeight,
    {"bias", ElemType::kTypeParam, "`[C_out]`, or `[0]` for no bias"},
    {"mask", ElemType::kTypeParam,
     "`[N, deform_groups * kh * kw, H_out, W_out]` modulation of each sample (DCNv2), or `[0]` for none (DCNv1)"},
};

// The semantics shared by the three schemas (a macro so that string literals can be joined).
#define ORTOPS_DEFORM_CONV_SEMANTICS                                                                  \
  "Deformable convolution, equal to `torchvision.ops.deform_conv2d`: kernel tap (i, j) of output "    \
  "(y, x) samples the input at (y * stride_h - pad_h + i * dilation_h + dy, x * stride_w - pad_w + "  \
  "j * dilation_w + dx) bilinearly, where a point outside (-1, H) x (-1, W) reads 0 and each of its " \
  "four neighbours outside the map reads 0; the sample is multiplied by the mask (modulated form), "  \
  "then the samples of a group's channels are multiplied with its weights (a GEMM run by ONNX "       \
  "Runtime's own MatMul) and the bias is added. Channel c uses deform group c / (C / deform_groups) " \
  "whatever its convolution group (mmcv 1.7.2 got groups > 1 with deform_groups > 1 wrong; this "     \
  "follows torchvision). H_out = (H + 2 pad_h - dilation_h (kh - 1) - 1) / stride_h + 1, likewise "   \
  "W_out; both must be at least 1. An empty batch gives an empty output."

}  // namespace

constexpr OpSchema kModulatedSchema{
    .doc =
        "mmcv's modulated deformable convolution (DCNv2), float32. The 5th input, bias, is "
        "optional. " ORTOPS_DEFORM_CONV_SEMANTICS,
    .inputs = kModulatedInputs,
    .outputs = kOutputs,
    .attributes = kConvAttributes,
};
constexpr OpSchema kV1Schema{
    .doc = "mmcv's deformable convolution (DCNv1, no mask, no bias input), float32. " ORTOPS_DEFORM_CONV_SEMANTICS,
    .inputs = kV1Inputs,
    .outputs = kOutputs,
    .attributes = kV1Attributes,
};
constexpr OpSchema kSchema{
    .doc =
        "Deformable convolution v1 or v2 with `torchvision.ops.deform_conv2d`'s inputs, in its order. "
        "`bias` and `mask` are required inputs, but an empty tensor (shape `[0]`) means \"none\": "
        "ONNX Runtime 1.17 cannot run a node that leaves out an optional input of an op with both "
        "float and double kernels. " ORTOPS_DEFORM_CONV_SEMANTICS,
    .inputs = kOrtopsInputs,
    .outputs = kOutputs,
    .attributes = kConvAttributes,
};

namespace {

enum class Layout { kModulated, kV1, kOrtops };

// One deformed sample: the four neighbours (offset into the channel plane, -1 when outside
// the map), their bilinear weights, the mask, and whether all four neighbours are inside,
// which spares the per-neighbour test. Read computes torchvision's
// mask * (w0 v0 + w1 v1 + w2 v2 + w3 v3) in that order, so a NaN or infinite mask
// propagates as it does there.
template <typename T>
struct Sample {
  int32_t offset[4];  // planes of 2^31 elements or more are refused in CheckShapes
  T weight[4];
  T mask;
  bool interior;
};

struct Geometry {
  int64_t batch, channels, height, width, out_channels, kernel_h, kernel_w, out_h, out_w;
};

// a * b, or an error naming `what` when it does not fit in int64 (attribute values and
// tensor dims are untrusted).
int64_t Product(int64_t a, int64_t b, const char* what) {
  int64_t result = 0;
  Check(!__builtin_mul_overflow(a, b, &result), what, " overflows: ", a, " x ", b);
  return result;
}

// Scratch per chunk of output positions stays near this size, so that the column buffer is
// still in cache when the GEMM reads it, and memory stays bounded for any image size.
constexpr int64_t kChunkBytes = int64_t{8} << 20;
constexpr int64_t kMinChunk = 64;  // positions; keeps the GEMM's N dimension useful
constexpr int64_t kSlice = 128;    // positions per fill task

template <typename T, Layout kLayout>
class DeformConvKernel : public KernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = kLayout == Layout::kModulated ? kModulatedSchema
                                             : kLayout == Layout::kV1      ? kV1Schema
                                                                           : deform_conv::kSchema;

  DeformConvKernel(const Attributes& attrs, const OpDef& def)
      : KernelBase(def),
        stride_(Pair(attrs, "stride")),
        padding_(Pair(attrs, "padding")),
        dilation_(Pair(attrs, "dilation")),
        groups_(attrs.Int("groups")),
        deform_groups_(attrs.Int("deform_groups")),
        matmul_(std::make_unique<OrtMatMul>(attrs.info(), OnnxType<T>())) {
    // The bound keeps every later product of an attribute and a tensor dim inside int64.
    constexpr int64_t kLimit = int64_t{1} << 31;
    Check(stride_[0] >= 1 && stride_[1] >= 1 && stride_[0] < kLimit && stride_[1] < kLimit,
          "attribute 'stride' must be positive (and below 2^31), got ", stride_[0], ",", stride_[1]);
    Check(dilation_[0] >= 1 && dilation_[1] >= 1 && dilation_[0] < kLimit && dilation_[1] < kLimit,
          "attribute 'dilation' must be positive (and below 2^31), got ", dilation_[0], ",", dilation_[1]);
    Check(padding_[0] >= 0 && padding_[1] >= 0 && padding_[0] < kLimit && padding_[1] < kLimit,
          "attribute 'padding' must be non-negative (and below 2^31), got ", padding_[0], ",", padding_[1]);
    Check(groups_ >= 1 && deform_groups_ >= 1, "attributes 'groups' and 'deform_groups' must be at least 1, got ",
          groups_, " and ", deform_groups_);
  }

  void Compute(const KernelIO& io) const {
    constexpr size_t kWeightIndex = kLayout == Layout::kOrtops ? 2 : kLayout == Layout::kModulated ? 3 : 2;
    const ConstTensor<T> input = io.Input<T>(0, 4);
    const ConstTensor<T> offset = io.Input<T>(1, 4);
    const ConstTensor<T> weight = io.Input<T>(kWeightIndex, 4);
    const Geometry g = CheckShapes(input, offset, weight);
    const int64_t taps = g.kernel_h * g.kernel_w, positions = g.out_h * g.out_w;
    const T* mask = MaskInput(io, g);
    const T* bias = BiasInput(io, g);
    T* output = io.Output<T>(0, {g.batch, g.out_channels, g.out_h, g.out_w});
    if (g.batch * g.out_channels * positions == 0) return;

    const int64_t group_channels = g.channels / groups_, group_out = g.out_channels / groups_;
    const int64_t rows = group_channels * taps;  // the GEMM's K
    if (rows == 0) {                             // no input channels: the output is the bias
      for (int64_t i = 0; i < g.batch * g.out_channels; ++i) {
        std::fill_n(output + i * positions, positions, bias ? bias[i % g.out_channels] : T(0));
      }
      return;
    }
    // Positions are processed in chunks; scratch comes from the session's allocator, whose
    // arena hands the same memory back run after run, once per Compute.
    const int64_t per_position = rows * static_cast<int64_t>(sizeof(T)) +
                                 deform_groups_ * taps * static_cast<int64_t>(sizeof(Sample<T>)) +
                                 group_out * static_cast<int64_t>(sizeof(T));
    const int64_t chunk = std::min(positions, std::max(kMinChunk, kChunkBytes / per_position / kSlice * kSlice));
    const Scratch<Sample<T>> samples = io.Allocate<Sample<T>>(static_cast<size_t>(deform_groups_ * taps * chunk));
    const Scratch<T> columns = io.Allocate<T>(static_cast<size_t>(rows * chunk));
    // When one chunk covers the image the GEMM writes straight into the output.
    const Scratch<T> product = io.Allocate<T>(chunk < positions ? static_cast<size_t>(group_out * chunk) : 0);
    const int64_t channels_per_deform_group = g.channels / deform_groups_;

    for (int64_t n = 0; n < g.batch; ++n) {
      const T* image = input.data + n * g.channels * g.height * g.width;
      const T* offset_n = offset.data + n * 2 * deform_groups_ * taps * positions;
      const T* mask_n = mask ? mask + n * deform_groups_ * taps * positions : nullptr;
      for (int64_t start = 0; start < positions; start += chunk) {
        const int64_t width = std::min(chunk, positions - start);
        const int64_t slices = (width + kSlice - 1) / kSlice;
        // Sampling weights once per (deform group, tap, position), shared by the channels
        // of the deform group in every convolution group.
        io.ParallelFor(static_cast<size_t>(deform_groups_ * taps * slices), [&](size_t task) {
          const int64_t line = static_cast<int64_t>(task) / slices;  // d * taps + k
          const int64_t begin = static_cast<int64_t>(task) % slices * kSlice;
          Locate(g, line, start + begin, start + std::min(width, begin + kSlice), offset_n, mask_n,
                 samples.data() + line * width + begin);
        });
        for (int64_t group = 0; group < groups_; ++group) {
          const int64_t first_channel = group * group_channels;
          // Tasks are (tap, slice of the chunk) and loop over the group's channels inside,
          // so a slice's samples stay in cache while every channel reads through them.
          io.ParallelFor(static_cast<size_t>(taps * slices), [&](size_t task) {
            const int64_t k = static_cast<int64_t>(task) / slices;
            const int64_t begin = static_cast<int64_t>(task) % slices * kSlice;
            const int64_t end = std::min(width, begin + kSlice);
            for (int64_t local = 0; local < group_channels; ++local) {
              const int64_t c = first_channel + local;
              const T* plane = image + c * g.height * g.width;
              const Sample<T>* sample = samples.data() + (c / channels_per_deform_group * taps + k) * width;
              T* column = columns.data() + (local * taps + k) * width;
              for (int64_t p = begin; p < end; ++p) column[p] = Read(sample[p], plane);
            }
          });
          T* out = output + (n * g.out_channels + group * group_out) * positions + start;
          T* target = width == positions ? out : product.data();
          matmul_->Run(io.context(), weight.data + group * group_out * rows, columns.data(), target, group_out, rows,
                       width);
          for (int64_t o = 0; o < group_out; ++o) {
            const T b = bias ? bias[group * group_out + o] : T(0);
            const T* src = target + o * width;
            T* dst = out + o * positions;
            for (int64_t p = 0; p < width; ++p) dst[p] = src[p] + b;
          }
        }
      }
    }
  }

 private:
  static std::array<int64_t, 2> Pair(const Attributes& attrs, const char* name) {
    const std::vector<int64_t> v = attrs.Ints(name);
    Check(v.size() == 2, "attribute '", name, "' must have 2 values, got ", v.size());
    return {v[0], v[1]};
  }

  Geometry CheckShapes(const ConstTensor<T>& input, const ConstTensor<T>& offset, const ConstTensor<T>& weight) const {
    Geometry g{
        input.dim(0), input.dim(1), input.dim(2), input.dim(3), weight.dim(0), weight.dim(2), weight.dim(3), 0, 0};
    Check(g.channels % groups_ == 0, "input 'input' ", ShapeText{input.shape}, " has C = ", g.channels,
          ", not divisible by groups = ", groups_);
    Check(g.out_channels % groups_ == 0, "input 'weight' ", ShapeText{weight.shape}, " has C_out = ", g.out_channels,
          ", not divisible by groups = ", groups_);
    Check(g.channels % deform_groups_ == 0, "input 'input' ", ShapeText{input.shape}, " has C = ", g.channels,
          ", not divisible by deform_groups = ", deform_groups_);
    Check(weight.dim(1) == g.channels / groups_,
          "input 'weight' must have shape [C_out, C / groups = ", g.channels / groups_, ", kh, kw], got ",
          ShapeText{weight.shape});
    Check(g.kernel_h >= 1 && g.kernel_w >= 1, "input 'weight' has an empty kernel: ", ShapeText{weight.shape});
    Check(Product(g.height, g.width, "input 'input' plane size") < (int64_t{1} << 31), "input 'input' ",
          ShapeText{input.shape}, " has planes of ", g.height, " x ", g.width,
          " elements, more than this op supports (2^31)");
    // Attributes are below 2^31 and dims below 2^31 (planes are), so these cannot overflow
    // except through the kernel extent, which Product checks.
    const int64_t extent_h = Product(dilation_[0], g.kernel_h - 1, "the dilated kernel height") + 1;
    const int64_t extent_w = Product(dilation_[1], g.kernel_w - 1, "the dilated kernel width") + 1;
    const int64_t padded_h = g.height + 2 * padding_[0], padded_w = g.width + 2 * padding_[1];
    Check(extent_h <= padded_h && extent_w <= padded_w, "the dilated kernel (", extent_h, " x ", extent_w,
          ") is larger than the padded input (", padded_h, " x ", padded_w, "); input 'input' is ",
          ShapeText{input.shape}, ", input 'weight' is ", ShapeText{weight.shape});
    g.out_h = (padded_h - extent_h) / stride_[0] + 1;
    g.out_w = (padded_w - extent_w) / stride_[1] + 1;
    const Shape expected{g.batch, Product(2 * deform_groups_, g.kernel_h * g.kernel_w, "offset channels"), g.out_h,
                         g.out_w};
    Check(offset.shape == expected, "input 'offset' must have shape ", ShapeText{expected},
          " ([N, 2 * deform_groups * kh * kw, H_out, W_out]), got ", ShapeText{offset.shape});
    return g;
  }

  const T* MaskInput(const KernelIO& io, const Geometry& g) const {
    if constexpr (kLayout == Layout::kV1) {
      return nullptr;
    } else {
      constexpr size_t kIndex = kLayout == Layout::kOrtops ? 4 : 2;
      const ConstTensor<T> m = io.Input<T>(kIndex);
      if (kLayout == Layout::kOrtops && m.shape == Shape{0}) return nullptr;
      const Shape expected{g.batch, deform_groups_ * g.kernel_h * g.kernel_w, g.out_h, g.out_w};
      Check(m.shape == expected, "input 'mask' must have shape ", ShapeText{expected},
            kLayout == Layout::kOrtops ? " ([N, deform_groups * kh * kw, H_out, W_out]) or [0], got "
                                       : " ([N, deform_groups * kh * kw, H_out, W_out]), got ",
            ShapeText{m.shape});
      return m.data;
    }
  }

  const T* BiasInput(const KernelIO& io, const Geometry& g) const {
    if constexpr (kLayout == Layout::kV1) {
      return nullptr;
    } else {
      constexpr size_t kIndex = kLayout == Layout::kOrtops ? 3 : 4;
      if (kLayout == Layout::kModulated && !io.Has(kIndex)) return nullptr;
      const ConstTensor<T> b = io.Input<T>(kIndex);
      if (kLayout == Layout::kOrtops && b.shape == Shape{0}) return nullptr;
      Check(b.shape == Shape{g.out_channels}, "input 'bias' must have shape [", g.out_channels,
            kLayout == Layout::kOrtops ? "] (C_out) or [0], got " : "] (C_out), got ", ShapeText{b.shape});
      return b.data;
    }
  }

  // The samples of line = d * taps + k (deform group d, kernel tap k) at positions
  // [begin, end) of the image.
  void Locate(const Geometry& g, int64_t line, int64_t begin, int64_t end, const T* offset, const T* mask,
              Sample<T>* out) const {
    const int64_t taps = g.kernel_h * g.kernel_w, positions = g.out_h * g.out_w;
    const int64_t d = line / taps, k = line % taps, i = k / g.kernel_w, j = k % g.kernel_w;
    const T* dy = offset + (d * 2 * taps + 2 * k) * positions;
    const T* dx = dy + positions;
    const T* m = mask ? mask + line * positions : nullptr;
    for (int64_t p = begin; p < end; ++p) {
      const int64_t oy = p / g.out_w, ox = p % g.out_w;
      // As torchvision: the integer base position, converted, plus the offset.
      const T y = static_cast<T>(oy * stride_[0] - padding_[0] + i * dilation_[0]) + dy[p];
      const T x = static_cast<T>(ox * stride_[1] - padding_[1] + j * dilation_[1]) + dx[p];
      out[p - begin] = Bilinear(y, x, g.height, g.width, m ? m[p] : T(1));
    }
  }

  // torchvision's deform-conv rule: outside (-1, H) x (-1, W) reads 0; each neighbour
  // outside the map reads 0. A NaN coordinate reads 0 too (the negated test below).
  static Sample<T> Bilinear(T y, T x, int64_t height, int64_t width, T mask) {
    Sample<T> s{{-1, -1, -1, -1}, {0, 0, 0, 0}, mask, false};
    if (!(y > T(-1) && y < static_cast<T>(height) && x > T(-1) && x < static_cast<T>(width))) return s;
    const T y0 = std::floor(y), x0 = std::floor(x);
    const auto yl = static_cast<int64_t>(y0), xl = static_cast<int64_t>(x0);
    const T ly = y - y0, lx = x - x0, hy = 1 - ly, hx = 1 - lx;
    const int64_t ys[2] = {yl, yl + 1}, xs[2] = {xl, xl + 1};
    const T wy[2] = {hy, ly}, wx[2] = {hx, lx};
    for (int a = 0; a < 2; ++a) {
      for (int b = 0; b < 2; ++b) {
        const int v = 2 * a + b;
        if (ys[a] >= 0 && ys[a] < height && xs[b] >= 0 && xs[b] < width) {
          s.offset[v] = static_cast<int32_t>(ys[a] * width + xs[b]);
          s.weight[v] = wy[a] * wx[b];
        }
      }
    }
    s.interior = s.offset[0] >= 0 && s.offset[1] >= 0 && s.offset[2] >= 0 && s.offset[3] >= 0;
    return s;
  }

  static T Read(const Sample<T>& s, const T* plane) {
    if (s.interior) {
      return s.mask * (s.weight[0] * plane[s.offset[0]] + s.weight[1] * plane[s.offset[1]] +
                       s.weight[2] * plane[s.offset[2]] + s.weight[3] * plane[s.offset[3]]);
    }
    T value[4];
    for (int v = 0; v < 4; ++v) value[v] = s.offset[v] >= 0 ? plane[s.offset[v]] : T(0);
    return s.mask * (s.weight[0] * value[0] + s.weight[1] * value[1] + s.weight[2] * value[2] + s.weight[3] * value[3]);
  }

  std::array<int64_t, 2> stride_, padding_, dilation_;
  int64_t groups_, deform_groups_;
  std::unique_ptr<OrtMatMul> matmul_;
};

template <typename T>
using ModulatedKernel = DeformConvKernel<T, Layout::kModulated>;
template <typename T>
using V1Kernel = DeformConvKernel<T, Layout::kV1>;
template <typename T>
using OrtopsKernel = DeformConvKernel<T, Layout::kOrtops>;

}  // namespace

// The compat ops are float32 only, as the originals: their optional bias input would not
// type-check in ONNX Runtime 1.17 on an op registered for several element types.
std::vector<OpPtr> MakeModulated(const OpDef& def) { return MakeOps<ModulatedKernel, float>(def); }
std::vector<OpPtr> MakeV1(const OpDef& def) { return MakeOps<V1Kernel, float>(def); }
std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<OrtopsKernel, float, double>(def); }

}  // namespace ortops::deform_conv
