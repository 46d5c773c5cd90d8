// mmdeploy's GatherTopk: the rows of each batch item that top-k selected.
#include "ops/gather_topk/gather_topk.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace ortops::gather_topk {
namespace {

constexpr IoSpec kInputs[] = {
    {"input", ElemType::kTypeParam, "`[B, N, ...]` per batch item, N rows of any trailing shape"},
    {"indices", ElemType::kInt64, "`[B, K]` row indices into `input`, each in [0, N) (TopK's indices)"},
};
constexpr IoSpec kOutputs[] = {
    {"output", ElemType::kTypeParam, "`[B, K, ...]` output[b, k] = input[b, indices[b, k]]"},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "mmdeploy's gather of top-k rows (`mmdeploy::GatherTopk`, written by the TensorRT rewrite of "
        "`gather_topk` in mmdet's dense heads): `output[b, k, ...] = input[b, indices[b, k], ...]`, the same as "
        "`input[arange(B)[:, None], indices]` in PyTorch. `indices` is `[B, K]` with the batch size of `input`; "
        "an index outside [0, N) is an error.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = {},
    .differences =
        "The plugin takes int32 indices (TensorRT turns the file's int64 TopK indices into int32) and "
        "float32 or int32 data; ortops reads the int64 indices the file holds and also accepts float64 and int64 "
        "data. The plugin reads out of bounds for an index outside [0, N) and does not check that the batch "
        "dims of `indices` match `input`'s (it also took index ranks other than 2, which mmdeploy never "
        "writes); ortops reports these as errors. Otherwise the same: the rows are copied unchanged, NaN "
        "included.",
};

namespace {

template <typename T>
class GatherTopkKernel : public KernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = gather_topk::kSchema;

  GatherTopkKernel(const Attributes&, const OpDef& def) : KernelBase(def) {}

  void Compute(const KernelIO& io) const {
    const ConstTensor<T> input = io.Input<T>(0);
    const ConstTensor<int64_t> indices = io.Input<int64_t>(1, 2);
    Check(input.rank() >= 2, "input 'input' must have rank 2 or more ([B, N, ...]), got shape ",
          ShapeText{input.shape});
    const int64_t batch = input.dim(0), rows = input.dim(1), picks = indices.dim(1);
    Check(indices.dim(0) == batch, "input 'indices' ", ShapeText{indices.shape},
          " must have the batch size B = ", batch, " of input 'input' ", ShapeText{input.shape});
    int64_t row_size = 1;  // elements per row: the product of the trailing dims
    for (size_t axis = 2; axis < input.rank(); ++axis) row_size *= input.dim(axis);

    for (int64_t i = 0; i < batch * picks; ++i) {
      const int64_t index = indices.data[i];
      Check(index >= 0 && index < rows, "input 'indices' ", ShapeText{indices.shape}, " holds ", index, " at [",
            i / picks, ", ", i % picks, "], outside [0, N = ", rows, ") of input 'input' ", ShapeText{input.shape});
    }
    int64_t output_size = 0;
    Check(!__builtin_mul_overflow(batch * picks, row_size, &output_size), "the output [B = ", batch, ", K = ", picks,
          ", ...] of input 'input' ", ShapeText{input.shape}, " and input 'indices' ", ShapeText{indices.shape},
          " has more elements than int64 holds");
    Shape shape = input.shape;
    shape[1] = picks;
    T* output = io.Output<T>(0, shape);
    if (output_size == 0) return;

    // Whole rows are copied; ranges of them per task, so that each task moves a useful amount.
    constexpr int64_t kElementsPerTask = int64_t{1} << 16;
    const int64_t total = batch * picks;
    const int64_t tasks = std::clamp<int64_t>(output_size / kElementsPerTask, 1, total);
    io.ParallelForRanges(static_cast<size_t>(total), static_cast<size_t>(tasks), [&](size_t begin, size_t end) {
      for (auto i = static_cast<int64_t>(begin); i < static_cast<int64_t>(end); ++i) {
        const int64_t b = i / picks;
        const T* row = input.data + (b * rows + indices.data[i]) * row_size;
        std::memcpy(output + i * row_size, row, static_cast<size_t>(row_size) * sizeof(T));
      }
    });
  }
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<GatherTopkKernel, float, double, int32_t, int64_t>(def); }

}  // namespace ortops::gather_topk
