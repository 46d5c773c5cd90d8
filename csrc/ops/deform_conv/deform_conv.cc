// Deformable convolution v1 and v2 (modulated), equal to torchvision.ops.deform_conv2d:
// deformed im2col written one row per output position from a channels-last copy of the
// image, then a GEMM. In float (and float16) at AVX-512, each block of positions is sampled
// and multiplied by the same task while its columns are in cache, against weights packed
// once (core/packed_gemm.h); otherwise the columns of many positions go through ONNX
// Runtime's own Gemm.
#include "ops/deform_conv/deform_conv.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "core/channels_last.h"
#include "core/half_convert.h"
#include "core/ort_gemm.h"
#include "core/packed_gemm.h"
#include "ops/deform_conv/columns.h"
#include "ops/deform_conv/conv_inputs.h"

namespace ortops::deform_conv {

// Where mmcv's and mmdeploy's modulated deformable convolutions differ from ortops'.

namespace {

// a * b, or an error naming `what` when it does not fit in int64 (attribute values and
// tensor dims are untrusted).
int64_t Product(int64_t a, int64_t b, const char* what) {
  int64_t result = 0;
  Check(!__builtin_mul_overflow(a, b, &result), what, " overflows: ", a, " x ", b);
  return result;
}

std::array<int64_t, 2> Pair(const Attributes& attrs, const char* name) {
  const std::vector<int64_t> v = attrs.Ints(name);
  Check(v.size() == 2, "attribute '", name, "' must have 2 values, got ", v.size());
  return {v[0], v[1]};
}

// mmdeploy writes (pad_h, pad_w) as [pad_h, pad_h, pad_w, pad_w].
std::array<int64_t, 2> MmdeployPadding(const Attributes& attrs) {
  const std::vector<int64_t> v = attrs.Ints("padding");
  Check(v.size() == 4 && v[0] == v[1] && v[2] == v[3],
        "attribute 'padding' must be [pad_h, pad_h, pad_w, pad_w] as mmdeploy writes it, got ", v.size(), " values",
        v.size() == 4 ? " with unequal pairs" : "");
  return {v[0], v[2]};
}

}  // namespace

ConvAttributes::ConvAttributes(const Attributes& attrs, Layout layout)
    : stride(Pair(attrs, "stride")),
      padding(layout == Layout::kMmdeployV1 ? MmdeployPadding(attrs) : Pair(attrs, "padding")),
      dilation(Pair(attrs, "dilation")),
      groups(attrs.Int("groups")),
      deform_groups(attrs.Int("deform_groups")) {
  // The bound keeps every later product of an attribute and a tensor dim inside int64.
  constexpr int64_t kLimit = int64_t{1} << 31;
  Check(stride[0] >= 1 && stride[1] >= 1 && stride[0] < kLimit && stride[1] < kLimit,
        "attribute 'stride' must be positive (and below 2^31), got ", stride[0], ",", stride[1]);
  Check(dilation[0] >= 1 && dilation[1] >= 1 && dilation[0] < kLimit && dilation[1] < kLimit,
        "attribute 'dilation' must be positive (and below 2^31), got ", dilation[0], ",", dilation[1]);
  Check(padding[0] >= 0 && padding[1] >= 0 && padding[0] < kLimit && padding[1] < kLimit,
        "attribute 'padding' must be non-negative (and below 2^31), got ", padding[0], ",", padding[1]);
  Check(groups >= 1 && deform_groups >= 1, "attributes 'groups' and 'deform_groups' must be at least 1, got ", groups,
        " and ", deform_groups);
}

Geometry CheckShapes(const ConvAttributes& conv, const Shape& input, const Shape& offset, const Shape& weight) {
  Geometry g{input[0], input[1], input[2], input[3], weight[0], weight[2], weight[3], 0, 0};
  Check(g.channels % conv.groups == 0, "input 'input' ", ShapeText{input}, " has C = ", g.channels,
        ", not divisible by groups = ", conv.groups);
  Check(g.out_channels % conv.groups == 0, "input 'weight' ", ShapeText{weight}, " has C_out = ", g.out_channels,
        ", not divisible by groups = ", conv.groups);
  Check(g.channels % conv.deform_groups == 0, "input 'input' ", ShapeText{input}, " has C = ", g.channels,
        ", not divisible by deform_groups = ", conv.deform_groups);
  Check(weight[1] == g.channels / conv.groups,
        "input 'weight' must have shape [C_out, C / groups = ", g.channels / conv.groups, ", kh, kw], got ",
        ShapeText{weight});
  Check(g.kernel_h >= 1 && g.kernel_w >= 1, "input 'weight' has an empty kernel: ", ShapeText{weight});
  Check(Product(g.height, g.width, "input 'input' plane size") < (int64_t{1} << 31) - 1, "input 'input' ",
        ShapeText{input}, " has planes of ", g.height, " x ", g.width,
        " elements, more than this op supports (2^31 - 2)");
  // Attributes are below 2^31 and dims below 2^31 (planes are), so these cannot overflow
  // except through the kernel extent, which Product checks.
  const int64_t extent_h = Product(conv.dilation[0], g.kernel_h - 1, "the dilated kernel height") + 1;
  const int64_t extent_w = Product(conv.dilation[1], g.kernel_w - 1, "the dilated kernel width") + 1;
  const int64_t padded_h = g.height + 2 * conv.padding[0], padded_w = g.width + 2 * conv.padding[1];
  Check(extent_h <= padded_h && extent_w <= padded_w, "the dilated kernel (", extent_h, " x ", extent_w,
        ") is larger than the padded input (", padded_h, " x ", padded_w, "); input 'input' is ", ShapeText{input},
        ", input 'weight' is ", ShapeText{weight});
  g.out_h = (padded_h - extent_h) / conv.stride[0] + 1;
  g.out_w = (padded_w - extent_w) / conv.stride[1] + 1;
  const Shape expected{g.batch, Product(2 * conv.deform_groups, g.kernel_h * g.kernel_w, "offset channels"), g.out_h,
                       g.out_w};
  Check(offset == expected, "input 'offset' must have shape ", ShapeText{expected},
        " ([N, 2 * deform_groups * kh * kw, H_out, W_out]), got ", ShapeText{offset});
  return g;
}

namespace {

// Scratch per chunk of output positions stays below this size, so that memory stays bounded
// for any image size. Larger than the caches on purpose: the GEMM packs its operands itself,
// and each call repacks the weights, so few wide calls beat many cache-sized ones (at the
// benchmark's shape, 4096 positions in two calls ran 15% faster than in six).
constexpr int64_t kChunkBytes = int64_t{32} << 20;
constexpr int64_t kMinChunk = 64;  // positions; keeps the GEMM's N dimension useful
constexpr int64_t kSlice = 128;    // positions per fill task

// Positions per task of the packed GEMM: its columns (at most 1 MiB and 10 tiles) stay in
// the core's L2 cache from their sampling to their product, next to one panel of weights.
// Whole tiles.
int64_t PackedBlock(int64_t depth) {
  constexpr int64_t kBytes = int64_t{1} << 20;
  const int64_t tile = GemmTileColumns();
  return std::clamp(kBytes / (depth * int64_t{sizeof(float)}) / tile * tile, tile, 10 * tile);
}

// Column blocks for the tasks of the packed GEMM: a slot per task that can run at once (one
// per hardware thread, at most 64), each reused by the tasks that follow on it, so that its
// memory is still in cache (fresh memory per task cost 7% at the benchmark's shape, in
// write-backs of columns already used). A task that finds every slot taken, where a session
// has more threads than the CPU, gets a block of its own.
class BlockSlots {
 public:
  BlockSlots(const KernelIO& io, int64_t tasks, size_t block_size)
      : io_(io),
        block_size_(block_size),
        blocks_(io.Allocate<float>(static_cast<size_t>(Count(tasks)) * block_size)),
        free_(Count(tasks) == 64 ? ~uint64_t{0} : (uint64_t{1} << Count(tasks)) - 1) {}

  static int64_t Count(int64_t tasks) { return std::min({tasks, KernelIO::HardwareThreads(), int64_t{64}}); }

  // body(columns) with a free slot's block, or a block of its own.
  template <typename Body>
  void Run(Body&& body) const {
    uint64_t free = free_.load(std::memory_order_relaxed);
    while (free != 0) {
      const int slot = std::countr_zero(free);
      const uint64_t bit = uint64_t{1} << slot;
      if (free_.compare_exchange_weak(free, free & ~bit, std::memory_order_acquire, std::memory_order_relaxed)) {
        body(blocks_.data() + static_cast<size_t>(slot) * block_size_);
        free_.fetch_or(bit, std::memory_order_release);
        return;
      }
    }
    const Scratch<float> own = io_.Allocate<float>(block_size_);
    body(own.data());
  }

 private:
  const KernelIO& io_;
  size_t block_size_;
  Scratch<float> blocks_;
  mutable std::atomic<uint64_t> free_;
};

// Elements of T are read as A = ComputeType<T> (the image, weights and samples are float
// for float16) and the GEMM runs in A; a float16 kernel rounds once, when it stores.
template <typename T, Layout kLayout>
struct DeformConvKernel : OpKernel<T, SchemaOf(kLayout), ParsedWith<ConvAttributes, kLayout>> {
  using A = ComputeType<T>;

  DeformConvKernel(const Attributes& attrs, const OpDef& def)
      : DeformConvKernel::OpKernel(attrs, def),
        gemm_(std::make_unique<OrtGemm>(attrs.info(), OnnxType<A>())),
        in_panels_(std::is_same_v<A, float> && HasPackedGemm()) {
    // Weights stored in the model are reordered for the GEMM once, here.
    if (const std::optional<ConstTensor<T>> weight = attrs.ConstantInput<T>(kWeightIndex);
        weight && weight->rank() == 4 && weight->size() > 0 && weight->dim(0) % this->attributes().groups == 0) {
      packed_weight_shape_ = weight->shape;
      packed_weights_.resize(
          static_cast<size_t>(WeightsSize(weight->dim(0), weight->dim(1) * weight->dim(2) * weight->dim(3))));
      ReorderWeights(weight->data, weight->dim(0), weight->dim(1), weight->dim(2) * weight->dim(3),
                     packed_weights_.data(), [](size_t n, auto&& body) {
                       for (size_t i = 0; i < n; ++i) body(i);
                     });
    }
  }

  void Compute(const KernelIO& io, const ConvAttributes& conv) const {
    const auto [input, offset, weight, g, mask, bias] = ReadConvInputs<kLayout, T>(io, conv);
    const int64_t taps = g.kernel_h * g.kernel_w, positions = g.out_h * g.out_w;
    T* output = io.Output<T>(0, {g.batch, g.out_channels, g.out_h, g.out_w});
    if (g.batch * g.out_channels * positions == 0) return;

    const int64_t group_channels = g.channels / conv.groups, group_out = g.out_channels / conv.groups;
    const int64_t rows = group_channels * taps;  // the GEMM's K
    if (rows == 0) {                             // no input channels: the output is the bias
      for (int64_t i = 0; i < g.batch * g.out_channels; ++i) {
        std::fill_n(output + i * positions, positions, bias ? bias[i % g.out_channels] : T(0));
      }
      return;
    }
    // The image is read channels-last, with one extra pixel of zeros that neighbours
    // outside the map point to: a sample then reads each of its four neighbours as one
    // contiguous run of channels. The column matrix is written one row per position,
    // columns ordered (tap, channel), and the weights reordered to match.
    const int64_t pixels = g.height * g.width;
    const Scratch<A> image_nhwc = io.Allocate<A>(static_cast<size_t>((pixels + 1) * g.channels));
    std::fill_n(image_nhwc.data() + pixels * g.channels, g.channels, A(0));
    const bool packed = weight.shape == packed_weight_shape_;
    const Scratch<A> reordered = io.Allocate<A>(packed ? 0 : static_cast<size_t>(WeightsSize(g.out_channels, rows)));
    if (!packed) {
      ReorderWeights(weight.data, g.out_channels, group_channels, taps, reordered.data(),
                     [&](size_t n, auto&& body) { io.ParallelFor(n, body); });
    }
    const A* weights = packed ? packed_weights_.data() : reordered.data();
    constexpr bool kDirect = std::is_same_v<T, A>;
    // The column fill reads offsets and masks in A: float16 ones are widened first.
    const int64_t offset_size = 2 * conv.deform_groups * taps * positions,
                  mask_size = conv.deform_groups * taps * positions;
    const Scratch<A> widened = io.Allocate<A>(kDirect ? 0 : static_cast<size_t>(offset_size + mask_size));
    ColumnSource<A> source{image_nhwc.data(), nullptr,        nullptr,           g.channels,      g.height,
                           g.width,           g.out_h,        g.out_w,           g.kernel_h,      g.kernel_w,
                           conv.stride[0],    conv.stride[1], conv.padding[0],   conv.padding[1], conv.dilation[0],
                           conv.dilation[1],  conv.groups,    conv.deform_groups};
    // Image n's channels-last copy, offsets and masks, for the column fill.
    const auto prepare_image = [&](int64_t n) {
      ToChannelsLast(io, input.data + n * g.channels * pixels, g.channels, pixels, image_nhwc.data());
      const T* offset_n = offset.data + n * offset_size;
      const T* mask_n = mask ? mask + n * mask_size : nullptr;
      if constexpr (kDirect) {
        source.offset = offset_n;
        source.mask = mask_n;
      } else {
        static_assert(std::is_same_v<T, Half>, "only float16 is read in another type");
        WidenHalves(offset_n, offset_size, widened.data());
        if (mask_n) WidenHalves(mask_n, mask_size, widened.data() + offset_size);
        source.offset = widened.data();
        source.mask = mask_n ? widened.data() + offset_size : nullptr;
      }
    };

    if constexpr (std::is_same_v<A, float>) {
      if (in_panels_) {
        // A task per block of positions: it fills the block's columns and multiplies them.
        const int64_t block = PackedBlock(rows), blocks = (positions + block - 1) / block;
        const BlockSlots slots(io, blocks, static_cast<size_t>(block * rows));
        for (int64_t n = 0; n < g.batch; ++n) {
          prepare_image(n);
          for (int64_t group = 0; group < conv.groups; ++group) {
            const float* panels = weights + group * PackedGemmSize(group_out, rows);
            T* out = output + (n * g.out_channels + group * group_out) * positions;
            io.ParallelFor(static_cast<size_t>(blocks), [&](size_t task) {
              const int64_t begin = static_cast<int64_t>(task) * block, end = std::min(positions, begin + block);
              slots.Run([&](float* columns) {
                ORTOPS_ISA_CALL(FillColumns, source, group, begin, end, columns);
                PackedGemm(PackedProduct<T>{panels, columns, group_out, rows, end - begin,
                                            bias ? bias + group * group_out : nullptr, out + begin, positions});
              });
            });
          }
        }
        return;
      }
    }

    // Otherwise positions are processed in chunks, each filled in slices of kSlice positions,
    // a task each, then multiplied by ONNX Runtime's Gemm. Scratch comes from the session's
    // allocator, whose arena hands the same memory back run after run, once per Compute.
    const int64_t per_position = (rows + group_out) * static_cast<int64_t>(sizeof(A));
    const int64_t widest = std::max(kMinChunk, kChunkBytes / per_position / kSlice * kSlice);
    const int64_t chunk_count = (positions + widest - 1) / widest;  // then equal chunks
    const int64_t chunk =
        std::min(positions, ((positions + chunk_count - 1) / chunk_count + kSlice - 1) / kSlice * kSlice);
    const Scratch<A> columns = io.Allocate<A>(static_cast<size_t>(rows * chunk));
    // When one chunk covers the image the GEMM writes straight into the output (unless the
    // output holds float16, which is rounded from the product).
    const Scratch<A> product =
        io.Allocate<A>(chunk < positions || !kDirect ? static_cast<size_t>(group_out * chunk) : 0);
    for (int64_t n = 0; n < g.batch; ++n) {
      prepare_image(n);
      for (int64_t start = 0; start < positions; start += chunk) {
        const int64_t width = std::min(chunk, positions - start);
        const int64_t slices = (width + kSlice - 1) / kSlice;
        for (int64_t group = 0; group < conv.groups; ++group) {
          io.ParallelFor(static_cast<size_t>(slices), [&](size_t slice) {
            const int64_t begin = static_cast<int64_t>(slice) * kSlice;
            ORTOPS_ISA_CALL(FillColumns, source, group, start + begin, start + std::min(width, begin + kSlice),
                            columns.data() + begin * rows);
          });
          T* out = output + (n * g.out_channels + group * group_out) * positions + start;
          A* target = product.data();
          if constexpr (kDirect) target = width == positions ? out : product.data();
          gemm_->Run(io.context(), weights + group * group_out * rows, columns.data(), target, group_out, rows, width);
          io.ParallelFor(static_cast<size_t>(group_out), [&](size_t channel) {
            const auto o = static_cast<int64_t>(channel);
            const A b = bias ? static_cast<A>(bias[group * group_out + o]) : A(0);
            const A* src = target + o * width;
            T* dst = out + o * positions;
            for (int64_t p = 0; p < width; ++p) dst[p] = static_cast<T>(src[p] + b);
          });
        }
      }
    }
  }

 private:
  static constexpr size_t kWeightIndex = WeightIndex(kLayout);

  // Elements of the reordered weights: each group's panels for the packed GEMM, which pad
  // the group's C_out / groups rows to whole panels, or the plain matrix.
  int64_t WeightsSize(int64_t out_channels, int64_t depth) const {
    const int64_t groups = this->attributes().groups;
    return in_panels_ ? groups * PackedGemmSize(out_channels / groups, depth) : out_channels * depth;
  }

  // weight [C_out, C / groups, taps] -> [C_out, taps, C / groups] in A, the column matrix's
  // (tap, channel) order, each group's rows packed in panels when in_panels_;
  // parallel_for(n, body) runs body(i) for i < n.
  template <typename ParallelFor>
  void ReorderWeights(const T* weight, int64_t out_channels, int64_t group_channels, int64_t taps, A* out,
                      ParallelFor&& parallel_for) const {
    const int64_t depth = group_channels * taps, group_out = out_channels / this->attributes().groups;
    if (in_panels_) std::fill_n(out, WeightsSize(out_channels, depth), A(0));  // the rows that pad a panel
    parallel_for(static_cast<size_t>(out_channels), [&](size_t channel) {
      const auto o = static_cast<int64_t>(channel);
      for (int64_t c = 0; c < group_channels; ++c) {
        for (int64_t k = 0; k < taps; ++k) {
          const int64_t at = in_panels_ ? (o / group_out) * PackedGemmSize(group_out, depth) +
                                              PackedGemmIndex(o % group_out, k * group_channels + c, depth)
                                        : o * depth + k * group_channels + c;
          out[at] = static_cast<A>(weight[(o * group_channels + c) * taps + k]);
        }
      }
    });
  }

  std::unique_ptr<OrtGemm> gemm_;
  bool in_panels_;             // the GEMM is PackedGemm, and the weights are packed for it
  Shape packed_weight_shape_;  // empty unless the weights are a constant of the model
  std::vector<A> packed_weights_;
};

}  // namespace

// The compat ops are float32 only, as the originals: their optional bias input would not
// type-check in ONNX Runtime 1.17 on an op registered for several element types.
std::vector<OpPtr> MakeModulated(const OpDef& def) { return MakeOps<DeformConvKernel, Layout::kModulated, float>(def); }
std::vector<OpPtr> MakeV1(const OpDef& def) { return MakeOps<DeformConvKernel, Layout::kV1, float>(def); }
std::vector<OpPtr> Make(const OpDef& def) {
  return MakeOps<DeformConvKernel, Layout::kOrtops, float, double, Half>(def);
}
// No optional input, so several element types type-check; the plugin took float16 too.
std::vector<OpPtr> MakeMmdeployV1(const OpDef& def) {
  return MakeOps<DeformConvKernel, Layout::kMmdeployV1, float, double, Half>(def);
}

}  // namespace ortops::deform_conv
