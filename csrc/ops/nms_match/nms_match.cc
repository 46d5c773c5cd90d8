// NMS that reports which kept box suppressed which (mmdeploy's NMSMatch).
#include "ops/nms_match/nms_match.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <vector>

#include "math/box_iou.h"

namespace ortops::nms_match {
namespace {

constexpr IoSpec kInputs[] = {
    {"boxes", ElemType::kTypeParam, "`[B, N, 4]` boxes as (x1, y1, x2, y2)"},
    {"scores", ElemType::kTypeParam, "`[B, C, N]` scores per batch, class and box"},
    {"iou_threshold", ElemType::kFloat, "`[1]` a box is suppressed when its IoU with a kept box is at least this"},
    {"score_threshold", ElemType::kFloat, "`[1]` only kept boxes scoring above this report their matches"},
};
constexpr IoSpec kOutputs[] = {
    {"matches", ElemType::kInt64, "`[K, 4]` rows (batch, class, kept box, box it suppressed)"},
};

// Where each compatibility name's node differs from the runtime that defined it.
constexpr CompatDifferences kCompatDifferences[] = {
    {"mmdeploy",
     "mmdeploy's kernel sorted each class's boxes with an unstable sort, so among equal scores the order "
     "of kept boxes, and which of two overlapping ones was kept, was unspecified; ortops takes the lower "
     "index first. It computed on with NaN; ortops reports it as an error. It took float32 only; ortops "
     "also takes float64 boxes and scores (with the same float32 rounding of each IoU)."},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "Greedy NMS per batch and class, in descending score order (ties: lower index first), with "
        "IoU = inter / (area1 + area2 - inter + 1e-10) and no offset, rounded to float32 as in the "
        "original (so an IoU equal to the threshold but for the 1e-10 still reaches it; a NaN IoU "
        "from infinite boxes suppresses nothing), in both dtypes; a box is suppressed when its IoU "
        "with a kept box is at least `iou_threshold`. For each kept box scoring above "
        "`score_threshold` that suppressed any box, one row (batch, class, kept, suppressed) per "
        "suppressed box, in suppression order; rows per batch, then class, then kept box. Kept boxes "
        "at or below `score_threshold` still suppress. (The original sorted with an unstable sort, so "
        "its order among equal scores was unspecified.) NaN in the inputs is an error.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = {},
    .compat_differences = kCompatDifferences,
};

namespace {

float SingleValue(const KernelIO& io, size_t index, const char* name) {
  const ConstTensor<float> t = io.Input<float>(index);
  Check(t.size() == 1, "input '", name, "' must hold one value, got shape ", ShapeText{t.shape});
  Check(!std::isnan(t.data[0]), "input '", name, "' is NaN");
  return t.data[0];
}

template <typename T>
class NmsMatchKernel : public KernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = nms_match::kSchema;

  NmsMatchKernel(const Attributes&, const OpDef& def) : KernelBase(def) {}

  void Compute(const KernelIO& io) const {
    const ConstTensor<T> boxes = io.Input<T>(0, 3);
    const ConstTensor<T> scores = io.Input<T>(1, 3);
    const float iou_threshold = SingleValue(io, 2, "iou_threshold");
    const T score_threshold = static_cast<T>(SingleValue(io, 3, "score_threshold"));
    const int64_t batch = boxes.dim(0), count = boxes.dim(1), classes = scores.dim(1);
    Check(boxes.dim(2) == 4, "input 'boxes' must have shape [B, N, 4], got ", ShapeText{boxes.shape});
    Check(scores.dim(0) == batch && scores.dim(2) == count, "input 'scores' must have shape [B, C, N] = [", batch,
          ", C, ", count, "], got ", ShapeText{scores.shape});
    for (int64_t i = 0; i < boxes.size(); ++i) Check(!std::isnan(boxes.data[i]), "input 'boxes' contains NaN");
    for (int64_t i = 0; i < scores.size(); ++i) Check(!std::isnan(scores.data[i]), "input 'scores' contains NaN");
    if (scores.size() == 0) {  // no box or no class: no match, and B * C may be huge
      io.Output<int64_t>(0, {0, 4});
      return;
    }

    using Rows = ScratchVector<std::array<int64_t, 4>>;
    ScratchVector<Rows> rows(static_cast<size_t>(batch * classes), Rows(io.Allocator<std::array<int64_t, 4>>()),
                             io.Allocator<Rows>());
    io.ParallelFor(rows.size(), [&](size_t task) {
      const int64_t b = static_cast<int64_t>(task) / classes, c = static_cast<int64_t>(task) % classes;
      const T* box = boxes.data + b * count * 4;
      const T* score = scores.data + (b * classes + c) * count;
      ScratchVector<int64_t> order = io.Vector<int64_t>(static_cast<size_t>(count));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return score[x] > score[y]; });
      ScratchVector<char> suppressed = io.Vector<char>(static_cast<size_t>(count));
      auto& out = rows[task];
      for (int64_t rank = 0; rank < count; ++rank) {
        const int64_t i = order[rank];
        if (suppressed[i]) continue;
        const size_t first_row = out.size();
        for (int64_t later = rank + 1; later < count; ++later) {
          const int64_t j = order[later];
          // Written as the original's test, so a NaN IoU (infinite boxes) suppresses nothing.
          if (suppressed[j] || !(MatchIoU(box + 4 * i, box + 4 * j) >= iou_threshold)) continue;
          suppressed[j] = 1;
          out.push_back({b, c, i, j});
        }
        if (!(score[i] > score_threshold)) out.resize(first_row);  // kept, but does not report
      }
    });
    int64_t total = 0;
    for (const auto& r : rows) total += static_cast<int64_t>(r.size());
    int64_t* matches = io.Output<int64_t>(0, {total, 4});
    for (const auto& r : rows) {
      for (const auto& row : r) matches = std::copy(row.begin(), row.end(), matches);
    }
  }
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<NmsMatchKernel, float, double>(def); }

}  // namespace ortops::nms_match
