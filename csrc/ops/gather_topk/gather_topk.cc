// mmdeploy's GatherTopk: the rows of each batch item that top-k selected.
#include "ops/gather_topk/gather_topk.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <ostream>

namespace ortops::gather_topk {
namespace {

constexpr IoSpec kInputs[] = {
    {"input", ElemType::kTypeParam,
     "`[A..., N, ...]` the rows to pick from: A... are the batch dims of `indices` (none, one or more), then N rows "
     "of any trailing shape"},
    {"indices", ElemType::kInt64, "`[A..., K]` row indices into `input`, each in [0, N) (TopK's indices)"},
};
constexpr IoSpec kOutputs[] = {
    {"output", ElemType::kTypeParam, "`[A..., K, ...]` output[a..., k] = input[a..., indices[a..., k]]"},
};

// The position of flat element `flat` of a tensor of shape `shape`, as "[a, b, k]".
struct PositionText {
  const Shape& shape;
  int64_t flat;
};

std::ostream& operator<<(std::ostream& out, PositionText position) {
  Shape coordinates(position.shape.size());
  for (size_t axis = position.shape.size(); axis-- > 0;) {
    coordinates[axis] = position.flat % position.shape[axis];
    position.flat /= position.shape[axis];
  }
  return out << ShapeText{coordinates};
}

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "mmdeploy's gather of top-k rows (`mmdeploy::GatherTopk`, written by the TensorRT rewrite of "
        "`gather_topk` in mmdet's dense heads): `output[a..., k, ...] = input[a..., indices[a..., k], ...]` for "
        "any number of leading batch dims a... (mmdeploy writes one, `[B, K]` indices into `[B, N, ...]`), the "
        "same as `numpy.take_along_axis` of `input` with the indices broadcast over the trailing dims. The "
        "leading dims of `indices` must equal those of `input`; the output has the shape of `indices` followed "
        "by the trailing dims of `input`. An index outside [0, N) is an error.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = {},
    .differences =
        "The plugin takes int32 indices (TensorRT turns the file's int64 TopK indices into int32) and "
        "float32 or int32 data; ortops reads the int64 indices the file holds and also accepts float64 and int64 "
        "data. The plugin reads out of bounds for an index outside [0, N) and takes its batch size from "
        "`input` without checking that the leading dims of `indices` match; ortops reports these as errors. "
        "Otherwise the same, for indices of any rank: the rows are copied unchanged, NaN included.",
};

namespace {

template <typename T>
class GatherTopkKernel : public OpKernel<T, kSchema> {
 public:
  using OpKernel<T, kSchema>::OpKernel;

  void Compute(const KernelIO& io) const {
    const ConstTensor<T> input = io.Input<T>(0);
    const ConstTensor<int64_t> indices = io.Input<int64_t>(1);
    Check(indices.rank() >= 1, "input 'indices' must have rank 1 or more ([A..., K]), got shape ",
          ShapeText{indices.shape});
    // The axis of `input` that the indices pick along: after the leading (batch) dims they share.
    const size_t row_axis = indices.rank() - 1;
    Check(input.rank() > row_axis, "input 'input' ", ShapeText{input.shape}, " must have rank ", row_axis + 1,
          " or more ([A..., N, ...], A... the leading dims of input 'indices' ", ShapeText{indices.shape}, ")");
    Check(std::equal(indices.shape.begin(), indices.shape.begin() + static_cast<std::ptrdiff_t>(row_axis),
                     input.shape.begin()),
          "input 'indices' ", ShapeText{indices.shape}, " must have the leading dims of input 'input' ",
          ShapeText{input.shape}, " (all but its last dim equal to the same dims of 'input')");
    const int64_t rows = input.dim(row_axis), picks = indices.dim(row_axis);
    int64_t row_size = 1;  // elements per row: the product of the trailing dims
    for (size_t axis = row_axis + 1; axis < input.rank(); ++axis) row_size *= input.dim(axis);

    const int64_t total = indices.size();  // rows to copy: batch items times picks
    for (int64_t i = 0; i < total; ++i) {
      const int64_t index = indices.data[i];
      Check(index >= 0 && index < rows, "input 'indices' ", ShapeText{indices.shape}, " holds ", index, " at ",
            PositionText{indices.shape, i}, ", outside [0, N = ", rows, ") of input 'input' ", ShapeText{input.shape});
    }
    int64_t output_size = 0;
    Check(!__builtin_mul_overflow(total, row_size, &output_size), "the output of input 'input' ",
          ShapeText{input.shape}, " and input 'indices' ", ShapeText{indices.shape},
          " has more elements than int64 holds");
    Shape shape = indices.shape;
    shape.insert(shape.end(), input.shape.begin() + static_cast<std::ptrdiff_t>(row_axis + 1), input.shape.end());
    T* output = io.Output<T>(0, shape);
    if (output_size == 0) return;

    // Whole rows are copied; ranges of them per task, so that each task moves a useful amount.
    constexpr int64_t kElementsPerTask = int64_t{1} << 16;
    const int64_t tasks = std::clamp<int64_t>(output_size / kElementsPerTask, 1, total);
    io.ParallelForRanges(static_cast<size_t>(total), static_cast<size_t>(tasks), [&](size_t begin, size_t end) {
      for (auto i = static_cast<int64_t>(begin); i < static_cast<int64_t>(end); ++i) {
        const int64_t item = i / picks;  // the flat batch position a...
        const T* row = input.data + (item * rows + indices.data[i]) * row_size;
        std::memcpy(output + i * row_size, row, static_cast<size_t>(row_size) * sizeof(T));
      }
    });
  }
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<GatherTopkKernel, float, double, int32_t, int64_t>(def); }

}  // namespace ortops::gather_topk
