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
