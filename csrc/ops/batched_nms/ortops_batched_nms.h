// The parts of ortops' BatchedNMS that its CPU kernel (batched_nms.cc) and device kernel
// (batched_nms.cu) share: attributes, input checks, box decoding, the IoU test and the rows
// of the outputs.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/custom_op.h"
#include "core/host_device.h"
#include "core/op_kernel.h"
#include "math/box_iou.h"
#include "math/multiclass_nms.h"
#include "math/score_cutoff.h"
#include "ops/batched_nms/batched_nms.h"
#include "ops/batched_nms/box_layout.h"

namespace ortops::batched_nms {

struct BatchedNmsAttributes {
  explicit BatchedNmsAttributes(const Attributes& attrs)
      : iou_threshold(attrs.Float("iou_threshold")),
        score_threshold(attrs.Float("score_threshold")),
        max_output(attrs.Int("max_output_boxes")),
        pre_topk(attrs.Int("pre_topk")),
        class_agnostic(attrs.Int("class_agnostic")),
        box_coding(attrs.Int("box_coding")),
        score_activation(attrs.Int("score_activation")),
        background_class(attrs.Int("background_class")),
        offset(attrs.Int("offset")) {
    Check(!std::isnan(iou_threshold), "attribute 'iou_threshold' is NaN");
    Check(!std::isnan(score_threshold), "attribute 'score_threshold' is NaN");
    Check(max_output >= 0, "attribute 'max_output_boxes' must be >= 0, got ", max_output);
    Check(pre_topk >= -1, "attribute 'pre_topk' must be -1 (all) or >= 0, got ", pre_topk);
    Check(background_class >= -1, "attribute 'background_class' must be -1 (none) or a class id, got ",
          background_class);
    CheckFlag(class_agnostic, "class_agnostic");
    CheckFlag(box_coding, "box_coding");
    CheckFlag(score_activation, "score_activation");
    CheckFlag(offset, "offset");
  }

  MulticlassNmsConfig Config() const {
    MulticlassNmsConfig config;
    config.background_class = background_class;
    config.pre_topk = pre_topk;
    config.max_output = max_output;
    config.class_agnostic = class_agnostic == 1;
    return config;
  }

  float iou_threshold, score_threshold;
  int64_t max_output, pre_topk, class_agnostic, box_coding, score_activation, background_class, offset;
};

// The attributes, and the score cutoff in the compute type A that they give (ScoreCutoff:
// the logit whose sigmoid is the threshold, with `score_activation`), computed once.
template <typename A>
struct BatchedNmsSettings : BatchedNmsAttributes {
  explicit BatchedNmsSettings(const Attributes& attrs)
      : BatchedNmsAttributes(attrs), cutoff(ScoreCutoff<A>(score_threshold, score_activation == 1, /*strict=*/true)) {}
  A cutoff;
};

template <typename T>
struct BatchedNmsInputs {
  ConstTensor<T> boxes, scores;
  int64_t batch, count, classes;
  bool shared;  // one box per box index, for every class
};

// Inputs 0 (boxes) and 1 (scores) of a KernelIO or a device::DeviceIO, checked.
template <typename T, typename IO>
BatchedNmsInputs<T> ReadBatchedNmsInputs(const IO& io, const BatchedNmsAttributes& attributes) {
  BatchedNmsInputs<T> in{io.template Input<T>(0), io.template Input<T>(1, 3), 0, 0, 0, false};
  const ConstTensor<T>& boxes = in.boxes;
  const ConstTensor<T>& scores = in.scores;
  const int64_t batch = scores.dim(0), count = scores.dim(1), classes = scores.dim(2);
  const bool shared = boxes.rank() == 3 || (boxes.rank() == 4 && boxes.dim(2) == 1);
  Check((boxes.rank() == 3 || boxes.rank() == 4) && boxes.dim(0) == batch && boxes.dim(1) == count &&
            boxes.dim(boxes.rank() - 1) == 4 && (shared || boxes.dim(2) == classes),
        "input 'boxes' must have shape [B, N, 4] or [B, N, C, 4] with [B, N, C] = ", ShapeText{scores.shape},
        " (the shape of 'scores'), got ", ShapeText{boxes.shape});
  constexpr int64_t kMaxIndex = std::numeric_limits<int32_t>::max();
  Check(count <= kMaxIndex && classes <= kMaxIndex, "input 'scores' ", ShapeText{scores.shape},
        " has more than 2^31 - 1 boxes or classes");
  // Output rows: B * max_output_boxes, 4 values each, must be countable.
  const int64_t max_output = attributes.max_output;
  Check(batch == 0 || max_output <= std::numeric_limits<int64_t>::max() / 4 / batch, "attribute 'max_output_boxes' (",
        max_output, ") times the batch size (", batch, ") is too large");
  in.batch = batch, in.count = count, in.classes = classes, in.shared = shared;
  return in;
}

// The corners of box (b, n, c) in A, decoded from (cx, cy, w, h) with box_coding 1.
template <typename T, typename A>
struct CornerBoxes {
  BoxLayout<T> layout;
  bool center;
  ORTOPS_HD void Corners(int64_t b, int64_t n, int64_t c, A out[4]) const {
    const T* box = layout.At(b, n, c);
    const A v0 = static_cast<A>(box[0]), v1 = static_cast<A>(box[1]);
    const A v2 = static_cast<A>(box[2]), v3 = static_cast<A>(box[3]);
    if (center) {
      out[0] = v0 - v2 / A(2), out[1] = v1 - v3 / A(2), out[2] = v0 + v2 / A(2), out[3] = v1 + v3 / A(2);
    } else {
      out[0] = v0, out[1] = v1, out[2] = v2, out[3] = v3;
    }
  }
};

// Whether a kept candidate suppresses a later one of its group (same image b).
template <typename T, typename A>
struct BatchedNmsTest {
  CornerBoxes<T, A> boxes;
  A offset, threshold;
  ORTOPS_HD bool Suppresses(int64_t b, const NmsCandidate<A>& kept, const NmsCandidate<A>& candidate) const {
    A k[4], x[4];
    boxes.Corners(b, kept.box, kept.cls, k);
    boxes.Corners(b, candidate.box, candidate.cls, x);
    return BoxIoU(k, BoxArea(k, offset), x, BoxArea(x, offset), offset) > threshold;
  }
};

// Rows of outputs 1 to 4 (row = b * max_output + r): a detection, or padding.
template <typename T, typename A>
struct BatchedNmsRows {
  CornerBoxes<T, A> boxes;
  T* out_boxes;
  T* out_scores;
  int64_t* out_classes;
  int64_t* out_indices;

  ORTOPS_HD void Write(int64_t b, int64_t row, const NmsCandidate<A>& d) const {
    A box[4];
    boxes.Corners(b, d.box, d.cls, box);
    for (int k = 0; k < 4; ++k) out_boxes[4 * row + k] = static_cast<T>(box[k]);
    out_scores[row] = static_cast<T>(d.score);
    out_classes[row] = d.cls;
    out_indices[row] = d.box;
  }
  ORTOPS_HD void Pad(int64_t row) const {
    for (int k = 0; k < 4; ++k) out_boxes[4 * row + k] = static_cast<T>(A(0));
    out_scores[row] = static_cast<T>(A(0));
    out_classes[row] = -1;
    out_indices[row] = -1;
  }
};

// Outputs 1 to 4 of a call with inputs `in`, from a KernelIO or a device::DeviceIO.
template <typename T, typename A, typename IO>
BatchedNmsRows<T, A> BatchedNmsOutputRows(const IO& io, const BatchedNmsInputs<T>& in,
                                          const BatchedNmsAttributes& attributes) {
  const int64_t batch = in.batch, rows = attributes.max_output;
  const CornerBoxes<T, A> corners{BoxLayout<T>{in.boxes.data, in.count, in.shared ? 1 : in.classes, 4},
                                  attributes.box_coding == 1};
  return {corners, io.template Output<T>(1, {batch, rows, 4}), io.template Output<T>(2, {batch, rows}),
          io.template Output<int64_t>(3, {batch, rows}), io.template Output<int64_t>(4, {batch, rows})};
}

}  // namespace ortops::batched_nms
