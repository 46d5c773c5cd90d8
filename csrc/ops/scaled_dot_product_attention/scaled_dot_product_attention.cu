// ScaledDotProductAttentionTRT's device path: the two products of every batch x head slice
// at once on the device's matrix product (device/gemm.h: cuBLAS on a GPU), and between them
// the CPU kernel's softmax (softmax_row.h), one thread per row of scores.
#include <cmath>

#include "device/device_kernel.h"
#include "device/gemm.h"
#include "ops/scaled_dot_product_attention/attention_inputs.h"
#include "ops/scaled_dot_product_attention/scaled_dot_product_attention.h"
#include "ops/scaled_dot_product_attention/softmax_row.h"

namespace ortops::scaled_dot_product_attention {
namespace {

// Row r of the [B * Nt, Ns] scores, in place.
struct SoftmaxOfRow {
  float* scores;
  Mask mask;
  int64_t targets, sources;
  float scale;

  ORTOPS_HD void operator()(int64_t r) const {
    const int64_t b = r / targets, t = r % targets;
    const float* mask_row = mask.data ? mask.data + b * mask.stride[0] + t * mask.stride[1] : nullptr;
    ScaledSoftmaxRow(scores + r * sources, sources, scale, mask_row, mask.stride[2]);
  }
};

struct AttentionDeviceKernel : OpKernel<float, kSchema, NoAttributes, device::DeviceKernelBase> {
  using OpKernel::OpKernel;

  void Compute(const device::DeviceIO& io) const {
    const Inputs in = CheckedInputs(io);
    const int64_t batch = in.batch, targets = in.targets, sources = in.sources;
    float* output = io.Output<float>(0, {batch, targets, in.value_embed});
    float* attn = io.Output<float>(1, {batch, targets, sources});
    if (batch * targets == 0) return;
    if (sources == 0) {  // nothing to attend to: the output is an empty sum
      io.Fill(output, 0, static_cast<size_t>(batch * targets * in.value_embed) * sizeof(float));
      return;
    }
    // As the CPU kernel: 1 / sqrt(E) in float32 (1 when E = 0, where the scores are 0).
    const float scale = in.embed == 0 ? 1.0f : 1.0f / std::sqrt(static_cast<float>(in.embed));
    // attn = query key^T (E = 0: zeros), then its softmax row by row.
    device::Gemm(io, device::MatrixProduct<float>{.m = targets,
                                                  .n = sources,
                                                  .k = in.embed,
                                                  .a = in.query.data,
                                                  .lda = in.embed,
                                                  .stride_a = targets * in.embed,
                                                  .b = in.key.data,
                                                  .ldb = in.embed,
                                                  .stride_b = sources * in.embed,
                                                  .b_transposed = true,
                                                  .c = attn,
                                                  .ldc = sources,
                                                  .stride_c = targets * sources,
                                                  .batch = batch});
    io.ForEach(batch * targets, SoftmaxOfRow{attn, in.mask, targets, sources, scale});
    // output = attn value.
    device::Gemm(io, device::MatrixProduct<float>{.m = targets,
                                                  .n = in.value_embed,
                                                  .k = sources,
                                                  .a = attn,
                                                  .lda = sources,
                                                  .stride_a = targets * sources,
                                                  .b = in.value.data,
                                                  .ldb = in.value_embed,
                                                  .stride_b = sources * in.value_embed,
                                                  .c = output,
                                                  .ldc = in.value_embed,
                                                  .stride_c = targets * in.value_embed,
                                                  .batch = batch});
  }
};

// A name unlike the CPU kernel's alias: see deform_conv.cu.
template <typename T>
using DeviceKernel = AttentionDeviceKernel;

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<DeviceKernel, float>(def); }

}  // namespace ortops::scaled_dot_product_attention
