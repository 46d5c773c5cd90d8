// The test at the heart of greedy NMS: does any kept box overlap a candidate by more than
// the threshold? Compiled per instruction-set level (core/isa.h) in suppress_simd.cc, for the
// IoU of each op of the NMS family (math/box_iou.h).
#pragma once

#include <cstdint>

#include "core/isa.h"

namespace ortops::nms {

// Kept boxes stored one array per coordinate (and their areas), so that a test of many of
// them runs in vector lanes.
template <typename T>
struct BoxColumns {
  const T* x1;
  const T* y1;
  const T* x2;
  const T* y2;
  const T* area;
  int64_t count;
};

// Which IoU, and which comparison with the threshold.
enum class IouRule : int32_t {
  kBox,              // BoxIoU(kept, candidate) > threshold, areas BoxArea (NMS, BatchedNMS)
  kDetectionOutput,  // DetectionOutputIoU(kept, candidate) > threshold (TRTBatchedNMS)
  kTrtBatched,       // TrtBatchedIoU(kept, candidate) > threshold, `offset` its plus (BatchedNMS_TRT),
                     // where disjoint boxes cannot pass (TrtBatchedAbove)
  kEfficient,        // EfficientIoU(candidate, kept) >= threshold (EfficientNMS_TRT)
  kOnnx,             // OnnxSuppresses(candidate, kept, threshold), boxes as OnnxNmsBox's (lo0, lo1, hi0,
                     // hi1) in (x1, y1, x2, y2) (ONNX NonMaxSuppression)
};

// The candidate box, its area as the rule computes areas, and the rule: `offset` is BoxIoU's
// legacy +1 (kBox) or TrtBatchedIoU's plus (kTrtBatched), unused otherwise.
template <typename T>
struct Candidate {
  T x1, y1, x2, y2, area, offset, threshold;
  IouRule rule = IouRule::kBox;
};

// Whether the rule's IoU of kept[k] and the candidate passes the threshold for some
// k < kept.count. Every pair's IoU is computed with its function's operations in their order,
// so every level gives the same answer. The boxes must not hold NaN (kTrtBatched takes min /
// max for fmin / fmax).
ORTOPS_ISA_DECLARE(bool AnySuppresses(const BoxColumns<float>& kept, const Candidate<float>& candidate);
                   bool AnySuppresses(const BoxColumns<double>& kept, const Candidate<double>& candidate))

}  // namespace ortops::nms
