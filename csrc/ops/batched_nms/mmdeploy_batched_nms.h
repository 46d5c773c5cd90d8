// The parts of mmdeploy's TRTBatchedNMS and TRTBatchedRotatedNMS that their CPU kernels
// (mmdeploy_batched_nms.cc) and device kernels (batched_nms.cu) share: attributes, input
// checks, the IoU tests and the rows of the outputs.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/custom_op.h"
#include "core/host_device.h"
#include "math/box_iou.h"
#include "math/mmdeploy_rotated_iou.h"
#include "math/multiclass_nms.h"
#include "math/rotated_box.h"
#include "ops/batched_nms/batched_nms.h"
#include "ops/batched_nms/box_layout.h"

namespace ortops::batched_nms {

struct TrtBatchedNmsAttributes {
  TrtBatchedNmsAttributes(const Attributes& attrs, bool rotated)
      : num_classes(attrs.Int("num_classes")),
        background_label_id(attrs.Int("background_label_id")),
        topk(attrs.Int("topk")),
        keep_topk(attrs.Int("keep_topk")),
        iou_threshold(attrs.Float("iou_threshold")),
        score_threshold(attrs.Float("score_threshold")),
        clip_boxes(attrs.Int("clip_boxes")),
        return_index(rotated ? 0 : attrs.Int("return_index")) {
    Check(num_classes >= 0, "attribute 'num_classes' must be >= 0, got ", num_classes);
    Check(keep_topk >= 0, "attribute 'keep_topk' must be >= 0 (the outputs' second dimension), got ", keep_topk);
    Check(!std::isnan(iou_threshold), "attribute 'iou_threshold' is NaN");
    Check(!std::isnan(score_threshold), "attribute 'score_threshold' is NaN");
    CheckFlag(attrs.Int("is_normalized"), "is_normalized");
    CheckFlag(clip_boxes, "clip_boxes");
    CheckFlag(return_index, "return_index");
  }

  MulticlassNmsConfig Config() const {
    MulticlassNmsConfig config;
    config.background_class = background_label_id;
    config.pre_topk = topk > 0 ? topk : -1;
    config.max_output = keep_topk;
    config.ties_class_first = true;
    return config;
  }

  int64_t num_classes, background_label_id, topk, keep_topk;
  float iou_threshold, score_threshold;
  int64_t clip_boxes, return_index;
};

// The inputs of a TRTBatchedNMS (box size 4) or TRTBatchedRotatedNMS (5) node of a KernelIO
// or a device::DeviceIO, checked, and its outputs' rows.
template <typename T, int64_t kBoxSize>
struct TrtBatchedNmsIo {
  ConstTensor<T> boxes, scores;
  int64_t batch, count, classes;
  bool shared;  // boxes [B, N, 1, size]: one per box index, for every class
  BoxLayout<T> layout;

  template <typename IO>
  TrtBatchedNmsIo(const IO& io, const TrtBatchedNmsAttributes& attributes)
      : boxes(io.template Input<T>(0, 4)), scores(io.template Input<T>(1, 3)) {
    batch = scores.dim(0), count = scores.dim(1), classes = scores.dim(2);
    Check(classes == attributes.num_classes,
          "input 'scores' must have shape [B, N, num_classes] with num_classes = ", attributes.num_classes, ", got ",
          ShapeText{scores.shape});
    Check(boxes.dim(0) == batch && boxes.dim(1) == count && (boxes.dim(2) == 1 || boxes.dim(2) == classes) &&
              boxes.dim(3) == kBoxSize,
          "input 'boxes' must have shape [B, N, 1, ", kBoxSize, "] or [B, N, C, ", kBoxSize,
          "] with [B, N, C] = ", ShapeText{scores.shape}, " (the shape of 'scores'), got ", ShapeText{boxes.shape});
    constexpr int64_t kMaxIndex = std::numeric_limits<int32_t>::max();
    Check(count <= kMaxIndex && classes <= kMaxIndex && count * classes <= std::numeric_limits<int64_t>::max() / 2,
          "input 'scores' ", ShapeText{scores.shape}, " has more than 2^31 - 1 boxes or classes");
    const size_t outputs = io.OutputCount();
    if constexpr (kBoxSize == 4) {
      Check(outputs == static_cast<size_t>(2 + attributes.return_index), "attribute 'return_index' is ",
            attributes.return_index, ", so the node must have ", 2 + attributes.return_index, " outputs, got ",
            outputs);
    }
    const int64_t keep_topk = attributes.keep_topk;
    Check(batch == 0 || keep_topk <= std::numeric_limits<int64_t>::max() / (kBoxSize + 1) / batch,
          "attribute 'keep_topk' (", keep_topk, ") times the batch size (", batch, ") is too large");
    shared = boxes.dim(2) == 1;
    layout = BoxLayout<T>{boxes.data, count, shared ? 1 : classes, kBoxSize};
  }
};

// Rows of the outputs (row = b * keep_topk + r): a detection, or padding.
template <typename T, int64_t kBoxSize>
struct TrtBatchedNmsRows {
  BoxLayout<T> layout;
  T* dets;
  int64_t* labels;
  int64_t* index;  // null without the output
  int64_t count;
  bool clip, shared;

  template <typename IO>
  TrtBatchedNmsRows(const IO& io, const TrtBatchedNmsIo<T, kBoxSize>& in, const TrtBatchedNmsAttributes& attributes)
      : layout(in.layout),
        dets(io.template Output<T>(0, {in.batch, attributes.keep_topk, kBoxSize + 1})),
        labels(io.template Output<int64_t>(1, {in.batch, attributes.keep_topk})),
        index(attributes.return_index ? io.template Output<int64_t>(2, {in.batch, attributes.keep_topk}) : nullptr),
        count(in.count),
        clip(attributes.clip_boxes == 1),
        shared(in.shared) {}

  ORTOPS_HD void Write(int64_t b, int64_t row, const NmsCandidate<T>& d) const {
    const T* box = layout.At(b, d.box, d.cls);
    T* det = dets + row * (kBoxSize + 1);
    for (int64_t k = 0; k < kBoxSize; ++k) det[k] = clip ? ClampToUnitAsCuda(box[k]) : box[k];
    det[kBoxSize] = d.score;
    labels[row] = d.cls;
    if (index != nullptr) index[row] = shared ? d.box : int64_t{d.cls} * count + d.box;
  }
  ORTOPS_HD void Pad(int64_t row) const {
    for (int64_t k = 0; k <= kBoxSize; ++k) dets[row * (kBoxSize + 1) + k] = T(0);
    labels[row] = -1;
    if (index != nullptr) index[row] = -1;
  }
};

// TRTBatchedNMS's test: the plugin's IoU (DetectionOutputIoU) above the threshold.
template <typename T>
struct TrtBoxTest {
  BoxLayout<T> layout;
  T threshold;
  ORTOPS_HD bool Suppresses(int64_t b, const NmsCandidate<T>& kept, const NmsCandidate<T>& candidate) const {
    return DetectionOutputIoU(layout.At(b, kept.box, kept.cls), layout.At(b, candidate.box, candidate.cls)) > threshold;
  }
};

// TRTBatchedRotatedNMS's box i (of [B, N, L, 5]) as its test reads it: the rectangle of its
// sides' absolute values, and whether it is tiny (IoU 1 with every box).
template <typename T>
ORTOPS_HD inline void PrepareTrtRotatedBox(const T* box, RotatedRect& rect, char& tiny) {
  const T corners_of[5] = {box[0], box[1], std::abs(box[2]), std::abs(box[3]), box[4]};
  rect = MakeRotatedRect(corners_of);
  tiny = mmdeploy_rotated::TrtRotatedTiny(box);
}

// TRTBatchedRotatedNMS's test over the prepared boxes.
template <typename T>
struct TrtRotatedTest {
  const RotatedRect* rects;
  const char* tiny;
  int64_t count, per_class;
  double threshold;
  ORTOPS_HD int64_t Slot(int64_t b, const NmsCandidate<T>& c) const {
    return (b * count + c.box) * per_class + (per_class == 1 ? 0 : c.cls);
  }
  ORTOPS_HD bool Suppresses(int64_t b, const NmsCandidate<T>& kept, const NmsCandidate<T>& candidate) const {
    const int64_t k = Slot(b, kept), c = Slot(b, candidate);
    if (tiny[k] || tiny[c]) return 1.0 > threshold;
    return RotatedIoU(rects[k], rects[c]) > threshold;
  }
};

}  // namespace ortops::batched_nms
