#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

#include "core/custom_op.h"
#include "core/host_device.h"
#include "math/mmdeploy_rotated_iou.h"
#include "math/rotated_box.h"

namespace ortops::nms_rotated {
extern const OpSchema kSchema;
KernelFactory Make, MakeDevice;

// The attributes of an NMSRotated node, read and checked once, as its CPU and device kernels
// take them.
struct NmsRotatedAttributes {
  NmsRotatedAttributes(const Attributes& attrs, const OpDef& def)
      : iou_threshold(attrs.Float("iou_threshold")),
        score_threshold(attrs.Float("score_threshold")),
        compat(def.compat) {
    Check(!std::isnan(iou_threshold), "attribute 'iou_threshold' is NaN");
    Check(!std::isnan(score_threshold), "attribute 'score_threshold' is NaN");
  }
  float iou_threshold, score_threshold;
  bool compat;  // mmdeploy's node: pairs with a degenerate box take the original's arithmetic
};

// Checks the shapes of boxes [B, N, 5] and scores [B, C, N] of a KernelIO or a
// device::DeviceIO; returns them.
template <typename T, typename IO>
std::pair<ConstTensor<T>, ConstTensor<T>> BoxesAndScoresInputs(const IO& io) {
  ConstTensor<T> boxes = io.template Input<T>(0, 3);
  ConstTensor<T> scores = io.template Input<T>(1, 3);
  Check(boxes.dim(2) == 5, "input 'boxes' must have shape [B, N, 5] (cx, cy, w, h, theta), got ",
        ShapeText{boxes.shape});
  const int64_t batch = boxes.dim(0), count = boxes.dim(1);
  Check(scores.dim(0) == batch && scores.dim(2) == count, "input 'scores' must have shape [B, C, N] = [", batch,
        ", C, ", count, "] to match 'boxes' ", ShapeText{boxes.shape}, ", got ", ShapeText{scores.shape});
  return {std::move(boxes), std::move(scores)};
}

// The error for value i of a rank-3 input that is NaN or infinite.
template <typename T>
[[noreturn]] void FailNotFinite(const Shape& shape, const char* name, int64_t i, T value) {
  const int64_t inner = shape[2], middle = shape[1];
  Fail("input '", name, "' must be finite, got ", value, " at [", i / (middle * inner), ", ", (i / inner) % middle,
       ", ", i % inner, "] of shape ", ShapeText{shape});
}

// Box i of an image as the suppression test reads it: its rectangle and, in mmdeploy's
// domain, its raw form and whether it is proper (mmdeploy_rotated::IsProper; always, in
// ortops' domain, where the raw form is not used).
template <typename T>
ORTOPS_HD inline void PrepareBox(const T* box, bool compat, RotatedRect& rect, mmdeploy_rotated::RawBox<T>* raw,
                                 char& proper) {
  rect = MakeRotatedRect(box);
  proper = !compat || mmdeploy_rotated::IsProper(box);
  if (compat) *raw = mmdeploy_rotated::MakeRawBox(box);
}

// Whether kept box k suppresses box i: the exact IoU, or, in mmdeploy's domain when either
// box is not proper, the original's float32 IoU of (k, i) compared as it compares it.
template <typename T>
ORTOPS_HD inline bool Suppresses(const RotatedRect* rects, const mmdeploy_rotated::RawBox<T>* raw, const char* proper,
                                 int64_t k, int64_t i, float iou_threshold) {
  if (proper[k] && proper[i]) return RotatedIoU(rects[k], rects[i]) > double{iou_threshold};
  return mmdeploy_rotated::OrtRotatedIoU(raw[k], raw[i]) > static_cast<T>(iou_threshold);
}

}  // namespace ortops::nms_rotated
