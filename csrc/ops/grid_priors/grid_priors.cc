// mmdeploy's GridPriorsTRT: mmdet's anchors of one feature-map level, the base anchors shifted
// to every cell of the H x W grid.
#include "ops/grid_priors/grid_priors.h"

#include <algorithm>
#include <cstdint>

namespace ortops::grid_priors {
namespace {

constexpr IoSpec kInputs[] = {
    {"base_anchors", ElemType::kTypeParam, "`[A, 4]` the level's base anchors as (x1, y1, x2, y2)"},
    {"feat_h", ElemType::kInt64, "`[H]` only its length is read: the feature map's height (values ignored)"},
    {"feat_w", ElemType::kInt64, "`[W]` only its length is read: the feature map's width (values ignored)"},
};
constexpr IoSpec kOutputs[] = {
    {"anchors", ElemType::kTypeParam,
     "`[H * W * A, 4]` anchor (y * W + x) * A + a is base anchor a shifted by (x * stride_w, y * stride_h)"},
};
constexpr AttrSpec kAttributes[] = {
    {"stride_h", AttrType::kInt, "1", "the level's stride along the height"},
    {"stride_w", AttrType::kInt, "1", "the level's stride along the width"},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "mmdeploy's anchor grid (`mmdeploy::GridPriorsTRT`, written by its TensorRT rewrite of mmdet's "
        "`AnchorGenerator.single_level_grid_priors` when the feature-map size is dynamic): "
        "`anchors[(y * W + x) * A + a] = base_anchors[a] + (x * stride_w, y * stride_h, x * stride_w, "
        "y * stride_h)` for y < H, x < W, a < A, the shifts computed as `float(x) * stride_w` (as "
        "`torch.arange(W).to(dtype) * stride_w` in the exported module). H and W are the lengths of the "
        "inputs `feat_h` and `feat_w`, which the exporter makes with `ConstantOfShape` to carry the size; "
        "their values are never read. H, W or A of 0 gives `[0, 4]`.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = kAttributes,
    .differences =
        "The plugin computes the shift as `float(x * stride_w)` in int32; ortops as `float(x) * stride_w`, as "
        "the exported module does (the same below 2^24). The plugin takes float32 only; ortops also float64. "
        "ortops reads `feat_h` and `feat_w` as the int64 tensors the exporter writes (the plugin accepted any "
        "type).",
};

namespace {

template <typename T>
class GridPriorsKernel : public OpKernel<T, kSchema, Strides> {
 public:
  using OpKernel<T, kSchema, Strides>::OpKernel;

  void Compute(const KernelIO& io) const {
    const Strides& strides = this->attributes();
    const PriorsCall<T> call = PrepareCall<T>(io);
    const ConstTensor<T>& base = call.base;
    const int64_t height = call.height, width = call.width, anchors = call.anchors, count = call.count;
    T* out = io.Output<T>(0, {count, 4});
    if (count == 0) return;
    const T sh = static_cast<T>(strides.h), sw = static_cast<T>(strides.w);
    // Rows of the grid, in ranges of about kValuesPerTask outputs per task.
    constexpr int64_t kValuesPerTask = int64_t{1} << 16;
    const int64_t per_row = width * anchors * 4;
    const int64_t tasks = std::clamp<int64_t>(count * 4 / kValuesPerTask, 1, height);
    io.ParallelForRanges(static_cast<size_t>(height), static_cast<size_t>(tasks), [&](size_t begin, size_t end) {
      for (auto y = static_cast<int64_t>(begin); y < static_cast<int64_t>(end); ++y) {
        const T shift_y = static_cast<T>(y) * sh;
        T* row = out + y * per_row;
        for (int64_t x = 0; x < width; ++x) {
          const T shift_x = static_cast<T>(x) * sw;
          for (int64_t a = 0; a < anchors; ++a)
            ShiftAnchor(base.data + a * 4, shift_x, shift_y, row + (x * anchors + a) * 4);
        }
      }
    });
  }
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<GridPriorsKernel, float, double>(def); }

}  // namespace ortops::grid_priors
