// The test at the heart of greedy NMS: does any kept box overlap a candidate by more than
// the threshold? Compiled per instruction-set level (core/isa.h) in suppress_simd.cc.
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

// The candidate box and the rule: IoU as BoxIoU(kept, candidate) (math/box_iou.h) with
// areas (x2 - x1 + offset) * (y2 - y1 + offset), compared strictly greater than threshold.
template <typename T>
struct Candidate {
  T x1, y1, x2, y2, area, offset, threshold;
};

// Whether BoxIoU(kept[k], candidate) > threshold for some k < kept.count. Every pair's IoU is
// computed with BoxIoU's operations in its order, so every level gives the same answer.
ORTOPS_ISA_DECLARE(bool AnySuppresses(const BoxColumns<float>& kept, const Candidate<float>& candidate);
                   bool AnySuppresses(const BoxColumns<double>& kept, const Candidate<double>& candidate))

}  // namespace ortops::nms
