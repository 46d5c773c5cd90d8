#pragma once

#include <cmath>

#include "core/host_device.h"
#include "core/op_kernel.h"

namespace ortops::group_norm {
extern const OpSchema kSchema;              // ortops GroupNorm
extern const OpSchema kInstanceNormSchema;  // mmdeploy TRTInstanceNormalization
extern const OpSchema kAddLayerNormSchema;  // ortops AddLayerNorm
KernelFactory Make, MakeInstanceNorm, MakeAddLayerNorm, MakeDevice, MakeInstanceNormDevice, MakeAddLayerNormDevice;

// kInstance: num_groups is C, the input's channel count (TRTInstanceNormalization);
// kLastAxis: each row of the last axis is a group, and scale and bias are per element of it
// (AddLayerNorm).
enum class Grouping { kAttribute, kInstance, kLastAxis };

// The attributes of a node, read and checked once, as its CPU and device kernels take them.
struct NormAttributes {
  NormAttributes(const Attributes& attrs, Grouping grouping)
      : num_groups(grouping == Grouping::kAttribute ? attrs.Int("num_groups") : 1), epsilon(attrs.Float("epsilon")) {
    Check(num_groups >= 1, "attribute 'num_groups' must be at least 1, got ", num_groups);
    Check(std::isfinite(epsilon) && epsilon >= 0, "attribute 'epsilon' must be finite and >= 0, got ", epsilon);
  }
  int64_t num_groups;  // for kAttribute
  float epsilon;
};

// The schema of the node that kGrouping names.
template <Grouping kGrouping>
constexpr const OpSchema& kNormSchema = kGrouping == Grouping::kInstance   ? kInstanceNormSchema
                                        : kGrouping == Grouping::kLastAxis ? kAddLayerNormSchema
                                                                           : kSchema;

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

// Where AddLayerNorm reads B for element i of A: B broadcast to A's shape as ONNX broadcasts
// a Gemm's C (unidirectionally: B's dims, aligned to A's last, each 1 or A's).
struct BroadcastToA {
  static constexpr size_t kMaxRank = 8;
  int rank = 0;                    // 0: B has A's shape (offset i)
  int64_t dims[kMaxRank] = {};     // A's
  int64_t strides[kMaxRank] = {};  // B's, per axis of A; 0 where B broadcasts

  ORTOPS_HD int64_t Offset(int64_t i) const {
    int64_t offset = rank == 0 ? i : 0;
    for (int axis = rank - 1; axis >= 0; --axis) {
      offset += i % dims[axis] * strides[axis];
      i /= dims[axis];
    }
    return offset;
  }
  // B's step along A's last axis: 1, or 0 where B broadcasts along it.
  ORTOPS_HD int64_t Step() const { return rank == 0 ? 1 : strides[rank - 1]; }
};

// AddLayerNorm's checked inputs: `rows` rows of `channels` elements of A.
template <typename T>
struct AddNormInputs {
  ConstTensor<T> a;
  const T* b;
  BroadcastToA broadcast;
  const T* scale;
  const T* bias;
  int64_t rows, channels;
};

template <typename T, typename IO>
AddNormInputs<T> ReadAddNormInputs(const IO& io) {
  AddNormInputs<T> in{io.template Input<T>(0), nullptr, {}, nullptr, nullptr, 0, 0};
  const ConstTensor<T>& a = in.a;
  Check(a.rank() >= 1, "input 'A' must have rank 1 or more ([..., C]), got a scalar");
  const ConstTensor<T> b = io.template Input<T>(1);
  in.b = b.data;
  if (b.shape != a.shape) {
    bool broadcasts = b.rank() <= a.rank();
    for (size_t k = 1; broadcasts && k <= b.rank(); ++k) {
      broadcasts = b.dim(b.rank() - k) == 1 || b.dim(b.rank() - k) == a.dim(a.rank() - k);
    }
    Check(broadcasts, "input 'B' must have the shape of 'A', ", ShapeText{a.shape}, ", or broadcast to it, got ",
          ShapeText{b.shape});
    Check(a.rank() <= BroadcastToA::kMaxRank, "input 'B' ", ShapeText{b.shape}, " broadcasts to 'A' ",
          ShapeText{a.shape}, ": supported up to rank ", BroadcastToA::kMaxRank);
    BroadcastToA& to_a = in.broadcast;
    to_a.rank = static_cast<int>(a.rank());
    int64_t stride = 1;
    for (size_t k = 1; k <= a.rank(); ++k) {
      const size_t axis = a.rank() - k;
      to_a.dims[axis] = a.dim(axis);
      const int64_t b_dim = k <= b.rank() ? b.dim(b.rank() - k) : 1;
      to_a.strides[axis] = b_dim == 1 ? 0 : stride;
      stride *= b_dim;
    }
  }
  in.channels = a.dim(a.rank() - 1);
  in.scale = PerChannelInput<T>(io, 2, "scale", in.channels);
  in.bias = PerChannelInput<T>(io, 3, "bias", in.channels);
  in.rows = in.channels == 0 ? 0 : a.size() / in.channels;
  return in;
}

}  // namespace ortops::group_norm
