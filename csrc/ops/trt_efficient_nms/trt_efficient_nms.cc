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

template <typename T>
class EfficientNmsKernel : public KernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = trt_efficient_nms::kSchema;

  EfficientNmsKernel(const Attributes& attrs, const OpDef& def) : KernelBase(def), attributes_(attrs) {}

  void Compute(const KernelIO& io) const {
    const EfficientNmsInputs<T> in(io, attributes_.box_coding);
    const int64_t batch = in.batch, anchors_count = in.anchors_count, classes = in.classes;
    const int64_t max_output = attributes_.max_output;
    int32_t* num_detections = io.Output<int32_t>(0, {batch, 1});
    const EfficientRows<T> out{in.layout, io.Output<T>(1, {batch, max_output, 4}), io.Output<T>(2, {batch, max_output}),
                               io.Output<int32_t>(3, {batch, max_output}), attributes_.score_activation != 0};
    std::fill(num_detections, num_detections + batch, 0);
    std::fill(out.out_boxes, out.out_boxes + batch * max_output * 4, T(0));
    std::fill(out.out_scores, out.out_scores + batch * max_output, T(0));
    std::fill(out.out_classes, out.out_classes + batch * max_output, 0);
    if (batch == 0 || anchors_count == 0 || classes == 0) return;

    // Every box decoded once, in IoU form (the output boxes are decoded again, at emit).
    const auto total_boxes = static_cast<size_t>(batch * in.layout.PerImage());
    Scratch<IouBox> iou_boxes = io.Allocate<IouBox>(total_boxes);
    io.ParallelForRanges(total_boxes, 64, [&](size_t begin, size_t end) {
      for (size_t slot = begin; slot < end; ++slot)
        PrepareIouBox(in.layout, static_cast<int64_t>(slot), iou_boxes[slot]);
    });

    const float score_threshold = attributes_.score_threshold, iou_threshold = attributes_.iou_threshold;
    const T* score_data = in.scores.data;
    const EfficientTest<T> test{in.layout, iou_boxes.data(), iou_threshold};
    const auto make_index = [&](int64_t b, std::span<const NmsCandidate<float>> set) {
      const auto box_of = [&, b](const NmsCandidate<float>& c, float box[5]) {
        const IouBox& v = iou_boxes[static_cast<size_t>(in.layout.Slot(b, c.box, c.cls))];
        box[0] = v.corner[0], box[1] = v.corner[1], box[2] = v.corner[2], box[3] = v.corner[3], box[4] = v.area;
      };
      return nms::MakeGridGroupIndex(io, set, box_of, nms::IouRule::kEfficient, 0.0f, iou_threshold);
    };
    MulticlassNmsIndexed<float>(
        io, attributes_.Config(), batch, anchors_count, classes,
        [score_threshold](float score) { return score >= score_threshold; },
        [score_data, anchors_count, classes](int64_t b, int64_t n, int64_t c) {
          return static_cast<float>(score_data[(b * anchors_count + n) * classes + c]);
        },
        [](float score) { return score; },
        [&](int64_t b, const NmsCandidate<float>& kept, const NmsCandidate<float>& candidate) {
          return test.Suppresses(b, kept, candidate);
        },
        [&](int64_t b, std::span<const NmsCandidate<float>> kept) {
          num_detections[b] = static_cast<int32_t>(kept.size());
          for (size_t k = 0; k < kept.size(); ++k) out.Write(b, b * max_output + static_cast<int64_t>(k), kept[k]);
        },
        make_index);
  }

 private:
  EfficientNmsAttributes<T> attributes_;
};

}  // namespace

// Float32 only: ONNX Runtime 1.17 cannot type a node that leaves out the optional `anchors`
// of an op registered for several element types, and exporters leave it out.
std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<EfficientNmsKernel, float>(def); }

}  // namespace ortops::trt_efficient_nms
