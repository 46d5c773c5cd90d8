// Batched, per-class NMS of rotated boxes (mmdeploy's NMSRotated).
#include "ops/nms_rotated/nms_rotated.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <vector>

#include "math/rotated_box.h"

namespace ortops::nms_rotated {
namespace {

constexpr IoSpec kInputs[] = {
    {"boxes", ElemType::kTypeParam, "`[B, N, 5]` rotated boxes (cx, cy, w, h, theta), theta in radians"},
    {"scores", ElemType::kTypeParam, "`[B, C, N]` scores per batch, class and box"},
};
constexpr IoSpec kOutputs[] = {
    {"selected", ElemType::kInt64, "`[K, 3]` rows (batch, class, box) of the kept boxes"},
};
constexpr AttrSpec kAttributes[] = {
    {"iou_threshold", AttrType::kFloat, "0.5", "a box is suppressed when its IoU with a kept box is greater"},
    {"score_threshold", AttrType::kFloat, "0.0",
     "kept boxes scoring at or below this are not emitted (they still suppress others)"},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "Greedy NMS per batch and class in descending score order (ties: lower index first) with the "
        "IoU of rotated rectangles: the exact area of their intersection (convex polygon clipping, "
        "computed in float64 around the pair's midpoint) over w1 h1 + w2 h2 - intersection. A box is "
        "suppressed when that IoU is greater than `iou_threshold`. The score threshold applies after "
        "suppression: a box at or below it still suppresses lower-scored boxes but is not emitted. "
        "Rows come per batch, then per class, in score order. The rectangle of (cx, cy, w, h, theta) "
        "has corners (cx, cy) + R(theta) (+-w/2, +-h/2), R = [[cos, -sin], [sin, cos]]. Non-finite "
        "boxes and NaN scores are errors.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = kAttributes,
};

namespace {

template <typename T>
class NmsRotatedKernel : public KernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = nms_rotated::kSchema;

  NmsRotatedKernel(const Attributes& attrs, const OpDef& def)
      : KernelBase(def),
        iou_threshold_(attrs.Float("iou_threshold")),
        score_threshold_(attrs.Float("score_threshold")) {
    Check(!std::isnan(iou_threshold_) && !std::isnan(score_threshold_),
          "attributes 'iou_threshold' and "
          "'score_threshold' must not be NaN");
  }

  void Compute(const KernelIO& io) const {
    const ConstTensor<T> boxes = io.Input<T>(0, 3);
    const ConstTensor<T> scores = io.Input<T>(1, 3);
    const int64_t batch = boxes.dim(0), count = boxes.dim(1), classes = scores.dim(1);
    Check(boxes.dim(2) == 5, "input 'boxes' must have shape [B, N, 5] (cx, cy, w, h, theta), got ",
          ShapeText{boxes.shape});
    Check(scores.dim(0) == batch && scores.dim(2) == count, "input 'scores' must have shape [B, C, N] = [", batch,
          ", C, ", count, "], got ", ShapeText{scores.shape});
    for (int64_t i = 0; i < boxes.size(); ++i) Check(std::isfinite(boxes.data[i]), "input 'boxes' is not finite");
    for (int64_t i = 0; i < scores.size(); ++i) Check(!std::isnan(scores.data[i]), "input 'scores' contains NaN");

    std::vector<std::vector<std::array<int64_t, 3>>> rows(static_cast<size_t>(batch * classes));
    io.ParallelFor(rows.size(), [&](size_t task) {
      const int64_t b = static_cast<int64_t>(task) / classes, c = static_cast<int64_t>(task) % classes;
      const T* box = boxes.data + b * count * 5;
      const T* score = scores.data + (b * classes + c) * count;
      std::vector<int64_t> order(static_cast<size_t>(count));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return score[x] > score[y]; });
      std::vector<char> suppressed(static_cast<size_t>(count), 0);
      for (int64_t rank = 0; rank < count; ++rank) {
        if (suppressed[rank]) continue;
        const int64_t i = order[rank];
        for (int64_t later = rank + 1; later < count; ++later) {
          if (!suppressed[later] && Iou(box + 5 * i, box + 5 * order[later]) > iou_threshold_) suppressed[later] = 1;
        }
        if (score[i] > static_cast<T>(score_threshold_)) rows[task].push_back({b, c, i});
      }
    });
    int64_t total = 0;
    for (const auto& r : rows) total += static_cast<int64_t>(r.size());
    int64_t* selected = io.Output<int64_t>(0, {total, 3});
    for (const auto& r : rows) {
      for (const auto& row : r) selected = std::copy(row.begin(), row.end(), selected);
    }
  }

 private:
  static double Iou(const T* a, const T* b) {
    const double area_a = double(a[2]) * double(a[3]), area_b = double(b[2]) * double(b[3]);
    const double shift_x = (double(a[0]) + double(b[0])) / 2, shift_y = (double(a[1]) + double(b[1])) / 2;
    double inter = 0;
    // Boxes whose bounding circles do not meet cannot intersect.
    const double dx = double(a[0]) - double(b[0]), dy = double(a[1]) - double(b[1]);
    const double reach = std::hypot(double(a[2]), double(a[3])) / 2 + std::hypot(double(b[2]), double(b[3])) / 2;
    if (dx * dx + dy * dy <= reach * reach) {
      Point2 pa[4], pb[4];
      RotatedCorners(double(a[0]) - shift_x, double(a[1]) - shift_y, a[2], a[3], a[4], pa);
      RotatedCorners(double(b[0]) - shift_x, double(b[1]) - shift_y, b[2], b[3], b[4], pb);
      inter = QuadIntersectionArea(pa, pb);
    }
    return inter / (area_a + area_b - inter);
  }

  float iou_threshold_, score_threshold_;
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<NmsRotatedKernel, float, double>(def); }

}  // namespace ortops::nms_rotated
