// Batched, per-class NMS of rotated boxes (mmdeploy's NMSRotated, ortops' NMSRotated).
#include "ops/nms_rotated/nms_rotated.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <type_traits>
#include <utility>
#include <vector>

#include "math/box_grid.h"
#include "math/mmdeploy_rotated_iou.h"
#include "math/rotated_box.h"
#include "math/score_order.h"

namespace ortops::nms_rotated {

namespace {

// Fails with the position of the first NaN or Inf in a rank-3 tensor.
template <typename T>
void CheckFinite(const ConstTensor<T>& tensor, const char* name) {
  const int64_t size = tensor.size();
  for (int64_t i = 0; i < size; ++i) {
    if (!std::isfinite(tensor.data[i])) FailNotFinite(tensor.shape, name, i, tensor.data[i]);
  }
}

template <typename T>
class NmsRotatedKernel : public KernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = nms_rotated::kSchema;

  NmsRotatedKernel(const Attributes& attrs, const OpDef& def)
      : KernelBase(def), attributes_(attrs, def), compat_(def.compat) {}

  void Compute(const KernelIO& io) const {
    const auto [boxes, scores] = BoxesAndScoresInputs<T>(io);
    const int64_t batch = boxes.dim(0), count = boxes.dim(1), classes = scores.dim(1);
    CheckFinite(boxes, "boxes");
    CheckFinite(scores, "scores");
    if (scores.size() == 0) {  // no box or no class: nothing to keep, and B * C may be huge
      io.Output<int64_t>(0, {0, 3});
      return;
    }

    // Corners, area and bounds of every box once; each (batch, class) pair reads its batch's.
    // The axis-aligned bounds (x1, y1, x2, y2) feed the grid that finds overlap candidates.
    // In mmdeploy's domain a box that is not proper (mmdeploy_rotated::IsProper) instead keeps
    // its raw form, for the original's arithmetic, and stays out of the grid.
    const size_t total_boxes = static_cast<size_t>(batch * count);
    Scratch<RotatedRect> rects = io.Allocate<RotatedRect>(total_boxes);
    Scratch<double> bounds = io.Allocate<double>(4 * total_boxes);
    Scratch<RawBox> raw = io.Allocate<RawBox>(compat_ ? total_boxes : 0);
    Scratch<char> proper = io.Allocate<char>(total_boxes);
    io.ParallelForRanges(total_boxes, 64, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        const RotatedRect& rect = *std::construct_at(&rects[i]);
        PrepareBox(boxes.data + 5 * i, compat_, rects[i], compat_ ? &raw[i] : nullptr, proper[i]);
        double* bound = bounds.data() + 4 * i;
        bound[0] = rect.center.x - rect.half_x, bound[1] = rect.center.y - rect.half_y;
        bound[2] = rect.center.x + rect.half_x, bound[3] = rect.center.y + rect.half_y;
      }
    });
    // Boxes of zero sides (points) with the same centre give the same IoUs in the original's
    // arithmetic, whatever their angle: numbered groups of them, per image.
    Scratch<int64_t> point_group = io.Allocate<int64_t>(compat_ ? total_boxes : 0);
    ScratchVector<int64_t> point_groups = io.Vector<int64_t>(compat_ ? static_cast<size_t>(batch) : 0);
    io.ParallelFor(point_groups.size(), [&](size_t b) {
      point_groups[b] = GroupPoints(io, boxes.data + 5 * count * static_cast<int64_t>(b), count,
                                    point_group.data() + count * static_cast<int64_t>(b));
    });
    // Only boxes whose bounds overlap can have an IoU above a threshold >= 0; the grid needs
    // finite bounds (float64 boxes near the largest double can overflow them).
    bool use_grid = attributes_.iou_threshold >= 0;
    for (size_t i = 0; use_grid && i < 4 * total_boxes; ++i) use_grid = std::isfinite(bounds[i]);

    // Kept box indices per (batch, class) pair, each pair on its own task and buffer.
    ScratchVector<ScratchVector<int64_t>> kept(static_cast<size_t>(batch * classes),
                                               ScratchVector<int64_t>(io.Allocator<int64_t>()),
                                               io.Allocator<ScratchVector<int64_t>>());
    io.ParallelFor(kept.size(), [&](size_t pair) {
      const int64_t b = static_cast<int64_t>(pair) / classes;
      const Boxes batch_boxes{rects.data() + b * count, compat_ ? raw.data() + b * count : nullptr,
                              proper.data() + b * count, compat_ ? point_group.data() + b * count : nullptr,
                              compat_ ? point_groups[static_cast<size_t>(b)] : 0};
      const T* score = scores.data + static_cast<int64_t>(pair) * count;
      if (use_grid) {
        SelectOneClassWithGrid(io, batch_boxes, bounds.data() + 4 * b * count, score, count, kept[pair]);
      } else {
        SelectOneClass(io, batch_boxes, score, count, kept[pair]);
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
  using RawBox = mmdeploy_rotated::RawBox<T>;

  // One image's boxes: all as rectangles, and in mmdeploy's domain also in raw form, with
  // whether each is proper (always, in ortops' domain) and, for points, their group.
  struct Boxes {
    const RotatedRect* rects;
    const RawBox* raw;
    const char* proper;
    const int64_t* point_group;  // -1: not a point
    int64_t point_groups;
  };

  // Numbers the points (w = h = 0) among `count` boxes by their centre's bits, from 0; other
  // boxes get -1. Returns how many groups.
  static int64_t GroupPoints(const KernelIO& io, const T* box, int64_t count, int64_t* group) {
    using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
    const auto centre = [&](int64_t i) {
      return std::pair{std::bit_cast<Bits>(box[5 * i]), std::bit_cast<Bits>(box[5 * i + 1])};
    };
    ScratchVector<int64_t> points(io.Allocator<int64_t>());
    for (int64_t i = 0; i < count; ++i) {
      group[i] = -1;
      if (box[5 * i + 2] == T(0) && box[5 * i + 3] == T(0)) points.push_back(i);
    }
    std::sort(points.begin(), points.end(), [&](int64_t a, int64_t b) { return centre(a) < centre(b); });
    int64_t groups = 0;
    for (size_t p = 0; p < points.size(); ++p) {
      if (p > 0 && centre(points[p]) != centre(points[p - 1])) ++groups;
      group[points[p]] = groups;
    }
    return points.empty() ? 0 : groups + 1;
  }

  // Whether kept box k suppresses box i: the exact IoU, or, in mmdeploy's domain when either
  // box is not proper, the original's float32 IoU of (k, i) compared as it compares it.
  bool Suppresses(const Boxes& boxes, int64_t k, int64_t i) const {
    return nms_rotated::Suppresses(boxes.rects, boxes.raw, boxes.proper, k, i, attributes_.iou_threshold);
  }

  // Greedy NMS testing each box against the kept boxes whose bounds share a grid cell with it.
  // The kept set is the same as the plain scan's; kept boxes at or below the score threshold
  // stay in the grid (they suppress) but are not emitted. Boxes that are not proper can
  // suppress or be suppressed by boxes anywhere: a kept one is tested by every later box, and
  // one that is not kept tests every kept box. Points of one group decide alike: a kept
  // group is tested through its first kept point only, and a point tests only the kept boxes
  // that came after the last point of its group was tested (a group suppressed once stays
  // suppressed), so that hundreds of zero rows cost little more than one.
  void SelectOneClassWithGrid(const KernelIO& io, const Boxes& boxes, const double* bounds, const T* score,
                              int64_t count, ScratchVector<int64_t>& kept) const {
    const T score_threshold = static_cast<T>(attributes_.score_threshold);
    BoxGrid<double, SessionAllocator<double>> grid(bounds, count, 0.0, io.Allocator<double>());
    // A kept box spanning several cells is visited once per shared cell: test it only once.
    ScratchVector<int64_t> tested_for = io.Vector<int64_t>(static_cast<size_t>(count), -1);
    ScratchVector<int64_t> all_kept(io.Allocator<int64_t>()), improper_kept(io.Allocator<int64_t>());
    // Per point group: how many of all_kept its points have tested (-1: suppressed), and
    // whether one of them is kept.
    ScratchVector<int64_t> group_tested = io.Vector<int64_t>(static_cast<size_t>(boxes.point_groups));
    ScratchVector<char> group_kept = io.Vector<char>(static_cast<size_t>(boxes.point_groups));
    for (const int64_t i : ScoreOrder(io, score, count)) {
      const auto suppresses = [&](int64_t k) { return Suppresses(boxes, k, i); };
      const int64_t group = boxes.point_group != nullptr ? boxes.point_group[i] : -1;
      bool suppressed;
      if (boxes.proper[i]) {
        suppressed =
            std::any_of(improper_kept.begin(), improper_kept.end(), suppresses) || grid.AnyNear(i, [&](int64_t k) {
              int64_t& last = tested_for[static_cast<size_t>(k)];
              if (last == i) return false;
              last = i;
              return suppresses(k);
            });
      } else if (group >= 0) {
        int64_t& tested = group_tested[static_cast<size_t>(group)];
        suppressed = tested < 0 || std::any_of(all_kept.begin() + tested, all_kept.end(), suppresses);
        tested = suppressed ? -1 : static_cast<int64_t>(all_kept.size());
      } else {
        suppressed = std::any_of(all_kept.begin(), all_kept.end(), suppresses);
      }
      if (suppressed) continue;
      if (boxes.proper[i]) {
        grid.Insert(i);
      } else if (group < 0 || !group_kept[static_cast<size_t>(group)]) {
        improper_kept.push_back(i);
        if (group >= 0) group_kept[static_cast<size_t>(group)] = 1;
      }
      if (compat_) all_kept.push_back(i);
      if (score[i] > score_threshold) kept.push_back(i);
    }
  }

  // The same selection as a plain scan of every later box, for negative thresholds (where
  // even disjoint boxes suppress each other) and bounds that overflow.
  void SelectOneClass(const KernelIO& io, const Boxes& boxes, const T* score, int64_t count,
                      ScratchVector<int64_t>& kept) const {
    const ScratchVector<int64_t> order = ScoreOrder(io, score, count);
    ScratchVector<char> suppressed = io.Vector<char>(static_cast<size_t>(count));  // by rank
    const T score_threshold = static_cast<T>(attributes_.score_threshold);
    for (size_t rank = 0; rank < order.size(); ++rank) {
      if (suppressed[rank]) continue;
      for (size_t later = rank + 1; later < order.size(); ++later) {
        if (!suppressed[later] && Suppresses(boxes, order[rank], order[later])) suppressed[later] = 1;
      }
      if (score[order[rank]] > score_threshold) kept.push_back(order[rank]);
    }
  }

  NmsRotatedAttributes attributes_;
  bool compat_;  // mmdeploy's node: pairs with a degenerate box take the original's arithmetic
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<NmsRotatedKernel, float, double>(def); }

}  // namespace ortops::nms_rotated
