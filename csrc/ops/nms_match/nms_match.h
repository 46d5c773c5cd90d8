#pragma once

#include <cmath>
#include <cstdint>

#include "core/custom_op.h"

namespace ortops::nms_match {
extern const OpSchema kSchema;
KernelFactory Make, MakeDevice;

// The thresholds are inputs 2 and 3, which the device kernel reads on the host.
inline constexpr size_t kIouThresholdInput = 2, kScoreThresholdInput = 3;

// An NMSMatch node's inputs, checked in the CPU kernel's order: boxes [B, N, 4], scores
// [B, C, N] and the two thresholds, each one value (read on the host). NaN in boxes and
// scores is left to the caller, which holds them on the host or the device.
template <typename T>
struct MatchInputs {
  ConstTensor<T> boxes, scores;
  float iou_threshold;
  T score_threshold;
};

inline float SingleValue(const ConstTensor<float>& t, const char* name) {
  Check(t.size() == 1, "input '", name, "' must hold one value, got shape ", ShapeText{t.shape});
  Check(!std::isnan(t.data[0]), "input '", name, "' is NaN");
  return t.data[0];
}

template <typename T, typename IO>
MatchInputs<T> ReadInputs(const IO& io) {
  MatchInputs<T> in{io.template Input<T>(0, 3), io.template Input<T>(1, 3), 0, T(0)};
  in.iou_threshold = SingleValue(io.template HostInput<float>(kIouThresholdInput), "iou_threshold");
  in.score_threshold =
      static_cast<T>(SingleValue(io.template HostInput<float>(kScoreThresholdInput), "score_threshold"));
  const int64_t batch = in.boxes.dim(0), count = in.boxes.dim(1);
  Check(in.boxes.dim(2) == 4, "input 'boxes' must have shape [B, N, 4], got ", ShapeText{in.boxes.shape});
  Check(in.scores.dim(0) == batch && in.scores.dim(2) == count, "input 'scores' must have shape [B, C, N] = [", batch,
        ", C, ", count, "], got ", ShapeText{in.scores.shape});
  return in;
}

inline constexpr const char* kBoxesNaN = "input 'boxes' contains NaN";
inline constexpr const char* kScoresNaN = "input 'scores' contains NaN";

}  // namespace ortops::nms_match
