// Greedy non-maximum suppression over one set of boxes (mmcv's NonMaxSuppression).
#include "ops/nms/nms.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "math/box_grid.h"
#include "math/box_iou.h"
#include "ops/nms/box_inputs.h"

namespace ortops::nms {
namespace {

constexpr IoSpec kInputs[] = {kBoxesInput, kScoresInput};
constexpr IoSpec kOutputs[] = {
    {"indices", ElemType::kInt64, "`[K]` indices into `boxes` of the kept boxes, highest score first"},
};
constexpr AttrSpec kAttributes[] = {
    {"iou_threshold", AttrType::kFloat, "0.5",
     "a box is dropped when its IoU with a kept box is strictly greater than this"},
    {"offset", AttrType::kInt, "0", "0 or 1; 1 is the legacy convention where a box's width is x2 - x1 + 1"},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "Greedy non-maximum suppression. Boxes are visited in descending score order "
        "(ties: lower index first, so the result is deterministic); a box is kept unless "
        "its IoU with an already kept box is strictly greater than `iou_threshold`. "
        "IoU uses areas `(x2 - x1 + offset) * (y2 - y1 + offset)`. "
        "Equal to `torchvision.ops.nms` when `offset` is 0. "
        "NaN in `boxes` or `scores` is an error.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = kAttributes,
};

namespace {

template <typename T>
class NmsKernel : public KernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = nms::kSchema;

  NmsKernel(const Attributes& attrs, const OpDef& def)
      : KernelBase(def), iou_threshold_(attrs.Float("iou_threshold")), offset_(attrs.Int("offset")) {
    Check(offset_ == 0 || offset_ == 1, "attribute 'offset' must be 0 or 1, got ", offset_);
    Check(!std::isnan(iou_threshold_), "attribute 'iou_threshold' is NaN");
  }

  void Compute(const KernelIO& io) const {
    const auto [boxes, scores] = BoxesAndScores<T>(io);
    const int64_t count = boxes.dim(0);
    bool finite = true;
    for (int64_t i = 0; i < count * 4; ++i) finite &= std::isfinite(boxes.data[i]);

    ScratchVector<int64_t> order = io.Vector<int64_t>(static_cast<size_t>(count));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return scores.data[a] > scores.data[b]; });

    const T offset = static_cast<T>(offset_);
    const T threshold = static_cast<T>(iou_threshold_);
    ScratchVector<T> areas = io.Vector<T>(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) areas[i] = BoxArea(boxes.data + 4 * i, offset);
    auto overlaps = [&](int64_t kept, int64_t candidate) {
      return BoxIoU(boxes.data + 4 * kept, areas[kept], boxes.data + 4 * candidate, areas[candidate], offset) >
             threshold;
    };

    ScratchVector<int64_t> kept(io.Allocator<int64_t>());
    if (threshold >= 0 && finite) {
      BoxGrid<T, SessionAllocator<T>> grid(boxes.data, count, offset, io.Allocator<T>());
      for (int64_t i : order) {
        if (grid.AnyNear(i, [&](int64_t k) { return overlaps(k, i); })) continue;
        kept.push_back(i);
        grid.Insert(i);
      }
    } else {
      // A negative threshold (every overlap counts) or infinite coordinates: test every pair.
      for (int64_t i : order) {
        if (std::none_of(kept.begin(), kept.end(), [&](int64_t k) { return overlaps(k, i); })) kept.push_back(i);
      }
    }
    int64_t* out = io.Output<int64_t>(0, {static_cast<int64_t>(kept.size())});
    std::copy(kept.begin(), kept.end(), out);
  }

 private:
  float iou_threshold_;
  int64_t offset_;
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<NmsKernel, float, double>(def); }

}  // namespace ortops::nms
