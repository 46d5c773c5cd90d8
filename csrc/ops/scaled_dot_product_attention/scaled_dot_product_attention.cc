// mmdeploy's ScaledDotProductAttentionTRT: softmax(q k^T / sqrt(E) + mask) v, returning the
// attention weights too. Both products run on ONNX Runtime's own Gemm.
#include "ops/scaled_dot_product_attention/scaled_dot_product_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>

#include "core/ort_gemm.h"
#include "ops/scaled_dot_product_attention/attention_inputs.h"
#include "ops/scaled_dot_product_attention/softmax.h"

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
        "Both matrix products run on ONNX Runtime's own Gemm on CPUs, on cuBLAS on CUDA.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = {},
    .differences =
        "The same computation as the plugin (scores scaled by 1 / sqrt(E) in float32, the mask added, "
        "cuDNN's accurate softmax), with ONNX Runtime's Gemm in place of cuBLAS on CPUs. The plugin sizes `output` "
        "as `query` and so needs Ev = E; ortops takes any Ev. The plugin took masks of rank 2 or 3 only (a "
        "rank-0 or rank-1 one was ignored or misread); ortops broadcasts any mask of rank 0 to 3 and reports "
        "one that does not broadcast. For E = 0 the plugin's scale 1 / sqrt(0) made NaN scores; ortops gives "
        "0, as the exported module does. Like the plugin, float32 only (the optional mask rules out several "
        "element types under ONNX Runtime 1.17).",
};

namespace {

class AttentionKernel : public OpKernel<float, kSchema> {
 public:
  AttentionKernel(const Attributes& attrs, const OpDef& def)
      : OpKernel(attrs, def),
        scores_gemm_(std::make_unique<OrtGemm>(attrs.info(), ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT)),
        values_gemm_(std::make_unique<OrtGemm>(attrs.info(), ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, false)) {}

  void Compute(const KernelIO& io) const {
    const Inputs in = CheckedInputs(io);
    const ConstTensor<float>& query = in.query;
    const ConstTensor<float>& key = in.key;
    const ConstTensor<float>& value = in.value;
    const Mask& mask = in.mask;
    const int64_t batch = in.batch, targets = in.targets, embed = in.embed, sources = in.sources;
    const int64_t value_embed = in.value_embed;

    float* output = io.Output<float>(0, {batch, targets, value_embed});
    float* attn = io.Output<float>(1, {batch, targets, sources});
    if (batch * targets == 0) return;
    if (sources == 0) {  // nothing to attend to: the output is an empty sum
      std::fill_n(output, batch * targets * value_embed, 0.0f);
      return;
    }

    // As the plugin: 1 / sqrt(E) in float32, multiplying the products (1 when E = 0: the products are 0).
    const float scale = embed == 0 ? 1.0f : 1.0f / std::sqrt(static_cast<float>(embed));
    const int64_t per_item = targets * sources;
    const auto scores = [&](int64_t b) {
      if (embed == 0) {
        std::fill_n(attn + b * per_item, per_item, 0.0f);
      } else {
        scores_gemm_->Run(io.context(), query.data + b * targets * embed, key.data + b * sources * embed,
                          attn + b * per_item, targets, embed, sources);
      }
    };
    const auto softmax = [&](int64_t b, int64_t t) {
      const float* mask_row = mask.data ? mask.data + b * mask.stride[0] + t * mask.stride[1] : nullptr;
      ORTOPS_ISA_CALL(SoftmaxRow, attn + b * per_item + t * sources, sources, scale, mask_row, mask.stride[2]);
    };
    const auto values = [&](int64_t b) {
      if (value_embed == 0) return;
      values_gemm_->Run(io.context(), attn + b * per_item, value.data + b * sources * value_embed,
                        output + b * targets * value_embed, targets, sources, value_embed);
    };
    // Weights of about kSlabBytes at most per step, so that the softmax and the second product
    // read them from cache.
    constexpr int64_t kSlabBytes = int64_t{1} << 20;
    const int64_t slab = std::clamp<int64_t>(kSlabBytes / static_cast<int64_t>(sizeof(float)) / per_item, 1, batch);
    // Many small items (heads x images): one task per item, its three steps back to back on
    // one core, rather than three parallel steps per slab with the products' threading
    // inside items of 197 rows (ViT's attention: 1.6x the time at two threads).
    if (slab > 1 && batch >= 4 * KernelIO::HardwareThreads()) {
      io.ParallelFor(static_cast<size_t>(batch), [&](size_t item) {
        const auto b = static_cast<int64_t>(item);
        scores(b);
        for (int64_t t = 0; t < targets; ++t) softmax(b, t);
        values(b);
      });
      return;
    }
    // Otherwise slabs of items, per slab: the products of each item (threaded inside ONNX
    // Runtime's Gemm), and the softmax of all the slab's rows in parallel between them.
    constexpr int64_t kValuesPerTask = int64_t{1} << 14;
    for (int64_t first = 0; first < batch; first += slab) {
      const int64_t last = std::min(batch, first + slab);
      for (int64_t b = first; b < last; ++b) scores(b);
      const int64_t rows = (last - first) * targets;
      const int64_t tasks = std::clamp<int64_t>(rows * sources / kValuesPerTask, 1, rows);
      io.ParallelForRanges(static_cast<size_t>(rows), static_cast<size_t>(tasks), [&](size_t begin, size_t end) {
        for (auto r = static_cast<int64_t>(begin); r < static_cast<int64_t>(end); ++r) {
          softmax(first + r / targets, r % targets);
        }
      });
      for (int64_t b = first; b < last; ++b) values(b);
    }
  }

 private:
  std::unique_ptr<OrtGemm> scores_gemm_, values_gemm_;
};

template <typename T>
using Kernel = AttentionKernel;

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<Kernel, float>(def); }

}  // namespace ortops::scaled_dot_product_attention
