// Greedy non-maximum suppression over one set of boxes (mmcv's NonMaxSuppression).
#include "ops/nms/nms.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "math/box_iou.h"
#include "math/score_order.h"
#include "ops/nms/box_inputs.h"
#include "ops/nms/kept_box_grid.h"
#include "ops/nms/suppress.h"

namespace ortops::nms {

namespace {

template <typename T>
class NmsKernel : public KernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = nms::kSchema;

  NmsKernel(const Attributes& attrs, const OpDef& def) : KernelBase(def), attributes_(attrs) {}

  void Compute(const KernelIO& io) const {
    const auto [boxes, scores] = BoxesAndScores<T>(io);
    const int64_t count = boxes.dim(0);
    bool finite = true;
    for (int64_t i = 0; i < count * 4; ++i) finite &= std::isfinite(boxes.data[i]);

    const ScratchVector<int64_t> order = ScoreOrder(io, scores.data, count);

    const T offset = static_cast<T>(attributes_.offset);
    const T threshold = static_cast<T>(attributes_.iou_threshold);
    auto candidate_of = [&](int64_t i) {
      const T* box = boxes.data + 4 * i;
      return nms::Candidate<T>{box[0], box[1], box[2], box[3], BoxArea(box, offset), offset, threshold};
    };

    ScratchVector<int64_t> kept(io.Allocator<int64_t>());
    if (threshold >= 0 && finite) {
      // Boxes that overlap by more than a non-negative threshold share a grid cell.
      nms::KeptBoxGrid<T> grid(io, boxes.data, count, offset);
      for (int64_t i : order) {
        const nms::Candidate<T> candidate = candidate_of(i);
        if (grid.Suppresses(i, candidate)) continue;
        kept.push_back(i);
        grid.Insert(i, candidate);
      }
    } else {
      // A negative threshold (every overlap counts) or infinite coordinates: test every pair.
      Scratch<T> x1 = io.Allocate<T>(static_cast<size_t>(count)), y1 = io.Allocate<T>(static_cast<size_t>(count)),
                 x2 = io.Allocate<T>(static_cast<size_t>(count)), y2 = io.Allocate<T>(static_cast<size_t>(count)),
                 area = io.Allocate<T>(static_cast<size_t>(count));
      for (int64_t i : order) {
        const nms::Candidate<T> c = candidate_of(i);
        const nms::BoxColumns<T> columns{x1.data(), y1.data(),   x2.data(),
                                         y2.data(), area.data(), static_cast<int64_t>(kept.size())};
        if (ORTOPS_ISA_CALL(AnySuppresses, columns, c)) continue;
        const size_t k = kept.size();
        x1[k] = c.x1, y1[k] = c.y1, x2[k] = c.x2, y2[k] = c.y2, area[k] = c.area;
        kept.push_back(i);
      }
    }
    int64_t* out = io.Output<int64_t>(0, {static_cast<int64_t>(kept.size())});
    std::copy(kept.begin(), kept.end(), out);
  }

 private:
  NmsAttributes attributes_;
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<NmsKernel, float, double>(def); }

}  // namespace ortops::nms
