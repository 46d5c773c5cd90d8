// mmdeploy's ScaledDotProductAttentionTRT: softmax(q k^T / sqrt(E) + mask) v, returning the
// attention weights too. Both products run on ONNX Runtime's own Gemm.
#include "ops/scaled_dot_product_attention/scaled_dot_product_attention.h"

#include <algorithm>
#include <array>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <memory>

#include "core/ort_gemm.h"
#include "math/exp.h"

namespace ortops::scaled_dot_product_attention {
namespace {

constexpr IoSpec kInputs[] = {
    {"query", ElemType::kTypeParam, "`[B, Nt, E]` queries (B is batch x heads)"},
    {"key", ElemType::kTypeParam, "`[B, Ns, E]` keys"},
    {"value", ElemType::kTypeParam, "`[B, Ns, Ev]` values"},
    {"attn_mask", ElemType::kTypeParam,
     "`[Nt, Ns]` (optional) added to the scaled scores before the softmax; any shape that broadcasts to "
     "`[B, Nt, Ns]` (rank 0 to 3, each dim 1 or equal), such as `[B, Nt, Ns]` or `[1, Nt, Ns]`",
     true},
};
constexpr IoSpec kOutputs[] = {
    {"output", ElemType::kTypeParam, "`[B, Nt, Ev]` the attention-weighted values"},
    {"attn", ElemType::kTypeParam, "`[B, Nt, Ns]` the attention weights (each row sums to 1)"},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "mmdeploy's scaled dot-product attention (`mmdeploy::ScaledDotProductAttentionTRT`, written by its "
        "TensorRT rewrite of `torch.nn.functional._scaled_dot_product_attention`, which "
        "`multi_head_attention_forward` calls in PyTorch 1.x), float32: `attn = softmax(query @ key^T / "
        "sqrt(E) + attn_mask)` along the last axis and `output = attn @ value`, for each of the B "
        "batch x head slices. The mask is additive (a float tensor: -inf where attention is forbidden). "
        "The softmax subtracts the row's maximum first; a row that is all -inf, or that holds NaN or +inf, "
        "gives NaN, as in PyTorch. Ns = 0 gives empty weights and a zero output; E = 0 gives scores of 0. "
        "Both matrix products run on ONNX Runtime's own Gemm.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = {},
    .differences =
        "The same computation as the plugin (scores scaled by 1 / sqrt(E) in float32, the mask added, "
        "cuDNN's accurate softmax), with ONNX Runtime's Gemm in place of cuBLAS. The plugin sizes `output` "
        "as `query` and so needs Ev = E; ortops takes any Ev. The plugin took masks of rank 2 or 3 only (a "
        "rank-0 or rank-1 one was ignored or misread); ortops broadcasts any mask of rank 0 to 3 and reports "
        "one that does not broadcast. For E = 0 the plugin's scale 1 / sqrt(0) made NaN scores; ortops gives "
        "0, as the exported module does. Like the plugin, float32 only (the optional mask rules out several "
        "element types under ONNX Runtime 1.17).",
};

namespace {

class AttentionKernel : public KernelBase {
 public:
  using Element = float;
  static constexpr const OpSchema& kSchema = scaled_dot_product_attention::kSchema;

  AttentionKernel(const Attributes& attrs, const OpDef& def)
      : KernelBase(def),
        scores_gemm_(std::make_unique<OrtGemm>(attrs.info(), ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT)),
        values_gemm_(std::make_unique<OrtGemm>(attrs.info(), ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, false)) {}

  void Compute(const KernelIO& io) const {
    const ConstTensor<float> query = io.Input<float>(0, 3);
    const ConstTensor<float> key = io.Input<float>(1, 3);
    const ConstTensor<float> value = io.Input<float>(2, 3);
    const int64_t batch = query.dim(0), targets = query.dim(1), embed = query.dim(2);
    Check(key.dim(0) == batch && key.dim(2) == embed, "input 'key' ", ShapeText{key.shape},
          " must be [B, Ns, E] with B and E of input 'query' ", ShapeText{query.shape});
    const int64_t sources = key.dim(1), value_embed = value.dim(2);
    Check(value.dim(0) == batch && value.dim(1) == sources, "input 'value' ", ShapeText{value.shape},
          " must be [B, Ns, Ev] with B of input 'query' ", ShapeText{query.shape}, " and Ns of input 'key' ",
          ShapeText{key.shape});
    const Mask mask = MaskInput(io, batch, targets, sources);

    float* output = io.Output<float>(0, {batch, targets, value_embed});
    float* attn = io.Output<float>(1, {batch, targets, sources});
    if (batch * targets == 0) return;
    if (sources == 0) {  // nothing to attend to: the output is an empty sum
      std::fill_n(output, batch * targets * value_embed, 0.0f);
      return;
    }

    // As the plugin: 1 / sqrt(E) in float32, multiplying the products (1 when E = 0: the products are 0).
    const float scale = embed == 0 ? 1.0f : 1.0f / std::sqrt(static_cast<float>(embed));
    // Slabs of batch items whose weights fit in about kSlabBytes, so that the softmax and the
    // second product read them from cache: per slab, attn[b] = query[b] key[b]^T written in
    // place, turned into weights row by row (in parallel), then output[b] = attn[b] value[b].
    constexpr int64_t kSlabBytes = int64_t{1} << 20;
    constexpr int64_t kValuesPerTask = int64_t{1} << 14;
    const int64_t per_item = targets * sources;
    const int64_t slab = std::clamp<int64_t>(kSlabBytes / static_cast<int64_t>(sizeof(float)) / per_item, 1, batch);
    for (int64_t first = 0; first < batch; first += slab) {
      const int64_t last = std::min(batch, first + slab);
      float* weights = attn + first * per_item;
      if (embed == 0) {
        std::fill_n(weights, (last - first) * per_item, 0.0f);
      } else {
        for (int64_t b = first; b < last; ++b) {
          scores_gemm_->Run(io.context(), query.data + b * targets * embed, key.data + b * sources * embed,
                            attn + b * per_item, targets, embed, sources);
        }
      }
      const int64_t rows = (last - first) * targets;
      const int64_t tasks = std::clamp<int64_t>(rows * sources / kValuesPerTask, 1, rows);
      io.ParallelForRanges(static_cast<size_t>(rows), static_cast<size_t>(tasks), [&](size_t begin, size_t end) {
        for (auto r = static_cast<int64_t>(begin); r < static_cast<int64_t>(end); ++r) {
          const int64_t b = first + r / targets, t = r % targets;
          const float* mask_row = mask.data ? mask.data + b * mask.stride[0] + t * mask.stride[1] : nullptr;
          Softmax(weights + r * sources, sources, scale, mask_row, mask.stride[2]);
        }
      });
      if (value_embed == 0) continue;
      for (int64_t b = first; b < last; ++b) {
        values_gemm_->Run(io.context(), attn + b * per_item, value.data + b * sources * value_embed,
                          output + b * targets * value_embed, targets, sources, value_embed);
      }
    }
  }

 private:
  // The mask's data and its strides along (B, Nt, Ns): 0 along a broadcast dim.
  struct Mask {
    const float* data = nullptr;
    std::array<int64_t, 3> stride = {0, 0, 0};
  };

  static Mask MaskInput(const KernelIO& io, int64_t batch, int64_t targets, int64_t sources) {
    Mask mask;
    if (!io.Has(3)) return mask;
    const ConstTensor<float> m = io.Input<float>(3);
    const std::array<int64_t, 3> full = {batch, targets, sources};
    Check(m.rank() <= 3, "input 'attn_mask' must have rank 3 or less (broadcast to [B, Nt, Ns] = ",
          ShapeText{Shape(full.begin(), full.end())}, "), got shape ", ShapeText{m.shape});
    const size_t lead = 3 - m.rank();
    int64_t stride = 1;
    for (size_t axis = 3; axis-- > 0;) {
      const int64_t dim = axis < lead ? 1 : m.dim(axis - lead);
      Check(dim == full[axis] || dim == 1, "input 'attn_mask' ", ShapeText{m.shape},
            " does not broadcast to [B, Nt, Ns] = ", ShapeText{Shape(full.begin(), full.end())});
      mask.stride[axis] = dim == 1 ? 0 : stride;
      stride *= dim;
    }
    mask.data = m.data;
    return mask;
  }

  // In place: scores * scale (+ mask), then the softmax with the row's maximum subtracted.
  // Each pass is a loop of its own without float comparisons, so that it vectorises.
  static void Softmax(float* row, int64_t count, float scale, const float* mask, int64_t mask_stride) {
    if (mask == nullptr) {
      for (int64_t j = 0; j < count; ++j) row[j] *= scale;
    } else if (mask_stride == 1) {
      for (int64_t j = 0; j < count; ++j) row[j] = row[j] * scale + mask[j];
    } else {  // one mask value for the whole row
      for (int64_t j = 0; j < count; ++j) row[j] = row[j] * scale + mask[0];
    }
    // The maximum over keys that order floats as integers, and whether there is a NaN.
    int32_t max_key = INT32_MIN;
    uint32_t nan = 0;
    for (int64_t j = 0; j < count; ++j) {
      const uint32_t bits = std::bit_cast<uint32_t>(row[j]);
      max_key = std::max(max_key, OrderedKey(bits));
      nan |= static_cast<uint32_t>((bits & 0x7fffffffu) > 0x7f800000u);
    }
    const float max = std::bit_cast<float>(static_cast<uint32_t>(OrderedKey(static_cast<uint32_t>(max_key))));
    if (nan || std::isinf(max)) {  // a NaN, +inf, or all -inf: PyTorch and cuDNN give NaN throughout
      std::fill_n(row, count, NAN);
      return;
    }
    for (int64_t j = 0; j < count; ++j) row[j] = ExpNonPositive(row[j] - max);
    // Eight running sums, so that the additions do not wait on each other, added at the end.
    float sums[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t j = 0;
    for (; j + 8 <= count; j += 8) {
      for (int lane = 0; lane < 8; ++lane) sums[lane] += row[j + lane];
    }
    for (; j < count; ++j) sums[0] += row[j];
    const float sum = ((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7]));
    for (j = 0; j < count; ++j) row[j] /= sum;
  }

  // Float bits as an int32 that orders as the floats do (NaN aside); its own inverse.
  static int32_t OrderedKey(uint32_t bits) {
    const auto key = static_cast<int32_t>(bits);
    return key ^ ((key >> 31) & 0x7fffffff);
  }

  std::unique_ptr<OrtGemm> scores_gemm_, values_gemm_;
};

template <typename T>
using Kernel = AttentionKernel;

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<Kernel, float>(def); }

}  // namespace ortops::scaled_dot_product_attention
