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

struct AttentionKernel : OpKernel<float, kSchema> {
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
