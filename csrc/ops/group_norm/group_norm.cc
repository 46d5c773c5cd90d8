// Group normalization over [N, C, ...] with per-channel scale and bias; with one group per
// channel, also mmdeploy's TRTInstanceNormalization.
#include "ops/group_norm/group_norm.h"

#include "ops/group_norm/normalize.h"

namespace ortops::group_norm {
namespace {

constexpr IoSpec kInputs[] = {
    {"X", ElemType::kTypeParam, "`[N, C, D1, ..., Dk]` input, rank 2 or more"},
    // Required, unlike in torch: ONNX Runtime 1.17 fails type inference on a node that leaves
    // out an optional input of an op with several element types.
    {"scale", ElemType::kTypeParam, "`[C]` per-channel scale (gamma)"},
    {"bias", ElemType::kTypeParam, "`[C]` per-channel bias (beta)"},
};
constexpr IoSpec kOutputs[] = {
    {"Y", ElemType::kTypeParam, "same shape as `X`"},
};
constexpr AttrSpec kAttributes[] = {
    {"num_groups", AttrType::kInt, "", "number of groups the C channels are split into; must divide C"},
    {"epsilon", AttrType::kFloat, "1e-05", "added to the variance before the square root"},
};
constexpr AttrSpec kInstanceNormAttributes[] = {
    {"epsilon", AttrType::kFloat, "1e-05", "added to the variance before the square root"},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "Group normalization, equal to `torch.nn.functional.group_norm`: for each sample and "
        "each group of `C / num_groups` consecutive channels, the mean and biased variance over "
        "the group's channels and all spatial positions normalize it, then "
        "`Y = (X - mean) / sqrt(var + epsilon) * scale[c] + bias[c]`. Statistics (two passes) and "
        "the normalization are computed in float64, so inputs with a large mean do not lose "
        "precision (PyTorch's float32 kernel does, by up to about 1e-4 at a mean of 1e4). NaN in `X` "
        "propagates to its group, as in PyTorch.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = kAttributes,
};

constexpr OpSchema kInstanceNormSchema{
    .doc =
        "mmdeploy's instance normalization (`mmdeploy::TRTInstanceNormalization`), which its TensorRT "
        "symbolic for `group_norm` writes on the input reshaped to `[N, num_groups, -1]`, with a scale of "
        "ones and a bias of zeros (the affine transform follows as ordinary Mul and Add nodes). Group "
        "normalization with one group per channel, the same kernel as `GroupNorm`: for each sample and "
        "channel, the mean and biased variance over the spatial positions normalize it, then "
        "`Y = (X - mean) / sqrt(var + epsilon) * scale[c] + bias[c]`, computed in float64; equal to ONNX's "
        "`InstanceNormalization` and `torch.nn.functional.instance_norm`. NaN in `X` propagates to its "
        "channel.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = kInstanceNormAttributes,
    .differences =
        "The plugin runs cuDNN's training-mode batch normalization over `[1, N * C, H, W]` in float32 (the "
        "same biased variance, rounded differently: ortops computes in float64). It reads only dims 2 and 3, "
        "so inputs of rank above 4 were wrong there (mmdeploy writes rank 3); ortops takes any rank from 2 "
        "on. The plugin took float32 scale and bias with float32 or float16 input; ortops takes float32, "
        "float64 or float16, the scale and bias of the input's type, as the exported file holds them.",
};

namespace {

template <typename T, Grouping kGrouping>
class NormKernel : public OpKernel<T, kNormSchema<kGrouping>, ParsedWith<NormAttributes, kGrouping>> {
 public:
  using OpKernel<T, kNormSchema<kGrouping>, ParsedWith<NormAttributes, kGrouping>>::OpKernel;

  void Compute(const KernelIO& io) const {
    const NormAttributes& attributes = this->attributes();
    const NormInputs<T> in = ReadNormInputs<T>(io, kGrouping, attributes);
    T* y = io.Output<T>(0, in.x.shape);
    if (in.x.size() == 0) return;  // also C = 0, where instance norm has no groups
    const int64_t channels = in.channels, num_groups = in.groups, group_channels = in.group_channels;
    io.ParallelFor(static_cast<size_t>(in.batch * num_groups), [&](size_t task) {
      const int64_t n = static_cast<int64_t>(task) / num_groups, g = static_cast<int64_t>(task) % num_groups;
      const int64_t first_channel = g * group_channels, first = (n * channels + first_channel) * in.spatial;
      ORTOPS_ISA_CALL(NormalizeGroup,
                      Group<T>{in.x.data + first, y + first, in.scale + first_channel, in.bias + first_channel,
                               group_channels, in.spatial, static_cast<double>(attributes.epsilon)});
    });
  }
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) {
  return MakeOps<NormKernel, Grouping::kAttribute, float, double, Half>(def);
}
std::vector<OpPtr> MakeInstanceNorm(const OpDef& def) {
  return MakeOps<NormKernel, Grouping::kInstance, float, double, Half>(def);
}

}  // namespace ortops::group_norm
