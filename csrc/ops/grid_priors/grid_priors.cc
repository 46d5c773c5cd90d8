// mmdeploy's GridPriorsTRT: mmdet's anchors of one feature-map level, the base anchors shifted
// to every cell of the H x W grid.
#include "ops/grid_priors/grid_priors.h"

#include <algorithm>
#include <cstdint>

namespace ortops::grid_priors {

namespace {

template <typename T>
struct GridPriorsKernel : OpKernel<T, kSchema, Strides> {
  using OpKernel<T, kSchema, Strides>::OpKernel;

  void Compute(const KernelIO& io, const Strides& strides) const {
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
