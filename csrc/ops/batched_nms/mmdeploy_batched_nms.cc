// mmdeploy's TensorRT batched NMS nodes, TRTBatchedNMS and TRTBatchedRotatedNMS, with the
// contract of their plugins (mmdeploy csrc/mmdeploy/backend_ops/tensorrt/batched_nms,
// batched_rotated_nms and common_impl/nms, derived from TensorRT's batchedNMSPlugin).
#include "ops/batched_nms/mmdeploy_batched_nms.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>

#include "math/box_grid.h"
#include "math/box_iou.h"
#include "math/mmdeploy_rotated_iou.h"
#include "math/multiclass_nms.h"
#include "math/rotated_box.h"
#include "ops/batched_nms/batched_nms.h"
#include "ops/batched_nms/box_layout.h"
#include "ops/nms/group_index.h"

namespace ortops::batched_nms {
namespace {

constexpr AttrSpec kTrtAttributes[] = {
    {"num_classes", AttrType::kInt, "", "the number of classes; must equal the last dimension of `scores`"},
    {"background_label_id", AttrType::kInt, "0",
     "a class that never gives a detection; -1 (or any id outside [0, C)): none. mmdeploy writes -1; 0 is "
     "the plugin's value when the attribute is absent"},
    {"iou_threshold", AttrType::kFloat, "0.0",
     "a candidate is suppressed when its IoU with a kept box of its class is strictly greater than this"},
    {"score_threshold", AttrType::kFloat, "0.0", "only scores strictly greater than this are candidates"},
    {"topk", AttrType::kInt, "0", "per class, only the best this many candidates enter NMS; <= 0 or > N: all"},
    {"keep_topk", AttrType::kInt, "", "detections per image: the outputs' second dimension (>= 0)"},
    {"is_normalized", AttrType::kInt, "0", "0 or 1; changes nothing (the plugin's IoU is the same either way)"},
    {"clip_boxes", AttrType::kInt, "1",
     "1: output box values are clamped to [0, 1] (mmdeploy writes 0; 1 is the plugin's value when absent)"},
};
constexpr AttrSpec kAttributes[] = {
    kTrtAttributes[0],
    kTrtAttributes[1],
    kTrtAttributes[2],
    kTrtAttributes[3],
    kTrtAttributes[4],
    kTrtAttributes[5],
    kTrtAttributes[6],
    kTrtAttributes[7],
    {"return_index", AttrType::kInt, "0", "1: the node has the third output `index`; 0: it has two outputs"},
};

constexpr IoSpec kInputs[] = {
    {"boxes", ElemType::kTypeParam,
     "`[B, N, 1, 4]` boxes shared by every class, or `[B, N, num_classes, 4]` one box per class; as (x1, y1, "
     "x2, y2)"},
    {"scores", ElemType::kTypeParam, "`[B, N, num_classes]` score of each box for each class"},
};
constexpr IoSpec kOutputs[] = {
    {"dets", ElemType::kTypeParam, "`[B, keep_topk, 5]` rows (x1, y1, x2, y2, score), descending score; padding 0"},
    {"labels", ElemType::kInt64, "`[B, keep_topk]` class of each detection; padding -1"},
    {"index", ElemType::kInt64,
     "`[B, keep_topk]` (only with `return_index` 1) the detection's box: n for shared boxes, c * N + n for "
     "per-class boxes; padding -1",
     true},
};

constexpr IoSpec kRotatedInputs[] = {
    {"boxes", ElemType::kTypeParam,
     "`[B, N, 1, 5]` rotated boxes (cx, cy, w, h, theta), theta in radians, shared by every class, or "
     "`[B, N, num_classes, 5]` one per class"},
    {"scores", ElemType::kTypeParam, "`[B, N, num_classes]` score of each box for each class"},
};
constexpr IoSpec kRotatedOutputs[] = {
    {"dets", ElemType::kTypeParam,
     "`[B, keep_topk, 6]` rows (cx, cy, w, h, theta, score), descending score; padding 0"},
    {"labels", ElemType::kInt64, "`[B, keep_topk]` class of each detection; padding -1"},
};

#define ORTOPS_TRT_BATCHED_NMS_SELECTION                                                                         \
  "Per image, every (box, class) whose score is strictly greater than `score_threshold` is a candidate, except " \
  "for `background_label_id`. In each class the best `topk` candidates (all when `topk` <= 0 or > N) go "        \
  "through greedy NMS in descending score order (equal scores: lower box index first); a candidate is "          \
  "suppressed when its IoU with a kept one of its class is strictly greater than `iou_threshold`. The image's "  \
  "detections are the best `keep_topk` kept candidates of all classes, by descending score; equal scores are "   \
  "ordered by class, then box index (the plugin's stable sort of per-class lists). NaN scores are never "        \
  "candidates. "

#define ORTOPS_TRT_BATCHED_NMS_DIFFERENCES_COMMON                                                           \
  "The plugin takes float32 only; ortops also takes float64. The plugin writes `labels` (and `index`) as "  \
  "int32, but the file mmdeploy exports declares them int64 (the types of its PyTorch stand-in), and ONNX " \
  "Runtime refuses a node whose outputs differ from the file's declared types: ortops writes int64. The "   \
  "plugin's NMS holds at most 5120 candidates per class (a `topk` above that, or `topk` <= 0 with N > "     \
  "5120, fails its assertion) and it needs B * N * C < 2^31; ortops has neither limit. Where `keep_topk` "  \
  "is larger than `topk` (after `topk` is limited to N), the plugin returns without writing its outputs "   \
  "(they hold whatever the memory held); ortops fills them as always. With a negative `score_threshold` "   \
  "the plugin sorts its non-candidates (set to score 0) among the candidates, which skips NMS or emits "    \
  "padding rows between detections; ortops keeps its rule (candidates are the scores above the "            \
  "threshold). "

}  // namespace

constexpr OpSchema kTrtSchema{
    .doc =
        "mmdeploy's batched multi-class NMS for TensorRT (`TRTBatchedNMSop`, written by mmdeploy's TensorRT "
        "export of `multiclass_nms`), with fixed-size, padded outputs. " ORTOPS_TRT_BATCHED_NMS_SELECTION
        "The IoU is the plugin's: no +1 offset (whatever `is_normalized`), 0 unless the boxes overlap with "
        "positive width and height, and an inverted box (x2 < x1 or y2 < y1) has area 0; a box with a NaN "
        "coordinate gets IoU 0 or NaN, neither above a threshold >= 0. With `clip_boxes` 1 the output box coordinates "
        "(not the score) are clamped to [0, 1], "
        "a NaN becoming 1 as CUDA's fminf/fmaxf make it. `index` holds, for boxes shared by the classes, "
        "the box index n; for per-class boxes, c * N + n (the plugin's index into its "
        "class-major copy of the boxes). The node has the third output exactly when `return_index` is 1.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = kAttributes,
    .differences = ORTOPS_TRT_BATCHED_NMS_DIFFERENCES_COMMON
    "The IoU is the plugin's formula in the element type: a float32 decision can differ from the GPU's only "
    "where an IoU lies within rounding of the threshold. On the GPU, fminf/fmaxf drop a NaN box coordinate, "
    "which gives other overlaps than here. Otherwise the selection, order, padding and "
    "encoding are the plugin's.",
};

constexpr OpSchema kTrtRotatedSchema{
    .doc =
        "mmdeploy's batched multi-class NMS of rotated boxes for TensorRT (`TRTBatchedRotatedNMSop`, "
        "written by mmdeploy's TensorRT export of `multiclass_nms_rotated`, e.g. for mmrotate models), "
        "with fixed-size, padded outputs. " ORTOPS_TRT_BATCHED_NMS_SELECTION
        "The IoU of rotated boxes is the plugin's: 1 when the w h of either box (in the element type) is "
        "below 1e-14 (a box of zero size, a negative side or tiny sides), so that such a box, kept, "
        "suppresses every later box of its class wherever it is (unless `iou_threshold` >= 1), and later "
        "is suppressed by any kept box; otherwise exact, as ortops.NMSRotated computes it: the rectangle "
        "of (cx, cy, w, h, theta) has corners (cx, cy) + R(theta) (+-w/2, +-h/2), R = [[cos, -sin], [sin, "
        "cos]] (sides both negative give the same corners as their absolute values), and the area of the "
        "intersection of two rectangles is found by polygon clipping in float64; a box with a NaN size is "
        "empty and has IoU 0 with every box. With `clip_boxes` 1 all five box values (theta too, as in the "
        "plugin) are clamped to [0, 1], a NaN becoming 1.",
    .inputs = kRotatedInputs,
    .outputs = kRotatedOutputs,
    .attributes = kTrtAttributes,
    .differences = ORTOPS_TRT_BATCHED_NMS_DIFFERENCES_COMMON
    "The plugin computes the rotated IoU of boxes that are not tiny in float32 on the GPU, by intersecting "
    "edges and taking a convex hull; ortops computes it exactly in float64, so results differ where such an "
    "IoU lies within float32 rounding of the threshold (with sides below about 1e-3, the plugin's fixed "
    "tolerances move its IoU further). Tiny boxes are the plugin's (IoU 1). Otherwise the selection, order, "
    "padding and encoding are the plugin's.",
};

#undef ORTOPS_TRT_BATCHED_NMS_SELECTION
#undef ORTOPS_TRT_BATCHED_NMS_DIFFERENCES_COMMON

namespace {

// The group index of math/multiclass_nms.h for rotated boxes: kept ones in a grid over their
// axis-aligned bounds (the exact IoU of rectangles whose bounds do not overlap is 0), kept
// tiny ones as a flag (IoU 1 with every box). `slot_of` maps a candidate to its rectangle
// and tiny flag.
template <typename Candidate, typename SlotOf>
class RotatedGroupIndex {
 public:
  RotatedGroupIndex(const KernelIO& io, std::span<const Candidate> set, SlotOf slot_of, const RotatedRect* rects,
                    const char* tiny, double threshold)
      : slot_of_(slot_of),
        rects_(rects),
        tiny_(tiny),
        threshold_(threshold),
        slots_(io.Vector<size_t>(set.size())),
        tested_for_(io.Vector<int64_t>(set.size(), -1)),
        bounds_(io.Allocate<double>(4 * set.size())) {
    for (size_t i = 0; i < set.size(); ++i) slots_[i] = slot_of_(set[i]);
    std::sort(slots_.begin(), slots_.end());
    bool finite = true;
    for (size_t i = 0; i < set.size(); ++i) {
      const RotatedRect& r = rects_[slots_[i]];
      double* bound = bounds_.data() + 4 * i;
      bound[0] = r.center.x - r.half_x, bound[1] = r.center.y - r.half_y;
      bound[2] = r.center.x + r.half_x, bound[3] = r.center.y + r.half_y;
      for (int k = 0; k < 4; ++k) finite &= std::isfinite(bound[k]);
    }
    if (finite && threshold >= 0) {
      grid_.emplace(bounds_.data(), static_cast<int64_t>(set.size()), 0.0, io.Allocator<double>());
    }
  }

  bool Usable() const { return grid_.has_value(); }

  bool Suppressed(const Candidate& candidate) {
    const size_t slot = slot_of_(candidate);
    if (tiny_kept_ || (tiny_[slot] && any_kept_)) return 1.0 > threshold_;
    if (tiny_[slot]) return false;
    const auto i = Local(slot);
    return grid_->AnyNear(i, [&](int64_t k) {
      // A kept box spanning several cells is visited once per shared cell: test it once.
      int64_t& last = tested_for_[static_cast<size_t>(k)];
      if (last == i) return false;
      last = i;
      return RotatedIoU(rects_[slots_[static_cast<size_t>(k)]], rects_[slot]) > threshold_;
    });
  }

  void Keep(const Candidate& candidate) {
    const size_t slot = slot_of_(candidate);
    any_kept_ = true;
    if (tiny_[slot]) {
      tiny_kept_ = true;
    } else {
      grid_->Insert(Local(slot));
    }
  }

 private:
  // The candidate's position among the set's rectangles, which the grid is over.
  int64_t Local(size_t slot) const { return std::lower_bound(slots_.begin(), slots_.end(), slot) - slots_.begin(); }

  SlotOf slot_of_;
  const RotatedRect* rects_;
  const char* tiny_;
  double threshold_;
  ScratchVector<size_t> slots_;  // the set's rectangles, sorted
  ScratchVector<int64_t> tested_for_;
  Scratch<double> bounds_;  // of the set's rectangles, which the grid reads
  std::optional<BoxGrid<double, SessionAllocator<double>>> grid_;
  bool any_kept_ = false, tiny_kept_ = false;
};

template <typename T, bool kRotated>
class TrtBatchedNmsKernel : public KernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = kRotated ? kTrtRotatedSchema : kTrtSchema;
  static constexpr int64_t kBoxSize = kRotated ? 5 : 4;

  TrtBatchedNmsKernel(const Attributes& attrs, const OpDef& def) : KernelBase(def), attributes_(attrs, kRotated) {}

  void Compute(const KernelIO& io) const {
    const TrtBatchedNmsIo<T, kBoxSize> in(io, attributes_);
    const TrtBatchedNmsRows<T, kBoxSize> out(io, in, attributes_);
    const int64_t batch = in.batch, count = in.count, classes = in.classes, rows = attributes_.keep_topk;
    const BoxLayout<T>& layout = in.layout;
    const MulticlassNmsConfig config = attributes_.Config();

    const T score_threshold = static_cast<T>(attributes_.score_threshold);
    const auto passes = [score_threshold](T score) { return score > score_threshold; };
    const auto score_at = [&](int64_t b, int64_t n, int64_t c) {
      return in.scores.data[(b * count + n) * classes + c];
    };
    const auto emit = [&](int64_t b, std::span<const NmsCandidate<T>> detections) {
      const int64_t first = b * rows;
      for (size_t i = 0; i < detections.size(); ++i) out.Write(b, first + static_cast<int64_t>(i), detections[i]);
      for (int64_t row = first + static_cast<int64_t>(detections.size()); row < first + rows; ++row) out.Pad(row);
    };

    if constexpr (kRotated) {
      // Corners and bounds of every box once; pairs only read them. The plugin's IoU is 1 for
      // a pair with a tiny box (mmdeploy_rotated::TrtRotatedTiny), else that of the two
      // rectangles, which for sides of either sign are those of their absolute values.
      const auto total = static_cast<size_t>(batch * count * layout.per_class);
      Scratch<RotatedRect> rects = io.Allocate<RotatedRect>(total);
      Scratch<char> tiny = io.Allocate<char>(total);
      io.ParallelForRanges(total, 64, [&](size_t begin, size_t end) {
        for (size_t i = begin; i < end; ++i) {
          PrepareTrtRotatedBox(in.boxes.data + 5 * i, *std::construct_at(&rects[i]), tiny[i]);
        }
      });
      const double threshold = attributes_.iou_threshold;
      const TrtRotatedTest<T> test{rects.data(), tiny.data(), count, layout.per_class, threshold};
      const auto suppresses = [&](int64_t b, const NmsCandidate<T>& kept, const NmsCandidate<T>& candidate) {
        return test.Suppresses(b, kept, candidate);
      };
      const auto make_index = [&](int64_t b, std::span<const NmsCandidate<T>> set) {
        return RotatedGroupIndex(
            io, set, [&, b](const NmsCandidate<T>& c) { return static_cast<size_t>(test.Slot(b, c)); }, rects.data(),
            tiny.data(), threshold);
      };
      MulticlassNmsIndexed<T>(
          io, config, batch, count, classes, passes, score_at, [](T score) { return score; }, suppresses, emit,
          make_index);
    } else {
      const T threshold = static_cast<T>(attributes_.iou_threshold);
      const TrtBoxTest<T> test{layout, threshold};
      const auto suppresses = [&](int64_t b, const NmsCandidate<T>& kept, const NmsCandidate<T>& candidate) {
        return test.Suppresses(b, kept, candidate);
      };
      const auto make_index = [&](int64_t b, std::span<const NmsCandidate<T>> set) {
        const auto box_of = [&, b](const NmsCandidate<T>& c, T box[5]) {
          const T* v = layout.At(b, c.box, c.cls);
          box[0] = v[0], box[1] = v[1], box[2] = v[2], box[3] = v[3], box[4] = DetectionOutputArea(v);
        };
        return nms::MakeGridGroupIndex(io, set, box_of, nms::IouRule::kDetectionOutput, T(0), threshold);
      };
      MulticlassNmsIndexed<T>(
          io, config, batch, count, classes, passes, score_at, [](T score) { return score; }, suppresses, emit,
          make_index);
    }
  }

 private:
  TrtBatchedNmsAttributes attributes_;
};

template <typename T>
using TrtKernel = TrtBatchedNmsKernel<T, false>;
template <typename T>
using TrtRotatedKernel = TrtBatchedNmsKernel<T, true>;

}  // namespace

std::vector<OpPtr> MakeTrt(const OpDef& def) { return MakeOps<TrtKernel, float, double>(def); }
std::vector<OpPtr> MakeTrtRotated(const OpDef& def) { return MakeOps<TrtRotatedKernel, float, double>(def); }

}  // namespace ortops::batched_nms
