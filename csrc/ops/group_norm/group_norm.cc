// Group normalization over [N, C, ...] with per-channel scale and bias; with one group per
// channel, also mmdeploy's TRTInstanceNormalization.
#include "ops/group_norm/group_norm.h"

#include "ops/group_norm/normalize.h"

namespace ortops::group_norm {

namespace {

template <typename T, Grouping kGrouping>
struct NormKernel : OpKernel<T, kNormSchema<kGrouping>, ParsedWith<NormAttributes, kGrouping>> {
  using OpKernel<T, kNormSchema<kGrouping>, ParsedWith<NormAttributes, kGrouping>>::OpKernel;

  void Compute(const KernelIO& io, const NormAttributes& attributes) const {
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
