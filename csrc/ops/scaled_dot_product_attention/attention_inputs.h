// The inputs of ScaledDotProductAttentionTRT, checked as the CPU kernel and the device path
// both check them.
#pragma once

#include <array>
#include <cstdint>

#include "core/custom_op.h"

namespace ortops::scaled_dot_product_attention {

// The mask's data and its strides along (B, Nt, Ns): 0 along a broadcast dim.
struct Mask {
  const float* data = nullptr;
  std::array<int64_t, 3> stride = {0, 0, 0};
};

struct Inputs {
  ConstTensor<float> query, key, value;  // [B, Nt, E], [B, Ns, E], [B, Ns, Ev]
  Mask mask;
  int64_t batch, targets, embed, sources, value_embed;
};

// The inputs of a KernelIO or a device::DeviceIO, their shapes checked.
template <typename IO>
Inputs CheckedInputs(const IO& io) {
  ConstTensor<float> query = io.template Input<float>(0, 3);
  ConstTensor<float> key = io.template Input<float>(1, 3);
  ConstTensor<float> value = io.template Input<float>(2, 3);
  const int64_t batch = query.dim(0), targets = query.dim(1), embed = query.dim(2);
  Check(key.dim(0) == batch && key.dim(2) == embed, "input 'key' ", ShapeText{key.shape},
        " must be [B, Ns, E] with B and E of input 'query' ", ShapeText{query.shape});
  const int64_t sources = key.dim(1), value_embed = value.dim(2);
  Check(value.dim(0) == batch && value.dim(1) == sources, "input 'value' ", ShapeText{value.shape},
        " must be [B, Ns, Ev] with B of input 'query' ", ShapeText{query.shape}, " and Ns of input 'key' ",
        ShapeText{key.shape});
  Mask mask;
  if (io.Has(3)) {
    const ConstTensor<float> m = io.template Input<float>(3);
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
  }
  return {std::move(query), std::move(key), std::move(value), mask, batch, targets, embed, sources, value_embed};
}

}  // namespace ortops::scaled_dot_product_attention
