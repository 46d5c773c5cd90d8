// ortops' BatchedNMS: multi-class NMS per image with fixed-size, padded outputs.
#include "ops/batched_nms/batched_nms.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/half.h"
#include "math/box_iou.h"
#include "math/multiclass_nms.h"
#include "math/score_cutoff.h"
#include "ops/batched_nms/ortops_batched_nms.h"
#include "ops/nms/group_index.h"

namespace ortops::batched_nms {
namespace {

constexpr IoSpec kInputs[] = {
    {"boxes", ElemType::kTypeParam,
     "`[B, N, 4]` boxes shared by every class, or `[B, N, C, 4]` one box per class (`[B, N, 1, 4]` is "
     "shared too); as (x1, y1, x2, y2), or (cx, cy, w, h) with `box_coding` 1"},
    {"scores", ElemType::kTypeParam, "`[B, N, C]` score of each box for each class"},
};
constexpr IoSpec kOutputs[] = {
    {"num_detections", ElemType::kInt64, "`[B]` number of detections of each image (rows before the padding)"},
    {"detection_boxes", ElemType::kTypeParam,
     "`[B, max_output_boxes, 4]` boxes as (x1, y1, x2, y2) whatever `box_coding`; padding rows 0"},
    {"detection_scores", ElemType::kTypeParam,
     "`[B, max_output_boxes]` scores (activated with `score_activation`), descending; padding 0"},
    {"detection_classes", ElemType::kInt64, "`[B, max_output_boxes]` class of each detection; padding -1"},
    {"detection_indices", ElemType::kInt64, "`[B, max_output_boxes]` box index (into N) of each detection; padding -1"},
};
constexpr AttrSpec kAttributes[] = {
    {"iou_threshold", AttrType::kFloat, "0.5",
     "a candidate is suppressed when its IoU with a kept box of its group is strictly greater than this"},
    {"score_threshold", AttrType::kFloat, "0.0",
     "only scores strictly greater than this are candidates (with `score_activation`, the sigmoid of the "
     "score is compared)"},
    {"max_output_boxes", AttrType::kInt, "100", "detections per image: the outputs' second dimension (>= 0)"},
    {"pre_topk", AttrType::kInt, "-1",
     "per class (per image when class-agnostic), only the best this many candidates enter NMS; -1: all"},
    {"class_agnostic", AttrType::kInt, "0", "1: one NMS over all classes of an image; 0: one per class"},
    {"box_coding", AttrType::kInt, "0", "0: boxes are (x1, y1, x2, y2); 1: (cx, cy, w, h)"},
    {"score_activation", AttrType::kInt, "0", "1: scores are logits; sigmoid is applied before everything else"},
    {"background_class", AttrType::kInt, "-1",
     "a class that never gives a detection; -1 (or any id outside [0, C)): none"},
    {"offset", AttrType::kInt, "0",
     "0 or 1; 1 is the legacy convention where a box's width is x2 - x1 + 1 (for the IoU only)"},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "Multi-class non-maximum suppression per image, with outputs of fixed shape (a detection count "
        "and padded rows), as a detector's last step. Per image, every (box, class) whose score is "
        "strictly greater than `score_threshold` is a candidate, except for `background_class`. "
        "Candidates are grouped by class (all in one group with `class_agnostic`); in each group the "
        "best `pre_topk` go through greedy NMS in descending score order, a candidate being suppressed "
        "when its IoU with an already kept one is strictly greater than `iou_threshold`. The image's "
        "detections are the best `max_output_boxes` kept candidates over all groups, by descending score; "
        "equal scores are ordered by box index, then class, so the result is deterministic. With "
        "`class_agnostic` 0 this is `torchvision.ops.batched_nms` on the candidates followed by a top-k. "
        "IoU is torchvision's (and ortops.NMS's): areas `(x2 - x1 + offset) * (y2 - y1 + offset)` from "
        "the coordinates as given; two empty boxes have IoU 0/0, which suppresses nothing. With "
        "`box_coding` 1, boxes are decoded to corners (x1 = cx - w / 2, ...) first, and outputs hold the "
        "corners. With `score_activation` 1, the op behaves as if `sigmoid(score) = 1 / (1 + exp(-score))` "
        "(computed in the element type) replaced every score: thresholding, ranking and the output scores "
        "all use it (the threshold is tested on the logit against a cutoff computed once, which gives the "
        "same decision as computing the sigmoid, so only candidates pay for an exp). NaN scores are never "
        "candidates; a box with a NaN coordinate has NaN IoU with every box, so it neither suppresses nor "
        "is suppressed. The outputs always have `max_output_boxes` rows per image: a very large value is "
        "an allocation error. float16 computes in float32 and rounds its outputs.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = kAttributes,
};

namespace {

template <typename T>
class BatchedNmsKernel : public KernelBase {
 public:
  using Element = T;
  using A = ComputeType<T>;
  static constexpr const OpSchema& kSchema = batched_nms::kSchema;

  BatchedNmsKernel(const Attributes& attrs, const OpDef& def)
      : KernelBase(def),
        attributes_(attrs),
        cutoff_(ScoreCutoff<A>(attributes_.score_threshold, attributes_.score_activation == 1, /*strict=*/true)) {}

  void Compute(const KernelIO& io) const {
    const auto [boxes, scores, batch, count, classes, shared] = ReadBatchedNmsInputs<T>(io, attributes_);
    const int64_t rows = attributes_.max_output;
    int64_t* num_detections = io.Output<int64_t>(0, {batch});
    const CornerBoxes<T, A> corners{BoxLayout<T>{boxes.data, count, shared ? 1 : classes, 4},
                                    attributes_.box_coding == 1};
    const BatchedNmsRows<T, A> out{corners, io.Output<T>(1, {batch, rows, 4}), io.Output<T>(2, {batch, rows}),
                                   io.Output<int64_t>(3, {batch, rows}), io.Output<int64_t>(4, {batch, rows})};

    const A cutoff = cutoff_;
    const auto passes = [cutoff](A score) { return score >= cutoff; };
    const auto score_at = [&](int64_t b, int64_t n, int64_t c) {
      return static_cast<A>(scores.data[(b * count + n) * classes + c]);
    };
    const A offset = static_cast<A>(attributes_.offset);
    const A threshold = static_cast<A>(attributes_.iou_threshold);
    const BatchedNmsTest<T, A> test{corners, offset, threshold};
    const auto suppresses = [&](int64_t b, const NmsCandidate<A>& kept, const NmsCandidate<A>& candidate) {
      return test.Suppresses(b, kept, candidate);
    };
    const auto emit = [&](int64_t b, std::span<const NmsCandidate<A>> detections) {
      num_detections[b] = static_cast<int64_t>(detections.size());
      const int64_t first = b * rows;
      for (size_t i = 0; i < detections.size(); ++i) out.Write(b, first + static_cast<int64_t>(i), detections[i]);
      for (int64_t row = first + static_cast<int64_t>(detections.size()); row < first + rows; ++row) out.Pad(row);
    };
    // Large groups test a candidate only against the kept boxes near it (ops/nms/group_index.h).
    const auto make_index = [&](int64_t b, std::span<const NmsCandidate<A>> set) {
      const auto box_of = [&, b](const NmsCandidate<A>& c, A box[5]) {
        corners.Corners(b, c.box, c.cls, box);
        box[4] = BoxArea(box, offset);
      };
      return nms::MakeGridGroupIndex(io, set, box_of, nms::IouRule::kBox, offset, threshold);
    };
    const MulticlassNmsConfig config = attributes_.Config();
    if (attributes_.score_activation == 1) {
      MulticlassNmsIndexed<A>(
          io, config, batch, count, classes, passes, score_at, [](A score) { return Sigmoid(score); }, suppresses, emit,
          make_index);
    } else {
      MulticlassNmsIndexed<A>(
          io, config, batch, count, classes, passes, score_at, [](A score) { return score; }, suppresses, emit,
          make_index);
    }
  }

 private:
  BatchedNmsAttributes attributes_;
  A cutoff_;
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<BatchedNmsKernel, float, double, Half>(def); }

}  // namespace ortops::batched_nms
