// TensorRT's EfficientNMS_TRT, and the parts its CPU kernel (trt_efficient_nms.cc) and device
// kernel (trt_efficient_nms.cu) share: attributes, input checks, the box decoder, the IoU
// test and the output rows.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/custom_op.h"
#include "core/host_device.h"
#include "math/box_iou.h"
#include "math/libm_exp.h"
#include "math/multiclass_nms.h"

namespace ortops::trt_efficient_nms {
extern const OpSchema kSchema;
KernelFactory Make, MakeDevice;

inline constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

template <typename T>
struct EfficientNmsAttributes {
  explicit EfficientNmsAttributes(const Attributes& attrs)
      : iou_threshold(attrs.Float("iou_threshold")),
        max_output(attrs.Int("max_output_boxes")),
        background_class(attrs.Int("background_class")),
        score_activation(attrs.Int("score_activation")),
        class_agnostic(attrs.Int("class_agnostic")),
        box_coding(attrs.Int("box_coding")) {
    const float threshold_attribute = attrs.Float("score_threshold");
    Check(!std::isnan(threshold_attribute), "attribute 'score_threshold' is NaN");
    Check(!std::isnan(iou_threshold), "attribute 'iou_threshold' is NaN");
    Check(max_output >= 1 && max_output <= kInt32Max, "attribute 'max_output_boxes' must be in [1, ", kInt32Max,
          "], got ", max_output);
    Check(score_activation == 0 || score_activation == 1, "attribute 'score_activation' must be 0 or 1, got ",
          score_activation);
    Check(class_agnostic == 0 || class_agnostic == 1, "attribute 'class_agnostic' must be 0 or 1, got ",
          class_agnostic);
    Check(box_coding == 0 || box_coding == 1, "attribute 'box_coding' must be 0 (corners) or 1 (centre-size), got ",
          box_coding);
    // With the activation the plugin compares logits: the threshold becomes its logit (every
    // logit passes for a threshold of 0 or less). The plugin compares in the element type.
    float threshold = threshold_attribute;
    if (score_activation) {
      threshold =
          threshold_attribute <= 0.0f ? -32768.0f : std::log(threshold_attribute / (1.0f - threshold_attribute));
    }
    score_threshold = static_cast<float>(static_cast<T>(threshold));
  }

  MulticlassNmsConfig Config() const {
    MulticlassNmsConfig config;
    config.background_class = background_class;
    config.max_output = max_output;
    config.class_agnostic = class_agnostic != 0;
    return config;
  }

  float score_threshold = 0;  // what a raw score is compared with (>=)
  float iou_threshold;
  int64_t max_output, background_class, score_activation, class_agnostic, box_coding;
};

// The boxes as the plugin reads them: one per anchor or per (anchor, class), decoded against
// the anchors when there are some, in float.
template <typename T>
struct EfficientBoxes {
  const T* boxes;
  const T* anchors;  // null: no decoding
  int64_t anchors_count, box_columns;
  bool shared_anchors;
  int64_t box_coding;

  ORTOPS_HD int64_t PerImage() const { return anchors_count * box_columns; }
  // The box the IoU reads and the output box of candidate (box n, class c) of image b.
  ORTOPS_HD int64_t Slot(int64_t b, int64_t n, int64_t c) const {
    return b * PerImage() + n * box_columns + (box_columns == 1 ? 0 : c);
  }

  // The plugin's DecodeBoxes: box `slot` as corners (v0, v1, v2, v3).
  ORTOPS_HD void Decoded(int64_t slot, float* corners) const {
    const T* box = boxes + 4 * slot;
    float v[4] = {static_cast<float>(box[0]), static_cast<float>(box[1]), static_cast<float>(box[2]),
                  static_cast<float>(box[3])};
    if (anchors != nullptr) {
      const int64_t b = slot / PerImage(), n = (slot % PerImage()) / box_columns;
      const T* anchor = anchors + 4 * (shared_anchors ? n : b * anchors_count + n);
      float a[4] = {static_cast<float>(anchor[0]), static_cast<float>(anchor[1]), static_cast<float>(anchor[2]),
                    static_cast<float>(anchor[3])};
      if (box_coding == 0) {
        EfficientReorder(v);
        EfficientReorder(a);
        for (int i = 0; i < 4; ++i) corners[i] = v[i] + a[i];
        return;
      }
      const float centre_0 = v[0] * a[2] + a[0], centre_1 = v[1] * a[3] + a[1];
      const float size_0 = a[2] * LibmExp(v[2]), size_1 = a[3] * LibmExp(v[3]);
      v[0] = centre_0, v[1] = centre_1, v[2] = size_0, v[3] = size_1;
    }
    if (box_coding == 0) {
      for (int i = 0; i < 4; ++i) corners[i] = v[i];
      return;
    }
    const float half_0 = v[2] * 0.5f, half_1 = v[3] * 0.5f;
    corners[0] = v[0] - half_0;
    corners[1] = v[1] - half_1;
    corners[2] = v[0] + half_0;
    corners[3] = v[1] + half_1;
  }
};

// A box as the IoU reads it: corners in order per axis, and its area.
struct IouBox {
  float corner[4];
  float area;
};

template <typename T>
ORTOPS_HD inline void PrepareIouBox(const EfficientBoxes<T>& boxes, int64_t slot, IouBox& box) {
  boxes.Decoded(slot, box.corner);
  EfficientReorder(box.corner);
  box.area = EfficientArea(box.corner);
}

// The inputs of an EfficientNMS_TRT node of a KernelIO or a device::DeviceIO, checked.
template <typename T>
struct EfficientNmsInputs {
  ConstTensor<T> boxes, scores, anchors;
  int64_t batch, anchors_count, classes;
  EfficientBoxes<T> layout;

  template <typename IO>
  EfficientNmsInputs(const IO& io, int64_t box_coding)
      : boxes(io.template Input<T>(0)), scores(io.template Input<T>(1)) {
    Check((scores.rank() == 3 || (scores.rank() == 4 && scores.dim(3) == 1)),
          "input 'scores' must have shape [B, N, C] (or [B, N, C, 1]), got ", ShapeText{scores.shape});
    batch = scores.dim(0), anchors_count = scores.dim(1), classes = scores.dim(2);
    const bool per_class_shape = boxes.rank() == 4;
    Check((boxes.rank() == 3 || per_class_shape) && boxes.dim(0) == batch && boxes.dim(1) == anchors_count &&
              boxes.dim(boxes.rank() - 1) == 4 && (!per_class_shape || boxes.dim(2) == 1 || boxes.dim(2) == classes),
          "input 'boxes' must have shape [B, N, 4] or [B, N, C, 4] (or [B, N, 1, 4]) with B = ", batch,
          ", N = ", anchors_count, " and C = ", classes, " (from input 'scores' of shape ", ShapeText{scores.shape},
          "), got ", ShapeText{boxes.shape});
    Check(anchors_count <= kInt32Max && classes <= kInt32Max, "input 'scores' of shape ", ShapeText{scores.shape},
          " has more than ", kInt32Max, " boxes or classes");
    const bool decode = io.Has(2);
    if (decode) {
      anchors = io.template Input<T>(2);
      Check(anchors.rank() == 3 && (anchors.dim(0) == 1 || anchors.dim(0) == batch) &&
                anchors.dim(1) == anchors_count && anchors.dim(2) == 4,
            "input 'anchors' must have shape [1, N, 4] or [B, N, 4] with B = ", batch, " and N = ", anchors_count,
            ", got ", ShapeText{anchors.shape});
    }
    layout = EfficientBoxes<T>{boxes.data,
                               decode ? anchors.data : nullptr,
                               anchors_count,
                               per_class_shape ? boxes.dim(2) : 1,
                               decode && anchors.dim(0) == 1,
                               box_coding};
  }
};

// Whether a kept candidate suppresses a later one of image b. The plugin passes the candidate
// first, the kept box second.
template <typename T>
struct EfficientTest {
  EfficientBoxes<T> layout;
  const IouBox* boxes;  // by slot
  float threshold;
  ORTOPS_HD bool Suppresses(int64_t b, const NmsCandidate<float>& kept, const NmsCandidate<float>& candidate) const {
    const IouBox& lower = boxes[layout.Slot(b, candidate.box, candidate.cls)];
    const IouBox& upper = boxes[layout.Slot(b, kept.box, kept.cls)];
    return EfficientIoU(lower.corner, lower.area, upper.corner, upper.area) >= threshold;
  }
};

// Detection row `row` (= b * max_output + r) of outputs 1 to 3; rows past the detections stay
// as filled (0).
template <typename T>
struct EfficientRows {
  EfficientBoxes<T> layout;
  T* out_boxes;
  T* out_scores;
  int32_t* out_classes;
  bool activation;
  ORTOPS_HD void Write(int64_t b, int64_t row, const NmsCandidate<float>& d) const {
    float corners[4];
    layout.Decoded(layout.Slot(b, d.box, d.cls), corners);
    for (int i = 0; i < 4; ++i) out_boxes[4 * row + i] = static_cast<T>(corners[i]);
    const float score = d.score;
    out_scores[row] = static_cast<T>(activation ? 1.0f / (1.0f + LibmExp(-score)) : score);
    out_classes[row] = d.cls;
  }
  ORTOPS_HD void Pad(int64_t) const {}  // the rows were filled with 0 before
};

}  // namespace ortops::trt_efficient_nms
