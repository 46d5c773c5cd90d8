// mmdeploy's GatherTopk: the rows of each batch item that top-k selected.
#include "ops/gather_topk/gather_topk.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <ostream>

namespace ortops::gather_topk {
namespace {

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

void FailIndexOutside(const Shape& indices_shape, int64_t flat, int64_t index, int64_t rows, const Shape& input_shape) {
  Fail("input 'indices' ", ShapeText{indices_shape}, " holds ", index, " at ", PositionText{indices_shape, flat},
       ", outside [0, N = ", rows, ") of input 'input' ", ShapeText{input_shape});
}

namespace {

template <typename T>
struct GatherTopkKernel : OpKernel<T, kSchema> {
  using OpKernel<T, kSchema>::OpKernel;

  void Compute(const KernelIO& io) const {
    const Gather<T> g = ReadGather<T>(io);
    for (int64_t i = 0; i < g.total; ++i) {
      const int64_t index = g.indices.data[i];
      if (index < 0 || index >= g.rows) FailIndexOutside(g.indices.shape, i, index, g.rows, g.input.shape);
    }
    T* output = io.Output<T>(0, g.output_shape);
    if (g.output_size == 0) return;
    const int64_t rows = g.rows, picks = g.picks, row_size = g.row_size, total = g.total;
    const T* input = g.input.data;
    const int64_t* indices = g.indices.data;

    // Whole rows are copied; ranges of them per task, so that each task moves a useful amount.
    constexpr int64_t kElementsPerTask = int64_t{1} << 16;
    const int64_t tasks = std::clamp<int64_t>(g.output_size / kElementsPerTask, 1, total);
    io.ParallelForRanges(static_cast<size_t>(total), static_cast<size_t>(tasks), [&](size_t begin, size_t end) {
      for (auto i = static_cast<int64_t>(begin); i < static_cast<int64_t>(end); ++i) {
        const int64_t item = i / picks;  // the flat batch position a...
        const T* row = input + (item * rows + indices[i]) * row_size;
        std::memcpy(output + i * row_size, row, static_cast<size_t>(row_size) * sizeof(T));
      }
    });
  }
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<GatherTopkKernel, float, double, int32_t, int64_t>(def); }

}  // namespace ortops::gather_topk
