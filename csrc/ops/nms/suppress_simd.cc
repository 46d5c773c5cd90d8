// Compiled once per instruction-set level (core/isa.h).
#include <algorithm>
#include <cstdint>

#include "math/box_iou.h"
#include "ops/nms/suppress.h"

namespace ortops::nms::ORTOPS_ISA_NS {
namespace {

// Blocks of boxes are tested in a loop without an exit (which the compiler vectorises), then
// the block's answer is looked at: a suppressed candidate usually meets its suppressor
// early, while a kept one has to test every box anyway.
template <IouRule kRule, typename T>
bool Any(const BoxColumns<T>& kept, const Candidate<T>& c) {
  constexpr int64_t kBlock = 64;
  const T* __restrict x1 = kept.x1;
  const T* __restrict y1 = kept.y1;
  const T* __restrict x2 = kept.x2;
  const T* __restrict y2 = kept.y2;
  const T* __restrict area = kept.area;
  for (int64_t start = 0; start < kept.count; start += kBlock) {
    const int64_t stop = std::min(kept.count, start + kBlock);
    int hit = 0;
    for (int64_t k = start; k < stop; ++k) {
      bool passes;
      if constexpr (kRule == IouRule::kBox) {
        passes = BoxIoU(x1[k], y1[k], x2[k], y2[k], area[k], c.x1, c.y1, c.x2, c.y2, c.area, c.offset) > c.threshold;
      } else if constexpr (kRule == IouRule::kDetectionOutput) {
        passes = DetectionOutputIoU(x1[k], y1[k], x2[k], y2[k], area[k], c.x1, c.y1, c.x2, c.y2, c.area) > c.threshold;
      } else if constexpr (kRule == IouRule::kTrtBatched) {
        passes =
            TrtBatchedAbove(x1[k], y1[k], x2[k], y2[k], area[k], c.x1, c.y1, c.x2, c.y2, c.area, c.offset, c.threshold);
      } else if constexpr (kRule == IouRule::kOnnx) {
        passes = OnnxSuppresses(c.x1, c.y1, c.x2, c.y2, c.area, x1[k], y1[k], x2[k], y2[k], area[k], c.threshold);
      } else {
        passes = EfficientIoU(c.x1, c.y1, c.x2, c.y2, c.area, x1[k], y1[k], x2[k], y2[k], area[k]) >= c.threshold;
      }
      hit |= static_cast<int>(passes);
    }
    if (hit != 0) return true;
  }
  return false;
}

template <typename T>
bool AnyOfRule(const BoxColumns<T>& kept, const Candidate<T>& c) {
  switch (c.rule) {
    case IouRule::kBox: return Any<IouRule::kBox>(kept, c);
    case IouRule::kDetectionOutput: return Any<IouRule::kDetectionOutput>(kept, c);
    case IouRule::kTrtBatched: return Any<IouRule::kTrtBatched>(kept, c);
    case IouRule::kEfficient: return Any<IouRule::kEfficient>(kept, c);
    case IouRule::kOnnx: return Any<IouRule::kOnnx>(kept, c);
  }
  return false;
}

}  // namespace

bool AnySuppresses(const BoxColumns<float>& kept, const Candidate<float>& candidate) {
  return AnyOfRule(kept, candidate);
}
bool AnySuppresses(const BoxColumns<double>& kept, const Candidate<double>& candidate) {
  return AnyOfRule(kept, candidate);
}

}  // namespace ortops::nms::ORTOPS_ISA_NS
