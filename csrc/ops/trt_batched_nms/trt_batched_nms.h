// TensorRT's BatchedNMS_TRT and BatchedNMSDynamic_TRT, and the parts their CPU kernels
// (trt_batched_nms.cc) and device kernels (trt_batched_nms.cu) share: attributes, input
// checks, the IoU test and the output rows.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/custom_op.h"
#include "core/host_device.h"
#include "math/box_iou.h"
#include "math/multiclass_nms.h"

namespace ortops::trt_batched_nms {
// BatchedNMSDynamic_TRT: num_detections [B, 1].
extern const OpSchema kSchema;
// BatchedNMS_TRT (TensorRT's implicit-batch plugin): num_detections [B].
extern const OpSchema kStaticSchema;
KernelFactory Make, MakeStatic, MakeDevice, MakeStaticDevice;

inline constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

inline int64_t Boolean(const Attributes& attrs, const char* name) {
  const int64_t value = attrs.Int(name);
  Check(value == 0 || value == 1, "attribute '", name, "' must be 0 or 1, got ", value);
  return value;
}

struct TrtBatchedNmsAttributes {
  explicit TrtBatchedNmsAttributes(const Attributes& attrs)
      : share_location(Boolean(attrs, "shareLocation")),
        background_class(attrs.Int("backgroundLabelId")),
        num_classes(attrs.Int("numClasses")),
        top_k(attrs.Int("topK")),
        keep_top_k(attrs.Int("keepTopK")),
        score_threshold(attrs.Float("scoreThreshold")),
        iou_threshold(attrs.Float("iouThreshold")),
        normalized(Boolean(attrs, "isNormalized")),
        clip_boxes(Boolean(attrs, "clipBoxes")),
        caffe_semantics(Boolean(attrs, "caffeSemantics")) {
    Check(num_classes >= 1 && num_classes <= kInt32Max, "attribute 'numClasses' must be in [1, ", kInt32Max, "], got ",
          num_classes);
    Check(top_k >= 1 && top_k <= kInt32Max, "attribute 'topK' must be in [1, ", kInt32Max, "], got ", top_k);
    Check(keep_top_k >= 0 && keep_top_k <= top_k, "attribute 'keepTopK' must be in [0, topK = ", top_k,
          "] (TensorRT's plugin outputs nothing when it is larger), got ", keep_top_k);
    Check(!std::isnan(score_threshold), "attribute 'scoreThreshold' is NaN");
    Check(!std::isnan(iou_threshold), "attribute 'iouThreshold' is NaN");
  }

  MulticlassNmsConfig Config() const {
    MulticlassNmsConfig config;
    config.background_class = background_class;
    config.pre_topk = top_k;
    config.max_output = keep_top_k;
    config.ties_class_first = true;  // the plugin's final sort is stable over classes in order
    return config;
  }
  // Caffe semantics on unnormalized boxes: +1 to the intersection's sides.
  bool PlusOne() const { return !normalized && caffe_semantics; }

  int64_t share_location, background_class, num_classes, top_k, keep_top_k;
  float score_threshold, iou_threshold;
  int64_t normalized, clip_boxes, caffe_semantics;
};

// The inputs of a node of a KernelIO or a device::DeviceIO, checked.
template <typename T>
struct TrtBatchedNmsInputs {
  ConstTensor<T> boxes, scores;
  int64_t batch, count, columns;

  template <typename IO>
  TrtBatchedNmsInputs(const IO& io, const TrtBatchedNmsAttributes& attributes)
      : boxes(io.template Input<T>(0)), scores(io.template Input<T>(1)) {
    const int64_t num_classes = attributes.num_classes;
    Check((scores.rank() == 3 || (scores.rank() == 4 && scores.dim(3) == 1)) && scores.dim(2) == num_classes,
          "input 'scores' must have shape [B, N, numClasses] (or [B, N, numClasses, 1]) with numClasses = ",
          num_classes, ", got ", ShapeText{scores.shape});
    batch = scores.dim(0), count = scores.dim(1);
    columns = attributes.share_location ? 1 : num_classes;
    Check(boxes.rank() == 4 && boxes.dim(0) == batch && boxes.dim(1) == count && boxes.dim(2) == columns &&
              boxes.dim(3) == 4,
          "input 'boxes' must have shape [B, N, ", columns, ", 4] with B = ", batch, " and N = ", count,
          " (from input 'scores' of shape ", ShapeText{scores.shape},
          ") and shareLocation = ", attributes.share_location, ", got ", ShapeText{boxes.shape});
    Check(count <= kInt32Max, "input 'scores' of shape ", ShapeText{scores.shape}, " has more than ", kInt32Max,
          " boxes");
  }
};

// Where candidate (box, class) of image b reads its box: [B, N, columns, 4].
struct BoxIndex {
  int64_t count, columns;
  ORTOPS_HD int64_t operator()(int64_t b, const NmsCandidate<float>& c) const {
    return (b * count + c.box) * columns + (columns == 1 ? 0 : c.cls);
  }
};

template <typename T>
ORTOPS_HD inline TrtBatchedBox SortedBox(const T* box, bool pixel_sizes) {
  const float corners[4] = {static_cast<float>(box[0]), static_cast<float>(box[1]), static_cast<float>(box[2]),
                            static_cast<float>(box[3])};
  return SortTrtBatchedBox(corners, pixel_sizes);
}

struct TrtBatchedTest {
  const TrtBatchedBox* sorted;
  BoxIndex index;
  bool plus_one;
  float threshold;
  ORTOPS_HD bool Suppresses(int64_t b, const NmsCandidate<float>& kept, const NmsCandidate<float>& candidate) const {
    return TrtBatchedIoU(sorted[index(b, kept)], sorted[index(b, candidate)], plus_one) > threshold;
  }
};

// Detection row `row` (= b keepTopK + r) of outputs 1 to 3 (Write), or the fill of a row past
// the detections (Pad: 0, and class -1; the CPU kernel fills every row first instead).
template <typename T>
struct TrtBatchedRows {
  const T* boxes;
  BoxIndex index;
  T* out_boxes;
  T* out_scores;
  T* out_classes;
  bool clip;
  ORTOPS_HD void Write(int64_t b, int64_t row, const NmsCandidate<float>& d) const {
    const T* box = boxes + 4 * index(b, d);
    for (int i = 0; i < 4; ++i) {
      out_boxes[4 * row + i] = clip ? static_cast<T>(ClampToUnitAsCuda(static_cast<float>(box[i]))) : box[i];
    }
    out_scores[row] = static_cast<T>(d.score);
    out_classes[row] = static_cast<T>(static_cast<float>(d.cls));
  }
  ORTOPS_HD void Pad(int64_t row) const {
    for (int i = 0; i < 4; ++i) out_boxes[4 * row + i] = T(0);
    out_scores[row] = T(0);
    out_classes[row] = T(-1);
  }
};

// Outputs 0 (num_detections: [B, 1] for the dynamic node, [B] for the static one) to 3.
template <typename T>
struct TrtBatchedOutputs {
  int32_t* num_detections;
  TrtBatchedRows<T> rows;
};

template <typename T, typename IO>
TrtBatchedOutputs<T> AllocateOutputs(const IO& io, const TrtBatchedNmsInputs<T>& in,
                                     const TrtBatchedNmsAttributes& attributes, bool dynamic) {
  const int64_t batch = in.batch, keep_top_k = attributes.keep_top_k;
  int32_t* num_detections = io.template Output<int32_t>(0, dynamic ? Shape{batch, 1} : Shape{batch});
  return {num_detections, TrtBatchedRows<T>{in.boxes.data, BoxIndex{in.count, in.columns},
                                            io.template Output<T>(1, {batch, keep_top_k, 4}),
                                            io.template Output<T>(2, {batch, keep_top_k}),
                                            io.template Output<T>(3, {batch, keep_top_k}), attributes.clip_boxes != 0}};
}

}  // namespace ortops::trt_batched_nms
