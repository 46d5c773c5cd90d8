// The group index of math/multiclass_nms.h for the batched NMS ops whose IoU is one of
// suppress.h's rules: the group's kept candidates in a KeptBoxGrid.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>

#include "core/kernel_io.h"
#include "ops/nms/kept_box_grid.h"
#include "ops/nms/suppress.h"

namespace ortops::nms {

// box_of(candidate, T box[5]) writes a candidate's box as the rule reads it: (x1, y1, x2, y2)
// (sorted or reordered corners where the rule's IoU sorts them) and its area as the rule
// computes areas. `offset` is the rule's (Candidate::offset), which is also how far the grid
// extends each box.
template <typename T, typename NmsCandidate, typename BoxOf>
class GridGroupIndex {
 public:
  GridGroupIndex(const KernelIO& io, std::span<const NmsCandidate> set, BoxOf box_of, IouRule rule, T offset,
                 T threshold)
      : box_of_(box_of), rule_(rule), offset_(offset), threshold_(threshold), corners_(io.Allocate<T>(4 * set.size())) {
    bool finite = true;
    T smallest = std::numeric_limits<T>::infinity();
    for (size_t i = 0; i < set.size(); ++i) {
      T box[5];
      box_of_(set[i], box);
      for (int k = 0; k < 4; ++k) corners_[4 * i + static_cast<size_t>(k)] = box[k];
      finite &= std::isfinite(box[0]) & std::isfinite(box[1]) & std::isfinite(box[2]) & std::isfinite(box[3]);
      smallest = std::min(smallest, box[4]);
    }
    if (finite && OnlyOverlapsCount(smallest)) {
      grid_.emplace(io, corners_.data(), static_cast<int64_t>(set.size()), offset);
    }
  }

  bool Usable() const { return grid_.has_value(); }
  bool Suppressed(const NmsCandidate& candidate) const { return grid_->Suppresses(Query(candidate)); }
  void Keep(const NmsCandidate& candidate) { grid_->Insert(Query(candidate)); }

 private:
  // Whether no pair of boxes that do not overlap (by the grid's test) passes the threshold,
  // given the smallest area among the boxes.
  bool OnlyOverlapsCount(T smallest_area) const {
    switch (rule_) {
      case IouRule::kBox:
      case IouRule::kDetectionOutput: return threshold_ >= T(0);  // IoU 0, or NaN for two empty boxes
      case IouRule::kEfficient: return threshold_ > T(0);         // IoU 0, compared >=
      case IouRule::kOnnx: return threshold_ >= T(0);             // needs a positive intersection
      case IouRule::kTrtBatched: {
        if (!(threshold_ >= T(0))) return false;
        if (offset_ == T(0)) return true;
        // With Caffe's +1, disjoint boxes have IoU 1 / (size_a + size_b - 1), which only
        // decreases as the sizes grow: the smallest sizes give the largest.
        const T rest = smallest_area + smallest_area - T(1);
        return rest > T(0) && !(T(1) / rest > threshold_);
      }
    }
    return false;
  }

  Candidate<T> Query(const NmsCandidate& candidate) const {
    T box[5];
    box_of_(candidate, box);
    return Candidate<T>{box[0], box[1], box[2], box[3], box[4], offset_, threshold_, rule_};
  }

  BoxOf box_of_;
  IouRule rule_;
  T offset_, threshold_;
  Scratch<T> corners_;  // of the set's boxes, which the grid's cells were made from
  std::optional<KeptBoxGrid<T>> grid_;
};

template <typename T, typename NmsCandidate, typename BoxOf>
GridGroupIndex<T, NmsCandidate, BoxOf> MakeGridGroupIndex(const KernelIO& io, std::span<const NmsCandidate> set,
                                                          BoxOf box_of, IouRule rule, T offset, T threshold) {
  return GridGroupIndex<T, NmsCandidate, BoxOf>(io, set, box_of, rule, offset, threshold);
}

}  // namespace ortops::nms
