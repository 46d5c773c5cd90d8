#pragma once

#include <cmath>
#include <cstdint>
#include <optional>

#include "core/custom_op.h"

namespace ortops::non_max_suppression {
extern const OpSchema kSchema;
KernelFactory Make, MakeDevice;

// Inputs 2 to 4 (max_output_boxes_per_class, iou_threshold, score_threshold) parametrise the
// run: the device kernel reads them on the host, as ONNX Runtime's CUDA kernel does.
inline constexpr size_t kMaxOutputInput = 2, kIouThresholdInput = 3, kScoreThresholdInput = 4;

struct NmsAttributes {
  explicit NmsAttributes(const Attributes& attrs) : center_point_box(attrs.Int("center_point_box")) {
    Check(center_point_box == 0 || center_point_box == 1, "attribute 'center_point_box' must be 0 or 1, got ",
          center_point_box);
  }
  int64_t center_point_box;
};

// A node's inputs, checked once, in ONNX Runtime's terms: an absent max_output_boxes_per_class
// keeps nothing and a negative one counts as 0; an absent iou_threshold is 0, one outside
// [0, 1] (NaN included) is an error, as there; an absent score_threshold lets every box
// through, a NaN one none (scores must be strictly greater). The optional inputs are scalars
// or [1]; ONNX Runtime reads the first value of a longer tensor, and so does ortops, but an
// empty one (where it reads past the end) is an error.
template <typename T>
struct NmsInputs {
  ConstTensor<T> boxes, scores;
  int64_t batch = 0, classes = 0, count = 0;
  int64_t max_output = 0;
  float iou_threshold = 0;
  std::optional<float> score_threshold;
};

template <typename V>
V FirstValue(const ConstTensor<V>& tensor, const char* name) {
  Check(tensor.size() > 0, "input '", name, "' must hold one value, got shape ", ShapeText{tensor.shape});
  return tensor.data[0];
}

template <typename T, typename IO>
NmsInputs<T> ReadInputs(const IO& io) {
  NmsInputs<T> in;
  in.boxes = io.template Input<T>(0);
  in.scores = io.template Input<T>(1);
  const Shape& boxes = in.boxes.shape;
  const Shape& scores = in.scores.shape;
  Check(boxes.size() == 3 && boxes[2] == 4, "input 'boxes' must have shape [B, N, 4], got ", ShapeText{boxes});
  in.batch = boxes[0], in.count = boxes[1];
  Check(scores.size() == 3 && scores[0] == in.batch && scores[2] == in.count,
        "input 'scores' must have shape [B, C, N] = [", in.batch, ", C, ", in.count, "] (boxes' B and N), got ",
        ShapeText{scores});
  in.classes = scores[1];
  if (io.Has(kMaxOutputInput)) {
    const int64_t limit = FirstValue(io.template HostInput<int64_t>(kMaxOutputInput), "max_output_boxes_per_class");
    in.max_output = limit > 0 ? limit : 0;
  }
  if (io.Has(kIouThresholdInput)) {
    in.iou_threshold = FirstValue(io.template HostInput<float>(kIouThresholdInput), "iou_threshold");
    Check(in.iou_threshold >= 0.0f && in.iou_threshold <= 1.0f, "input 'iou_threshold' must be in [0, 1], got ",
          in.iou_threshold);
  }
  if (io.Has(kScoreThresholdInput)) {
    in.score_threshold = FirstValue(io.template HostInput<float>(kScoreThresholdInput), "score_threshold");
  }
  return in;
}

}  // namespace ortops::non_max_suppression
