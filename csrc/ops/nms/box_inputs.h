// The inputs shared by NMS and soft-NMS: boxes [N, 4] and scores [N].
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

#include "core/custom_op.h"

namespace ortops::nms {

inline constexpr IoSpec kBoxesInput{"boxes", ElemType::kTypeParam, "`[N, 4]` boxes as (x1, y1, x2, y2)"};
inline constexpr IoSpec kScoresInput{"scores", ElemType::kTypeParam, "`[N]` one score per box"};

// Checks shapes and NaN of inputs 0 (boxes) and 1 (scores); returns them.
template <typename T>
std::pair<ConstTensor<T>, ConstTensor<T>> BoxesAndScores(const KernelIO& io) {
  ConstTensor<T> boxes = io.Input<T>(0, 2);
  ConstTensor<T> scores = io.Input<T>(1, 1);
  Check(boxes.dim(1) == 4, "input 'boxes' must have shape [N, 4], got ", ShapeText{boxes.shape});
  Check(scores.dim(0) == boxes.dim(0), "input 'scores' must have shape [N] with N = ", boxes.dim(0),
        " (the number of boxes), got ", ShapeText{scores.shape});
  for (int64_t i = 0; i < boxes.size(); ++i) Check(!std::isnan(boxes.data[i]), "input 'boxes' contains NaN");
  for (int64_t i = 0; i < scores.size(); ++i) Check(!std::isnan(scores.data[i]), "input 'scores' contains NaN");
  return {std::move(boxes), std::move(scores)};
}

}  // namespace ortops::nms
