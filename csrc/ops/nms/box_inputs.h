// The inputs shared by NMS and soft-NMS: boxes [N, 4] and scores [N].
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

#include "core/custom_op.h"
#include "core/host_device.h"

namespace ortops::nms {

inline constexpr const char* kBoxesNaN = "input 'boxes' contains NaN";
inline constexpr const char* kScoresNaN = "input 'scores' contains NaN";

// Checks the shapes of inputs 0 (boxes) and 1 (scores) of a KernelIO or a device::DeviceIO;
// returns them.
template <typename T, typename IO>
std::pair<ConstTensor<T>, ConstTensor<T>> BoxesAndScoresInputs(const IO& io) {
  ConstTensor<T> boxes = io.template Input<T>(0, 2);
  ConstTensor<T> scores = io.template Input<T>(1, 1);
  Check(boxes.dim(1) == 4, "input 'boxes' must have shape [N, 4], got ", ShapeText{boxes.shape});
  Check(scores.dim(0) == boxes.dim(0), "input 'scores' must have shape [N] with N = ", boxes.dim(0),
        " (the number of boxes), got ", ShapeText{scores.shape});
  return {std::move(boxes), std::move(scores)};
}

// BoxesAndScoresInputs, and no NaN in either (host memory).
template <typename T>
std::pair<ConstTensor<T>, ConstTensor<T>> BoxesAndScores(const KernelIO& io) {
  auto inputs = BoxesAndScoresInputs<T>(io);
  const auto& [boxes, scores] = inputs;
  for (int64_t i = 0; i < boxes.size(); ++i) Check(!std::isnan(boxes.data[i]), kBoxesNaN);
  for (int64_t i = 0; i < scores.size(); ++i) Check(!std::isnan(scores.data[i]), kScoresNaN);
  return inputs;
}

// For the device kernels' check (device memory): item i of boxes (the first 4 N) then scores is NaN.
template <typename T>
struct IsNaNInBoxesOrScores {
  const T* boxes;
  const T* scores;
  int64_t box_values;
  ORTOPS_HD bool operator()(int64_t i) const {
    const T value = i < box_values ? boxes[i] : scores[i - box_values];
    return value != value;
  }
};

}  // namespace ortops::nms
