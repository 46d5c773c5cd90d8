// Soft non-maximum suppression (Bodla et al.; mmcv's SoftNonMaxSuppression).
#include "ops/soft_nms/soft_nms.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "math/box_grid.h"
#include "math/box_iou.h"
#include "ops/nms/box_inputs.h"

namespace ortops::soft_nms {
namespace {

constexpr IoSpec kInputs[] = {nms::kBoxesInput, nms::kScoresInput};
constexpr IoSpec kOutputs[] = {
    {"dets", ElemType::kTypeParam, "`[K, 5]` the kept boxes in selection order, with their decayed scores"},
    {"indices", ElemType::kInt64, "`[K]` the kept boxes' indices into `boxes`"},
};
constexpr AttrSpec kAttributes[] = {
    {"iou_threshold", AttrType::kFloat, "0.3", "naive and linear methods decay boxes whose IoU is at least this"},
    {"sigma", AttrType::kFloat, "0.5", "gaussian method: weight exp(-IoU^2 / sigma); must be > 0"},
    {"min_score", AttrType::kFloat, "0.001", "a box whose decayed score falls below this is dropped"},
    {"method", AttrType::kInt, "1", "0 naive (weight 0), 1 linear (weight 1 - IoU), 2 gaussian"},
    {"offset", AttrType::kInt, "0", "0 or 1; 1 is the legacy convention where a box's width is x2 - x1 + 1"},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "Soft-NMS exactly as mmcv's kernel: repeatedly select the highest remaining score (the first "
        "in the working order on ties; the working order starts as the input order and changes as "
        "selected boxes are swapped to the front and dropped ones replaced by the last), then decay "
        "every other remaining box by w: naive w = 0 if IoU >= iou_threshold, linear w = 1 - IoU if "
        "IoU >= iou_threshold, gaussian w = exp(-IoU^2 / sigma); others keep w = 1. A box whose "
        "decayed score is below `min_score` is dropped. As in the original, the first selected box is "
        "kept even if its score is below `min_score`. IoU uses areas `(x2 - x1 + offset) * (y2 - y1 + "
        "offset)`. NaN in the inputs is an error.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = kAttributes,
};

namespace {

// The original's next pick: the highest score, then the lowest position in the working
// list. A 4-ary heap of (score, position) snapshots of the remaining boxes: scores only
// fall, so a snapshot ranks its box no lower than it should, as long as a box that moves
// to a lower position is pushed again (Push). A current snapshot at the top is then the
// pick; a stale one is refreshed in place. Decays thus cost nothing here.
template <typename T>
class SelectionQueue {
 public:
  SelectionQueue(const std::vector<T>& score, const std::vector<int64_t>& position)
      : score_(score), position_(position) {
    heap_.reserve(2 * score.size());
    for (size_t k = 0; k < score.size(); ++k) heap_.push_back(Current(static_cast<int64_t>(k)));
    for (size_t k = heap_.size() / kArity + 1; k-- > 0;) SiftDown(k);
  }

  void Push(int64_t id) {
    size_t k = heap_.size();
    heap_.push_back(Current(id));
    const Snapshot moving = heap_[k];
    while (k > 0 && Before(moving, heap_[(k - 1) / kArity])) {
      heap_[k] = heap_[(k - 1) / kArity];
      k = (k - 1) / kArity;
    }
    heap_[k] = moving;
  }

  // The pick among the boxes for which remaining(id) holds; there must be one.
  template <typename Remaining>
  int64_t Pop(Remaining&& remaining) {
    for (;;) {
      Snapshot& top = heap_[0];
      const int64_t id = top.id;
      const bool current = top.score == score_[id] && top.position == position_[id];
      if (remaining(id) && !current) {
        top = Current(id);
      } else {
        top = heap_.back();
        heap_.pop_back();
      }
      SiftDown(0);
      if (remaining(id) && current) return id;
    }
  }

 private:
  static constexpr size_t kArity = 4;

  struct Snapshot {
    T score;
    int32_t position, id;  // the kernel takes fewer than 2^31 boxes
  };

  Snapshot Current(int64_t id) const {
    return {score_[id], static_cast<int32_t>(position_[id]), static_cast<int32_t>(id)};
  }
  static bool Before(const Snapshot& a, const Snapshot& b) {
    return a.score > b.score || (a.score == b.score && a.position < b.position);
  }

  void SiftDown(size_t k) {
    const size_t size = heap_.size();
    if (k >= size) return;
    const Snapshot moving = heap_[k];
    for (;;) {
      const size_t first = kArity * k + 1;
      if (first >= size) break;
      size_t best = first;
      for (size_t child = first + 1; child < std::min(first + kArity, size); ++child) {
        if (Before(heap_[child], heap_[best])) best = child;
      }
      if (!Before(heap_[best], moving)) break;
      heap_[k] = heap_[best];
      k = best;
    }
    heap_[k] = moving;
  }

  const std::vector<T>& score_;
  const std::vector<int64_t>& position_;
  std::vector<Snapshot> heap_;
};

template <typename T>
class SoftNmsKernel : public KernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = soft_nms::kSchema;

  SoftNmsKernel(const Attributes& attrs, const OpDef& def)
      : KernelBase(def),
        iou_threshold_(attrs.Float("iou_threshold")),
        sigma_(attrs.Float("sigma")),
        min_score_(attrs.Float("min_score")),
        method_(attrs.Int("method")),
        offset_(attrs.Int("offset")) {
    Check(method_ >= 0 && method_ <= 2, "attribute 'method' must be 0 (naive), 1 (linear) or 2 (gaussian), got ",
          method_);
    Check(offset_ == 0 || offset_ == 1, "attribute 'offset' must be 0 or 1, got ", offset_);
    Check(method_ != 2 || sigma_ > 0, "attribute 'sigma' must be > 0 for the gaussian method, got ", sigma_);
    Check(!std::isnan(iou_threshold_) && !std::isnan(min_score_),
          "attributes 'iou_threshold' and 'min_score' must not be NaN");
  }

  void Compute(const KernelIO& io) const {
    const auto [boxes, scores] = nms::BoxesAndScores<T>(io);
    const int64_t count = boxes.dim(0);
    Check(count < (int64_t{1} << 31), "input 'boxes' has ", count, " boxes; at most 2^31 - 1 are supported");

    const T offset = static_cast<T>(offset_);
    // Infinite scores (inf * 0) and infinite areas (inf / inf) make NaN scores, which the heap
    // cannot order as the original's scan does: those inputs take the all-pairs path.
    bool indexed = method_ == 2 || iou_threshold_ > 0;
    for (int64_t i = 0; i < count && indexed; ++i) {
      const T* b = boxes.data + 4 * i;
      indexed = std::isfinite(b[0]) && std::isfinite(b[1]) && std::isfinite(b[2]) && std::isfinite(b[3]) &&
                b[2] - b[0] + offset > 0 && b[3] - b[1] + offset > 0 && std::isfinite(BoxArea(b, offset)) &&
                std::isfinite(scores.data[i]);
    }
    std::vector<int64_t> selected;
    selected.reserve(static_cast<size_t>(count));
    std::vector<T> score(scores.data, scores.data + count);
    if (indexed) {
      SelectIndexed(boxes.data, count, score, selected);
    } else {
      SelectAllPairs(boxes.data, count, score, selected);
    }
    // A selected box's score no longer changes: it is its decayed score at selection.
    const auto kept = static_cast<int64_t>(selected.size());
    T* dets = io.Output<T>(0, {kept, 5});
    int64_t* indices = io.Output<int64_t>(1, {kept});
    for (int64_t i = 0; i < kept; ++i) {
      const int64_t id = selected[i];
      for (int k = 0; k < 4; ++k) dets[5 * i + k] = boxes.data[4 * id + k];
      dets[5 * i + 4] = score[id];
      indices[i] = id;
    }
  }

 private:
  // The original algorithm step by step: scan for the maximum, swap it to the front, decay
  // every remaining box, drop by moving the last box into the gap. O(N^2); used when a
  // box that does not overlap the selected one can still change (a threshold <= 0 in the
  // naive or linear method, empty or infinite boxes whose IoU is NaN, infinite scores).
  // `selected` receives the box ids in selection order; `score` ends decayed.
  void SelectAllPairs(const T* boxes, int64_t count, std::vector<T>& score, std::vector<int64_t>& selected) const {
    const T offset = static_cast<T>(offset_);
    std::vector<int64_t> work(static_cast<size_t>(count));
    std::vector<T> area(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) work[i] = i, area[i] = BoxArea(boxes + 4 * i, offset);
    const T min_score = static_cast<T>(min_score_);
    for (int64_t i = 0; i < count; ++i) {
      int64_t best = i;
      for (int64_t pos = i + 1; pos < count; ++pos) {
        if (score[work[best]] < score[work[pos]]) best = pos;
      }
      std::swap(work[i], work[best]);
      const int64_t sel = work[i];
      selected.push_back(sel);
      for (int64_t pos = i + 1; pos < count; ++pos) {
        const int64_t other = work[pos];
        score[other] *= Weight(BoxIoU(boxes + 4 * sel, area[sel], boxes + 4 * other, area[other], offset));
        if (score[other] < min_score) {
          work[pos] = work[count - 1];  // drop it: the last box takes its place and is visited next
          --count;
          --pos;
        }
      }
    }
  }

  // The same selections in about O(N log N + overlapping pairs), when only boxes
  // overlapping the selected one can change: every box has a positive area (so a pair that
  // does not overlap has IoU exactly 0) and IoU 0 keeps weight 1. A lazy heap ordered as
  // the original's scan picks the next box; a grid finds the remaining overlapping ones;
  // drops replay the original's move-the-last-box order, which decides later ties.
  void SelectIndexed(const T* boxes, int64_t count, std::vector<T>& score, std::vector<int64_t>& selected) const {
    const T offset = static_cast<T>(offset_);
    const T min_score = static_cast<T>(min_score_);
    std::vector<int64_t> work(static_cast<size_t>(count)), position(static_cast<size_t>(count));
    std::vector<T> area(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) work[i] = position[i] = i, area[i] = BoxArea(boxes + 4 * i, offset);
    SelectionQueue<T> queue(score, position);
    PackedBoxGrid<T> grid(boxes, count, offset);
    std::vector<int64_t> drops, drop_positions;
    std::vector<char> dropping(static_cast<size_t>(count), 0), remaining(static_cast<size_t>(count), 1);
    for (int64_t i = 0; i < count; ++i) {
      // Remaining boxes hold positions [i, count); selected ones lower, dropped ones -1.
      const int64_t sel = queue.Pop([&](int64_t k) { return remaining[k] != 0; });
      const int64_t best = position[sel], displaced = work[i];
      work[best] = displaced, position[displaced] = best;  // a higher position: no push
      work[i] = sel, position[sel] = i;
      selected.push_back(sel);

      drops.clear();
      remaining[sel] = 0;
      grid.Remove(sel);
      const T* chosen = boxes + 4 * sel;
      grid.ForEachOverlapping(sel, [&](int64_t k) {
        // Boxes that do not overlap have IoU 0 and keep weight 1 (see above).
        score[k] *= Weight(BoxIoU(chosen, area[sel], boxes + 4 * k, area[k], offset));
        if (score[k] < min_score) drops.push_back(k), dropping[k] = 1;
      });
      if (i == 0) {  // the first pass also drops boxes that start below min_score
        for (int64_t pos = 1; pos < count; ++pos) {
          const int64_t k = work[pos];
          if (score[k] < min_score && !dropping[k]) drops.push_back(k), dropping[k] = 1;
        }
      }
      drop_positions.clear();
      for (int64_t k : drops) drop_positions.push_back(position[k]);
      std::sort(drop_positions.begin(), drop_positions.end());
      for (int64_t p : drop_positions) {
        while (p < count && dropping[work[p]]) {
          const int64_t victim = work[p];
          dropping[victim] = 0, remaining[victim] = 0;
          position[victim] = -1;
          grid.Remove(victim);
          const int64_t last = work[--count];
          if (p < count) {
            work[p] = last, position[last] = p;
            queue.Push(last);  // a lower position: its snapshots may rank it too low
          }
        }
      }
    }
  }

  T Weight(T iou) const {
    const T threshold = static_cast<T>(iou_threshold_), sigma = static_cast<T>(sigma_);
    switch (method_) {
      case 0: return iou >= threshold ? T(0) : T(1);
      case 1: return iou >= threshold ? T(1) - iou : T(1);
      default: return std::exp(-(iou * iou) / sigma);
    }
  }

  float iou_threshold_, sigma_, min_score_;
  int64_t method_, offset_;
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<SoftNmsKernel, float, double>(def); }

}  // namespace ortops::soft_nms
