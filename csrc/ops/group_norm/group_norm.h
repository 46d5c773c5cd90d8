#pragma once

#include <cmath>

#include "core/op_kernel.h"

namespace ortops::group_norm {
extern const OpSchema kSchema;              // ortops GroupNorm
extern const OpSchema kInstanceNormSchema;  // mmdeploy TRTInstanceNormalization
KernelFactory Make, MakeInstanceNorm, MakeDevice, MakeInstanceNormDevice;

// kInstance: num_groups is C, the input's channel count (TRTInstanceNormalization).
enum class Grouping { kAttribute, kInstance };

// The attributes of a node, read and checked once, as its CPU and device kernels take them.
struct NormAttributes {
  NormAttributes(const Attributes& attrs, Grouping grouping)
      : num_groups(grouping == Grouping::kInstance ? 1 : attrs.Int("num_groups")), epsilon(attrs.Float("epsilon")) {
    Check(num_groups >= 1, "attribute 'num_groups' must be at least 1, got ", num_groups);
    Check(std::isfinite(epsilon) && epsilon >= 0, "attribute 'epsilon' must be finite and >= 0, got ", epsilon);
  }
  int64_t num_groups;  // for kAttribute
  float epsilon;
};

// The schema of the node that kGrouping names.
template <Grouping kGrouping>
constexpr const OpSchema& kNormSchema = kGrouping == Grouping::kInstance ? kInstanceNormSchema : kSchema;

// The checked inputs, as groups: batch * groups runs of group_channels * spatial contiguous
// elements of X, each normalized with its own statistics.
template <typename T>
struct NormInputs {
  ConstTensor<T> x;
  const T* scale;
  const T* bias;
  int64_t batch, channels, groups, group_channels, spatial;
};

template <typename T, typename IO>
const T* PerChannelInput(const IO& io, size_t index, const char* name, int64_t channels) {
  const ConstTensor<T> t = io.template Input<T>(index);
  Check(t.rank() == 1 && t.dim(0) == channels, "input '", name, "' must have shape [C] = [", channels, "], got ",
        ShapeText{t.shape});
  return t.data;
}

template <typename T, typename IO>
NormInputs<T> ReadNormInputs(const IO& io, Grouping grouping, const NormAttributes& attributes) {
  NormInputs<T> in{io.template Input<T>(0), nullptr, nullptr, 0, 0, 0, 0, 1};
  const ConstTensor<T>& x = in.x;
  Check(x.rank() >= 2, "input 'X' must have rank 2 or more ([N, C, ...]), got shape ", ShapeText{x.shape});
  in.batch = x.dim(0);
  in.channels = x.dim(1);
  in.groups = grouping == Grouping::kInstance ? in.channels : attributes.num_groups;
  Check(grouping == Grouping::kInstance || in.channels % in.groups == 0, "input 'X' has C = ", in.channels,
        " channels, not divisible by num_groups = ", in.groups, " (shape ", ShapeText{x.shape}, ")");
  in.scale = PerChannelInput<T>(io, 1, "scale", in.channels);
  in.bias = PerChannelInput<T>(io, 2, "bias", in.channels);
  // Sizes only where X is not empty (C = 0 leaves instance norm without groups).
  if (x.size() != 0) {
    in.group_channels = in.channels / in.groups;
    for (size_t axis = 2; axis < x.rank(); ++axis) in.spatial *= x.dim(axis);
  }
  return in;
}

}  // namespace ortops::group_norm
