// ONNX's NonMaxSuppression with ONNX Runtime's results, bit for bit: per (batch, class), the
// boxes scoring above the optional threshold are visited in the runtime's order
// (visit_order.h) and kept unless a kept box suppresses them (OnnxSuppresses, math/box_iou.h),
// up to max_output_boxes_per_class. The greedy pass is NMS's: kept boxes in a uniform grid,
// each candidate tested against the kept boxes that share a cell with it, in vector lanes
// (ops/nms/kept_box_grid.h), instead of against every kept box. (Sets of (batch, class) run
// on the session's threads.)
#include "ops/non_max_suppression/non_max_suppression.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "math/box_iou.h"
#include "math/score_order.h"
#include "ops/nms/kept_box_grid.h"
#include "ops/nms/suppress.h"
#include "ops/non_max_suppression/visit_order.h"

namespace ortops::non_max_suppression {

namespace {

using Box = OnnxNmsBox<float>;

// The box indices one (batch, class) keeps, in the order kept. `boxes` and `scores`: that
// batch's N boxes and that class's N scores.
ScratchVector<int64_t> KeepOneClass(const KernelIO& io, const Box* boxes, const float* scores,
                                    const NmsInputs<float>& in) {
  const int64_t count = in.count;
  ScratchVector<int64_t> order(io.Allocator<int64_t>());
  order.reserve(static_cast<size_t>(count));
  bool any_nan = false;
  for (int64_t i = 0; i < count; ++i) {
    if (in.score_threshold && !(scores[i] > *in.score_threshold)) continue;
    order.push_back(i);
    any_nan |= std::isnan(scores[i]);
  }
  const auto candidates = static_cast<int64_t>(order.size());
  if (any_nan) {
    VisitOrderOfHeap(order.data(), candidates, VisitsLater{scores});
  } else {
    // Comparable scores: descending, then index. The candidates are in index order, so a
    // stable order of their scores is the runtime's.
    Scratch<float> candidate_scores = io.Allocate<float>(order.size());
    for (size_t k = 0; k < order.size(); ++k) candidate_scores[k] = scores[order[k]];
    ScratchVector<int64_t> ranked = ScoreOrder(io, candidate_scores.data(), candidates);
    for (int64_t& k : ranked) k = order[static_cast<size_t>(k)];
    order.swap(ranked);
  }

  ScratchVector<int64_t> kept(io.Allocator<int64_t>());
  if (candidates == 0) return kept;
  kept.reserve(static_cast<size_t>(std::min(candidates, in.max_output)));
  // A box whose area is not finite neither suppresses nor is suppressed (OnnxSuppresses): it
  // is kept without a test and stays out of the grid, which needs finite boxes (an empty box
  // at the origin covers no cell).
  Scratch<float> corners = io.Allocate<float>(4 * order.size());
  for (size_t p = 0; p < order.size(); ++p) {
    const Box& box = boxes[order[p]];
    const bool finite = std::isfinite(box.area);
    corners[4 * p] = finite ? box.lo0 : 0.0f;
    corners[4 * p + 1] = finite ? box.lo1 : 0.0f;
    corners[4 * p + 2] = finite ? box.hi0 : 0.0f;
    corners[4 * p + 3] = finite ? box.hi1 : 0.0f;
  }
  // Suppression needs an intersection of positive width and height, so only boxes that share
  // a cell can suppress each other.
  nms::KeptBoxGrid<float> grid(io, corners.data(), candidates, 0.0f);
  for (int64_t p = 0; p < candidates && static_cast<int64_t>(kept.size()) < in.max_output; ++p) {
    const int64_t index = order[static_cast<size_t>(p)];
    const Box& box = boxes[index];
    if (!std::isfinite(box.area)) {
      kept.push_back(index);
      continue;
    }
    const nms::Candidate<float> candidate{box.lo0,  box.lo1, box.hi0,          box.hi1,
                                          box.area, 0.0f,    in.iou_threshold, nms::IouRule::kOnnx};
    if (grid.Suppresses(p, candidate)) continue;
    kept.push_back(index);
    grid.Insert(p, candidate);
  }
  return kept;
}

// ONNX Runtime's NonMaxSuppression takes float32 only; so does this one.
template <typename T>
class NonMaxSuppressionKernel : public KernelBase {
  static_assert(std::is_same_v<T, float>);

 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = non_max_suppression::kSchema;

  NonMaxSuppressionKernel(const Attributes& attrs, const OpDef& def) : KernelBase(def), attributes_(attrs) {}

  void Compute(const KernelIO& io) const {
    const NmsInputs<float> in = ReadInputs<float>(io);
    // (With no box or class, B * C may be huge: scores holds no value then.)
    if (in.max_output == 0 || in.batch == 0 || in.classes == 0 || in.count == 0) {
      io.Output<int64_t>(0, {0, 3});
      return;
    }
    const auto box_count = static_cast<size_t>(in.batch * in.count);
    Scratch<Box> boxes = io.Allocate<Box>(box_count);
    const bool center_point_box = attributes_.center_point_box == 1;
    io.ParallelForRanges(box_count, 64, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) boxes[i] = MakeOnnxNmsBox(in.boxes.data + 4 * i, center_point_box);
    });

    const int64_t segments = in.batch * in.classes;
    std::vector<ScratchVector<int64_t>, SessionAllocator<ScratchVector<int64_t>>> kept(
        static_cast<size_t>(segments), ScratchVector<int64_t>(io.Allocator<int64_t>()),
        io.Allocator<ScratchVector<int64_t>>());
    io.ParallelFor(static_cast<size_t>(segments), [&](size_t s) {
      const auto segment = static_cast<int64_t>(s);
      kept[s] =
          KeepOneClass(io, boxes.data() + segment / in.classes * in.count, in.scores.data + segment * in.count, in);
    });

    int64_t rows = 0;
    for (const auto& indices : kept) rows += static_cast<int64_t>(indices.size());
    int64_t* out = io.Output<int64_t>(0, {rows, 3});
    for (int64_t segment = 0; segment < segments; ++segment) {
      for (int64_t index : kept[static_cast<size_t>(segment)]) {
        *out++ = segment / in.classes;
        *out++ = segment % in.classes;
        *out++ = index;
      }
    }
  }

 private:
  NmsAttributes attributes_;
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<NonMaxSuppressionKernel, float>(def); }

}  // namespace ortops::non_max_suppression
