// Batched, per-class NMS of rotated boxes (mmdeploy's NMSRotated, ortops' NMSRotated).
#include "ops/nms_rotated/nms_rotated.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "math/box_grid.h"
#include "math/rotated_box.h"

namespace ortops::nms_rotated {
namespace {

constexpr IoSpec kInputs[] = {
    {"boxes", ElemType::kTypeParam, "`[B, N, 5]` rotated boxes (cx, cy, w, h, theta), theta in radians"},
    {"scores", ElemType::kTypeParam, "`[B, C, N]` scores per batch, class and box"},
};
constexpr IoSpec kOutputs[] = {
    {"selected", ElemType::kInt64, "`[K, 3]` int64 rows (batch, class, box) of the kept boxes"},
};
constexpr AttrSpec kAttributes[] = {
    {"iou_threshold", AttrType::kFloat, "0.5", "a box is suppressed when its IoU with a kept box is greater than this"},
    {"score_threshold", AttrType::kFloat, "0.0",
     "kept boxes scoring at or below this are not emitted (they still suppress others); older mmdeploy "
     "files leave it out"},
};

// Where each compatibility name's node differs from the runtime that defined it.
constexpr CompatDifferences kCompatDifferences[] = {
    {"mmdeploy",
     "mmdeploy's kernel intersects the rectangles in float32 and sorts with an unstable sort; ortops "
     "intersects in float64 and takes the lower index first among equal scores, so results can differ "
     "where an IoU lies within float32 rounding of the threshold or scores tie. It computed on with NaN "
     "or infinite values; ortops reports them as errors. It took float32 only; ortops also takes float64."},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "Greedy NMS of rotated boxes, separately for each batch and class. Boxes are visited in "
        "descending score order (ties: lower index first); a box is suppressed when its IoU with a kept "
        "box is greater than `iou_threshold`. The IoU is exact: the intersection of the two rectangles by "
        "convex polygon clipping, computed in float64, over w1 h1 + w2 h2 - intersection. The score "
        "threshold applies after suppression: a kept box scoring at or below `score_threshold` still "
        "suppresses lower-scored boxes, it just is not emitted. Rows come per batch, then per class, in "
        "score order. The rectangle of (cx, cy, w, h, theta) has corners (cx, cy) + R(theta) (+-w/2, "
        "+-h/2), R = [[cos, -sin], [sin, cos]] (x right, y down). A box with w <= 0 or h <= 0 is empty: "
        "its IoU with every box is 0, never NaN (mmdeploy gets 0/0 for two zero-size boxes and a negative "
        "area for a negative size). NaN or Inf in `boxes` or `scores` is an error. mmdeploy's kernel "
        "computes in float32 and sorts unstably; results differ from it only where an IoU lies within "
        "rounding of the threshold or scores tie.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = kAttributes,
    .compat_differences = kCompatDifferences,
};

namespace {

// Fails with the position of the first NaN or Inf in a rank-3 tensor.
template <typename T>
void CheckFinite(const ConstTensor<T>& tensor, const char* name) {
  const int64_t size = tensor.size();
  for (int64_t i = 0; i < size; ++i) {
    if (std::isfinite(tensor.data[i])) continue;
    const int64_t inner = tensor.dim(2), middle = tensor.dim(1);
    Fail("input '", name, "' must be finite, got ", tensor.data[i], " at [", i / (middle * inner), ", ",
         (i / inner) % middle, ", ", i % inner, "] of shape ", ShapeText{tensor.shape});
  }
}

template <typename T>
class NmsRotatedKernel : public KernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = nms_rotated::kSchema;

  NmsRotatedKernel(const Attributes& attrs, const OpDef& def)
      : KernelBase(def),
        iou_threshold_(attrs.Float("iou_threshold")),
        score_threshold_(attrs.Float("score_threshold")) {
    Check(!std::isnan(iou_threshold_), "attribute 'iou_threshold' is NaN");
    Check(!std::isnan(score_threshold_), "attribute 'score_threshold' is NaN");
  }

  void Compute(const KernelIO& io) const {
    const ConstTensor<T> boxes = io.Input<T>(0, 3);
    const ConstTensor<T> scores = io.Input<T>(1, 3);
    Check(boxes.dim(2) == 5, "input 'boxes' must have shape [B, N, 5] (cx, cy, w, h, theta), got ",
          ShapeText{boxes.shape});
    const int64_t batch = boxes.dim(0), count = boxes.dim(1), classes = scores.dim(1);
    Check(scores.dim(0) == batch && scores.dim(2) == count, "input 'scores' must have shape [B, C, N] = [", batch,
          ", C, ", count, "] to match 'boxes' ", ShapeText{boxes.shape}, ", got ", ShapeText{scores.shape});
    CheckFinite(boxes, "boxes");
    CheckFinite(scores, "scores");
    if (scores.size() == 0) {  // no box or no class: nothing to keep, and B * C may be huge
      io.Output<int64_t>(0, {0, 3});
      return;
    }

    // Corners, area and bounds of every box once; each (batch, class) pair reads its batch's.
    // The axis-aligned bounds (x1, y1, x2, y2) feed the grid that finds overlap candidates.
    const size_t total_boxes = static_cast<size_t>(batch * count);
    Scratch<RotatedRect> rects = io.Allocate<RotatedRect>(total_boxes);
    Scratch<double> bounds = io.Allocate<double>(4 * total_boxes);
    io.ParallelForRanges(total_boxes, 64, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        const RotatedRect& rect = *std::construct_at(&rects[i], MakeRotatedRect(boxes.data + 5 * i));
        double* bound = bounds.data() + 4 * i;
        bound[0] = rect.center.x - rect.half_x, bound[1] = rect.center.y - rect.half_y;
        bound[2] = rect.center.x + rect.half_x, bound[3] = rect.center.y + rect.half_y;
      }
    });
    // Only boxes whose bounds overlap can have an IoU above a threshold >= 0; the grid needs
    // finite bounds (float64 boxes near the largest double can overflow them).
    bool use_grid = iou_threshold_ >= 0;
    for (size_t i = 0; use_grid && i < 4 * total_boxes; ++i) use_grid = std::isfinite(bounds[i]);

    // Kept box indices per (batch, class) pair, each pair on its own task and buffer.
    ScratchVector<ScratchVector<int64_t>> kept(static_cast<size_t>(batch * classes),
                                               ScratchVector<int64_t>(io.Allocator<int64_t>()),
                                               io.Allocator<ScratchVector<int64_t>>());
    io.ParallelFor(kept.size(), [&](size_t pair) {
      const int64_t b = static_cast<int64_t>(pair) / classes;
      const T* score = scores.data + static_cast<int64_t>(pair) * count;
      const RotatedRect* batch_rects = rects.data() + b * count;
      if (use_grid) {
        SelectOneClassWithGrid(io, batch_rects, bounds.data() + 4 * b * count, score, count, kept[pair]);
      } else {
        SelectOneClass(io, batch_rects, score, count, kept[pair]);
      }
    });

    int64_t total = 0;
    for (const auto& indices : kept) total += static_cast<int64_t>(indices.size());
    int64_t* out = io.Output<int64_t>(0, {total, 3});
    for (size_t pair = 0; pair < kept.size(); ++pair) {
      const int64_t b = static_cast<int64_t>(pair) / classes, c = static_cast<int64_t>(pair) % classes;
      for (const int64_t index : kept[pair]) {
        *out++ = b;
        *out++ = c;
        *out++ = index;
      }
    }
  }

 private:
  // Boxes in descending score order, ties by index (stable).
  static ScratchVector<int64_t> ScoreOrder(const KernelIO& io, const T* score, int64_t count) {
    ScratchVector<int64_t> order = io.Vector<int64_t>(static_cast<size_t>(count));
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return score[x] > score[y]; });
    return order;
  }

  // Greedy NMS testing each box against the kept boxes whose bounds share a grid cell with it.
  // The kept set is the same as the plain scan's; kept boxes at or below the score threshold
  // stay in the grid (they suppress) but are not emitted.
  void SelectOneClassWithGrid(const KernelIO& io, const RotatedRect* rects, const double* bounds, const T* score,
                              int64_t count, ScratchVector<int64_t>& kept) const {
    const double iou_threshold = iou_threshold_;
    const T score_threshold = static_cast<T>(score_threshold_);
    BoxGrid<double, SessionAllocator<double>> grid(bounds, count, 0.0, io.Allocator<double>());
    // A kept box spanning several cells is visited once per shared cell: test it only once.
    ScratchVector<int64_t> tested_for = io.Vector<int64_t>(static_cast<size_t>(count), -1);
    for (const int64_t i : ScoreOrder(io, score, count)) {
      const auto suppresses = [&](int64_t k) {
        int64_t& last = tested_for[static_cast<size_t>(k)];
        if (last == i) return false;
        last = i;
        return RotatedIoU(rects[k], rects[i]) > iou_threshold;
      };
      if (grid.AnyNear(i, suppresses)) continue;
      grid.Insert(i);
      if (score[i] > score_threshold) kept.push_back(i);
    }
  }

  // The same selection as a plain scan of every later box, for negative thresholds (where
  // even disjoint boxes suppress each other) and bounds that overflow.
  void SelectOneClass(const KernelIO& io, const RotatedRect* rects, const T* score, int64_t count,
                      ScratchVector<int64_t>& kept) const {
    const ScratchVector<int64_t> order = ScoreOrder(io, score, count);
    ScratchVector<char> suppressed = io.Vector<char>(static_cast<size_t>(count));  // by rank
    const double iou_threshold = iou_threshold_;
    const T score_threshold = static_cast<T>(score_threshold_);
    for (size_t rank = 0; rank < order.size(); ++rank) {
      if (suppressed[rank]) continue;
      const RotatedRect& box = rects[order[rank]];
      for (size_t later = rank + 1; later < order.size(); ++later) {
        if (!suppressed[later] && RotatedIoU(box, rects[order[later]]) > iou_threshold) suppressed[later] = 1;
      }
      if (score[order[rank]] > score_threshold) kept.push_back(order[rank]);
    }
  }

  float iou_threshold_, score_threshold_;
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<NmsRotatedKernel, float, double>(def); }

}  // namespace ortops::nms_rotated
