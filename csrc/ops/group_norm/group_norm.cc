// Group normalization over [N, C, ...] with per-channel scale and bias; with one group per
// channel, also mmdeploy's TRTInstanceNormalization; and layer normalization of a sum over the
// last axis (AddLayerNorm), each row a group.
#include "ops/group_norm/group_norm.h"

#include <algorithm>

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

// Rows per task: enough work (about 16k elements) that a task is worth its scheduling.
constexpr int64_t kMaxRowsPerTask = 256;
int64_t RowsPerTask(int64_t channels) {
  return std::clamp<int64_t>((int64_t{1} << 14) / std::max<int64_t>(1, channels), 1, kMaxRowsPerTask);
}

template <typename T>
struct AddNormKernel : OpKernel<T, kAddLayerNormSchema, ParsedWith<NormAttributes, Grouping::kLastAxis>> {
  using OpKernel<T, kAddLayerNormSchema, ParsedWith<NormAttributes, Grouping::kLastAxis>>::OpKernel;

  void Compute(const KernelIO& io, const NormAttributes& attributes) const {
    const AddNormInputs<T> in = ReadAddNormInputs<T>(io);
    T* y = io.Output<T>(0, in.a.shape);
    if (in.rows == 0) return;
    const int64_t per_task = RowsPerTask(in.channels);
    io.ParallelFor(static_cast<size_t>((in.rows + per_task - 1) / per_task), [&](size_t task) {
      const int64_t first = static_cast<int64_t>(task) * per_task, count = std::min(per_task, in.rows - first);
      // Where each row's B starts (a task's rows, on the stack: no heap traffic per task).
      int64_t b_first[kMaxRowsPerTask];
      for (int64_t r = 0; r < count; ++r) b_first[r] = in.broadcast.Offset((first + r) * in.channels);
      ORTOPS_ISA_CALL(NormalizeSumRows, SumRows<T>{in.a.data, in.b, b_first, in.broadcast.Step(), in.scale, in.bias, y,
                                                   first, count, in.channels, static_cast<double>(attributes.epsilon)});
    });
  }
};

}  // namespace

std::vector<OpPtr> MakeAddLayerNorm(const OpDef& def) { return MakeOps<AddNormKernel, float, double, Half>(def); }

std::vector<OpPtr> Make(const OpDef& def) {
  return MakeOps<NormKernel, Grouping::kAttribute, float, double, Half>(def);
}
std::vector<OpPtr> MakeInstanceNorm(const OpDef& def) {
  return MakeOps<NormKernel, Grouping::kInstance, float, double, Half>(def);
}

}  // namespace ortops::group_norm
