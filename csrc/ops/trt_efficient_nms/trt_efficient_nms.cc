// TensorRT's EfficientNMS_TRT plugin node (plugin/efficientNMSPlugin in NVIDIA/TensorRT), as
// YOLO exporters (yolov7 --end2end, YOLOv8-TensorRT, mmyolo's easydeploy) write it: score
// filter, optional fused box decoder, per-class or class-agnostic greedy NMS and a fixed
// number of zero-padded detections per image.
#include "ops/trt_efficient_nms/trt_efficient_nms.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>

#include "core/half.h"
#include "math/box_iou.h"
#include "math/multiclass_nms.h"
#include "ops/nms/group_index.h"

namespace ortops::trt_efficient_nms {
namespace {

constexpr IoSpec kInputs[] = {
    {"boxes", ElemType::kTypeParam,
     "`[B, N, 4]` one box per anchor for every class, or `[B, N, C, 4]` one per class (`[B, N, 1, 4]`: one for "
     "every class); (v0, v1, v2, v3) as two corners with `box_coding` 0 (x1, y1, x2, y2 or y1, x1, y2, x2, corners "
     "in any order), as centre and size with 1 (x, y, w, h or y, x, h, w); with `anchors`, the raw regression "
     "that is decoded against them"},
    {"scores", ElemType::kTypeParam,
     "`[B, N, C]` (or `[B, N, C, 1]`) the score of each anchor for each class; logits with `score_activation` 1"},
    {"anchors", ElemType::kTypeParam,
     "`[1, N, 4]` anchors for every image, or `[B, N, 4]` per image, in the coding of `box_coding` (fused box "
     "decoder); leave out when `boxes` are final",
     /*optional=*/true},
};
constexpr IoSpec kOutputs[] = {
    {"num_detections", ElemType::kInt32, "`[B, 1]` the number of detections of each image"},
    {"detection_boxes", ElemType::kTypeParam,
     "`[B, max_output_boxes, 4]` the detections' boxes as two corners in the order of the input's coordinates "
     "(centre-size boxes become v0 - v2 / 2, v1 - v3 / 2, v0 + v2 / 2, v1 + v3 / 2); rows past num_detections are 0"},
    {"detection_scores", ElemType::kTypeParam,
     "`[B, max_output_boxes]` their scores (after the sigmoid with `score_activation` 1), highest first; rows past "
     "num_detections are 0"},
    {"detection_classes", ElemType::kInt32, "`[B, max_output_boxes]` their classes; rows past num_detections are 0"},
};
constexpr AttrSpec kAttributes[] = {
    {"score_threshold", AttrType::kFloat, "0.5",
     "a (box, class) is a candidate when its score is at least this (with `score_activation` 1: its logit at least "
     "the threshold's logit, and every logit when the threshold is 0 or less)"},
    {"iou_threshold", AttrType::kFloat, "0.5",
     "a candidate is dropped when its IoU with a kept detection (of its class, or of any class with "
     "`class_agnostic` 1) is at least this"},
    {"max_output_boxes", AttrType::kInt, "100", "detections per image, at least 1"},
    {"background_class", AttrType::kInt, "-1", "a class that is never detected; -1: none",
     /*also_ints_of_one=*/true},
    {"score_activation", AttrType::kInt, "0",
     "1: `scores` are logits; the sigmoid is applied to the detections' scores only"},
    {"class_agnostic", AttrType::kInt, "0", "1: one NMS over all classes instead of one per class"},
    {"box_coding", AttrType::kInt, "0", "0: boxes (and anchors) are corners; 1: centre and size",
     /*also_ints_of_one=*/true},
    {"plugin_version", AttrType::kString, "1", "TensorRT's plugin version; accepted and ignored"},
    // `""` (not empty, which would make it required): the default is the empty string.
    {"plugin_namespace", AttrType::kString, "\"\"", "TensorRT's plugin namespace; accepted and ignored"},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "TensorRT's EfficientNMS_TRT plugin: multi-class NMS with a fixed number of detections per image, as "
        "written by yolov7 (`--end2end`), YOLOv8-TensorRT and mmyolo's easydeploy. Every (box, class) whose score "
        "is at least `score_threshold` (never `background_class`; NaN scores never) is a candidate. With "
        "`anchors` (the fused box decoder) each box is first decoded against its anchor: corners are put in "
        "order per axis (box and anchor) and added; centre-size boxes (v0, v1, v2, v3) become (v0 * a2 + a0, "
        "v1 * a3 + a1, a2 * exp(v2), a3 * exp(v3)). Centre-size boxes are then turned into corners. Per class "
        "(or over all classes with `class_agnostic` 1), candidates are visited in descending score order and "
        "one is dropped when its IoU with a kept one is at least `iou_threshold` (so a threshold of 0 or less "
        "drops even disjoint boxes). IoU is TensorRT's, in float: on copies of the boxes with each axis's "
        "corners in order, an area is 0 unless both sides are positive, and the IoU is 0 when the intersection "
        "or the union is not positive (so a box with a NaN coordinate has IoU NaN or 0 with any other: for an "
        "`iou_threshold` above 0 it neither drops one nor is dropped). The "
        "best `max_output_boxes` kept detections over all classes are the output, by descending score (ties: "
        "lower box index, then lower class), with `score_activation` 1 their scores through the sigmoid; the "
        "rows after `num_detections` are 0. Output boxes are the (decoded) corners, not reordered. "
        "`background_class` and `box_coding` are also read from ints holding one value, as yolov7 writes them.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = kAttributes,
    .differences =
        "Every candidate enters NMS: the plugin keeps only the best 4096 scores of an image over all classes "
        "(TensorRT up to 8.4; from 8.5, 5000 on most GPUs and 2000 on Jetson TX1/TX2) and drops the rest, so "
        "with more candidates than that it can miss detections ortops finds. Below a threshold of 0.007 "
        "(compared as logits with `score_activation`) the plugin switches to a dense path that lets candidates "
        "below the threshold (as score -32768) into the output when fewer than `max_output_boxes` survive NMS; "
        "ortops never outputs a score below the threshold. Ties in score come in a fixed order (box, then class) "
        "where the plugin's order depends on the GPU's atomics. Float32 only (the plugin also runs float16, in "
        "float16 arithmetic). exp and the sigmoid are the C library's, not CUDA's fast approximations, so "
        "decoded boxes and activated scores can differ in the last bits. TensorRT 8.5 and later refuse at "
        "engine build a `score_threshold` below 0, an `iou_threshold` of 0 or less or a missing "
        "`score_threshold`, `iou_threshold`, `max_output_boxes`, `background_class`, `score_activation` or "
        "`box_coding` (earlier versions take the defaults shown here); ortops accepts them with the defaults "
        "and arithmetic above. Box and class indices are not limited to int32 products (the plugin indexes "
        "with B * N * C in int32).",
};

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// A box as the IoU reads it: corners in order per axis, and its area.
struct IouBox {
  float corner[4];
  float area;
};

template <typename T>
class EfficientNmsKernel : public KernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = trt_efficient_nms::kSchema;

  EfficientNmsKernel(const Attributes& attrs, const OpDef& def)
      : KernelBase(def),
        iou_threshold_(attrs.Float("iou_threshold")),
        max_output_(attrs.Int("max_output_boxes")),
        background_class_(attrs.Int("background_class")),
        score_activation_(attrs.Int("score_activation")),
        class_agnostic_(attrs.Int("class_agnostic")),
        box_coding_(attrs.Int("box_coding")) {
    const float score_threshold = attrs.Float("score_threshold");
    Check(!std::isnan(score_threshold), "attribute 'score_threshold' is NaN");
    Check(!std::isnan(iou_threshold_), "attribute 'iou_threshold' is NaN");
    Check(max_output_ >= 1 && max_output_ <= kInt32Max, "attribute 'max_output_boxes' must be in [1, ", kInt32Max,
          "], got ", max_output_);
    Check(score_activation_ == 0 || score_activation_ == 1, "attribute 'score_activation' must be 0 or 1, got ",
          score_activation_);
    Check(class_agnostic_ == 0 || class_agnostic_ == 1, "attribute 'class_agnostic' must be 0 or 1, got ",
          class_agnostic_);
    Check(box_coding_ == 0 || box_coding_ == 1, "attribute 'box_coding' must be 0 (corners) or 1 (centre-size), got ",
          box_coding_);
    // With the activation the plugin compares logits: the threshold becomes its logit (every
    // logit passes for a threshold of 0 or less). The plugin compares in the element type.
    float threshold = score_threshold;
    if (score_activation_) {
      threshold = score_threshold <= 0.0f ? -32768.0f : std::log(score_threshold / (1.0f - score_threshold));
    }
    score_threshold_ = static_cast<float>(static_cast<T>(threshold));
  }

  void Compute(const KernelIO& io) const {
    const ConstTensor<T> boxes = io.Input<T>(0);
    const ConstTensor<T> scores = io.Input<T>(1);
    Check((scores.rank() == 3 || (scores.rank() == 4 && scores.dim(3) == 1)),
          "input 'scores' must have shape [B, N, C] (or [B, N, C, 1]), got ", ShapeText{scores.shape});
    const int64_t batch = scores.dim(0), anchors_count = scores.dim(1), classes = scores.dim(2);
    const bool per_class_shape = boxes.rank() == 4;
    Check((boxes.rank() == 3 || per_class_shape) && boxes.dim(0) == batch && boxes.dim(1) == anchors_count &&
              boxes.dim(boxes.rank() - 1) == 4 && (!per_class_shape || boxes.dim(2) == 1 || boxes.dim(2) == classes),
          "input 'boxes' must have shape [B, N, 4] or [B, N, C, 4] (or [B, N, 1, 4]) with B = ", batch,
          ", N = ", anchors_count, " and C = ", classes, " (from input 'scores' of shape ", ShapeText{scores.shape},
          "), got ", ShapeText{boxes.shape});
    Check(anchors_count <= kInt32Max && classes <= kInt32Max, "input 'scores' of shape ", ShapeText{scores.shape},
          " has more than ", kInt32Max, " boxes or classes");
    ConstTensor<T> anchors;
    const bool decode = io.Has(2);
    if (decode) {
      anchors = io.Input<T>(2);
      Check(anchors.rank() == 3 && (anchors.dim(0) == 1 || anchors.dim(0) == batch) &&
                anchors.dim(1) == anchors_count && anchors.dim(2) == 4,
            "input 'anchors' must have shape [1, N, 4] or [B, N, 4] with B = ", batch, " and N = ", anchors_count,
            ", got ", ShapeText{anchors.shape});
    }

    int32_t* num_detections = io.Output<int32_t>(0, {batch, 1});
    T* out_boxes = io.Output<T>(1, {batch, max_output_, 4});
    T* out_scores = io.Output<T>(2, {batch, max_output_});
    int32_t* out_classes = io.Output<int32_t>(3, {batch, max_output_});
    std::fill(num_detections, num_detections + batch, 0);
    std::fill(out_boxes, out_boxes + batch * max_output_ * 4, T(0));
    std::fill(out_scores, out_scores + batch * max_output_, T(0));
    std::fill(out_classes, out_classes + batch * max_output_, 0);
    if (batch == 0 || anchors_count == 0 || classes == 0) return;

    // Boxes per image: one per anchor, or one per (anchor, class).
    const int64_t box_columns = per_class_shape ? boxes.dim(2) : 1;
    const int64_t boxes_per_image = anchors_count * box_columns;
    const bool shared_anchors = decode && anchors.dim(0) == 1;
    // The box the IoU reads and the output box of candidate (box n, class c) of image b.
    auto box_slot = [&](int64_t b, int64_t n, int64_t c) {
      return b * boxes_per_image + n * box_columns + (box_columns == 1 ? 0 : c);
    };
    auto decoded = [&](int64_t slot, float* corners) {
      const int64_t b = slot / boxes_per_image, n = (slot % boxes_per_image) / box_columns;
      const T* anchor = decode ? anchors.data + 4 * (shared_anchors ? n : b * anchors_count + n) : nullptr;
      DecodeBox(boxes.data + 4 * slot, anchor, corners);
    };

    // Every box decoded once, in IoU form (the output boxes are decoded again, at emit).
    const auto total_boxes = static_cast<size_t>(batch * boxes_per_image);
    Scratch<IouBox> iou_boxes = io.Allocate<IouBox>(total_boxes);
    io.ParallelForRanges(total_boxes, 64, [&](size_t begin, size_t end) {
      for (size_t slot = begin; slot < end; ++slot) {
        IouBox& box = iou_boxes[slot];
        decoded(static_cast<int64_t>(slot), box.corner);
        EfficientReorder(box.corner);
        box.area = EfficientArea(box.corner);
      }
    });

    MulticlassNmsConfig config;
    config.background_class = background_class_;
    config.max_output = max_output_;
    config.class_agnostic = class_agnostic_ != 0;
    const float score_threshold = score_threshold_, iou_threshold = iou_threshold_;
    const T* score_data = scores.data;
    const auto make_index = [&](int64_t b, std::span<const NmsCandidate<float>> set) {
      const auto box_of = [&, b](const NmsCandidate<float>& c, float box[5]) {
        const IouBox& v = iou_boxes[static_cast<size_t>(box_slot(b, c.box, c.cls))];
        box[0] = v.corner[0], box[1] = v.corner[1], box[2] = v.corner[2], box[3] = v.corner[3], box[4] = v.area;
      };
      return nms::MakeGridGroupIndex(io, set, box_of, nms::IouRule::kEfficient, 0.0f, iou_threshold);
    };
    MulticlassNmsIndexed<float>(
        io, config, batch, anchors_count, classes, [score_threshold](float score) { return score >= score_threshold; },
        [score_data, anchors_count, classes](int64_t b, int64_t n, int64_t c) {
          return static_cast<float>(score_data[(b * anchors_count + n) * classes + c]);
        },
        [](float score) { return score; },
        [&](int64_t b, const NmsCandidate<float>& kept, const NmsCandidate<float>& candidate) {
          // The plugin passes the candidate first, the kept box second.
          const IouBox& lower = iou_boxes[static_cast<size_t>(box_slot(b, candidate.box, candidate.cls))];
          const IouBox& upper = iou_boxes[static_cast<size_t>(box_slot(b, kept.box, kept.cls))];
          return EfficientIoU(lower.corner, lower.area, upper.corner, upper.area) >= iou_threshold;
        },
        [&](int64_t b, std::span<const NmsCandidate<float>> kept) {
          num_detections[b] = static_cast<int32_t>(kept.size());
          for (size_t k = 0; k < kept.size(); ++k) {
            const int64_t row = b * max_output_ + static_cast<int64_t>(k);
            float corners[4];
            decoded(box_slot(b, kept[k].box, kept[k].cls), corners);
            for (int i = 0; i < 4; ++i) out_boxes[4 * row + i] = static_cast<T>(corners[i]);
            const float score = kept[k].score;
            out_scores[row] = static_cast<T>(score_activation_ ? 1.0f / (1.0f + std::exp(-score)) : score);
            out_classes[row] = kept[k].cls;
          }
        },
        make_index);
  }

 private:
  // The plugin's DecodeBoxes: the box as corners (v0, v1, v2, v3), decoded against `anchor`
  // when there is one, in float.
  void DecodeBox(const T* box, const T* anchor, float* corners) const {
    float v[4] = {static_cast<float>(box[0]), static_cast<float>(box[1]), static_cast<float>(box[2]),
                  static_cast<float>(box[3])};
    if (anchor != nullptr) {
      float a[4] = {static_cast<float>(anchor[0]), static_cast<float>(anchor[1]), static_cast<float>(anchor[2]),
                    static_cast<float>(anchor[3])};
      if (box_coding_ == 0) {
        EfficientReorder(v);
        EfficientReorder(a);
        for (int i = 0; i < 4; ++i) corners[i] = v[i] + a[i];
        return;
      }
      const float centre_0 = v[0] * a[2] + a[0], centre_1 = v[1] * a[3] + a[1];
      const float size_0 = a[2] * std::exp(v[2]), size_1 = a[3] * std::exp(v[3]);
      v[0] = centre_0, v[1] = centre_1, v[2] = size_0, v[3] = size_1;
    }
    if (box_coding_ == 0) {
      for (int i = 0; i < 4; ++i) corners[i] = v[i];
      return;
    }
    const float half_0 = v[2] * 0.5f, half_1 = v[3] * 0.5f;
    corners[0] = v[0] - half_0;
    corners[1] = v[1] - half_1;
    corners[2] = v[0] + half_0;
    corners[3] = v[1] + half_1;
  }

  float score_threshold_ = 0;
  float iou_threshold_;
  int64_t max_output_, background_class_, score_activation_, class_agnostic_, box_coding_;
};

}  // namespace

// Float32 only: ONNX Runtime 1.17 cannot type a node that leaves out the optional `anchors`
// of an op registered for several element types, and exporters leave it out.
std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<EfficientNmsKernel, float>(def); }

}  // namespace ortops::trt_efficient_nms
