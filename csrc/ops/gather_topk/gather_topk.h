#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/op_kernel.h"

namespace ortops::gather_topk {
extern const OpSchema kSchema;  // mmdeploy GatherTopk
KernelFactory Make, MakeDevice;

// A node's inputs, their shapes checked, and the output's shape: what the CPU kernel and the
// device kernel both start from, with the same messages.
template <typename T>
struct Gather {
  ConstTensor<T> input;
  ConstTensor<int64_t> indices;
  int64_t rows = 0;         // N: the rows an index picks from
  int64_t picks = 0;        // K: the indices per batch item
  int64_t row_size = 1;     // elements per row: the product of the trailing dims
  int64_t total = 0;        // rows to copy: batch items times picks
  int64_t output_size = 0;  // total x row_size
  Shape output_shape;
};

// Throws the message of the index at flat position `flat` of `indices`, outside [0, rows).
[[noreturn]] void FailIndexOutside(const Shape& indices_shape, int64_t flat, int64_t index, int64_t rows,
                                   const Shape& input_shape);

template <typename T, typename IO>
Gather<T> ReadGather(const IO& io) {
  Gather<T> g{io.template Input<T>(0), io.template Input<int64_t>(1), 0, 0, 1, 0, 0, {}};
  const Shape& in = g.input.shape;
  const Shape& idx = g.indices.shape;
  Check(g.indices.rank() >= 1, "input 'indices' must have rank 1 or more ([A..., K]), got shape ", ShapeText{idx});
  // The axis of `input` that the indices pick along: after the leading (batch) dims they share.
  const size_t row_axis = g.indices.rank() - 1;
  Check(g.input.rank() > row_axis, "input 'input' ", ShapeText{in}, " must have rank ", row_axis + 1,
        " or more ([A..., N, ...], A... the leading dims of input 'indices' ", ShapeText{idx}, ")");
  Check(std::equal(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(row_axis), in.begin()), "input 'indices' ",
        ShapeText{idx}, " must have the leading dims of input 'input' ", ShapeText{in},
        " (all but its last dim equal to the same dims of 'input')");
  g.rows = g.input.dim(row_axis);
  g.picks = g.indices.dim(row_axis);
  for (size_t axis = row_axis + 1; axis < g.input.rank(); ++axis) g.row_size *= g.input.dim(axis);
  g.total = g.indices.size();
  Check(!__builtin_mul_overflow(g.total, g.row_size, &g.output_size), "the output of input 'input' ", ShapeText{in},
        " and input 'indices' ", ShapeText{idx}, " has more elements than int64 holds");
  g.output_shape = idx;
  g.output_shape.insert(g.output_shape.end(), in.begin() + static_cast<std::ptrdiff_t>(row_axis + 1), in.end());
  return g;
}

}  // namespace ortops::gather_topk
