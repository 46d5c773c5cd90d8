// mmdeploy's TensorRT batched NMS nodes, TRTBatchedNMS and TRTBatchedRotatedNMS, with the
// contract of their plugins (mmdeploy csrc/mmdeploy/backend_ops/tensorrt/batched_nms,
// batched_rotated_nms and common_impl/nms, derived from TensorRT's batchedNMSPlugin).
#include "ops/batched_nms/mmdeploy_batched_nms.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>

#include "core/op_kernel.h"
#include "math/box_grid.h"
#include "math/box_iou.h"
#include "math/mmdeploy_rotated_iou.h"
#include "math/multiclass_nms.h"
#include "math/rotated_box.h"
#include "ops/batched_nms/batched_nms.h"
#include "ops/batched_nms/box_layout.h"
#include "ops/nms/group_index.h"

namespace ortops::batched_nms {

namespace {

// The group index of math/multiclass_nms.h for rotated boxes: kept ones in a grid over their
// axis-aligned bounds (the exact IoU of rectangles whose bounds do not overlap is 0), kept
// tiny ones as a flag (IoU 1 with every box). `slot_of` maps a candidate to its rectangle
// and tiny flag.
template <typename Candidate, typename SlotOf>
class RotatedGroupIndex {
 public:
  RotatedGroupIndex(const KernelIO& io, std::span<const Candidate> set, SlotOf slot_of, const RotatedRect* rects,
                    const char* tiny, double threshold)
      : slot_of_(slot_of),
        rects_(rects),
        tiny_(tiny),
        threshold_(threshold),
        slots_(io.Vector<size_t>(set.size())),
        tested_for_(io.Vector<int64_t>(set.size(), -1)),
        bounds_(io.Allocate<double>(4 * set.size())) {
    for (size_t i = 0; i < set.size(); ++i) slots_[i] = slot_of_(set[i]);
    std::sort(slots_.begin(), slots_.end());
    bool finite = true;
    for (size_t i = 0; i < set.size(); ++i) {
      const RotatedRect& r = rects_[slots_[i]];
      double* bound = bounds_.data() + 4 * i;
      bound[0] = r.center.x - r.half_x, bound[1] = r.center.y - r.half_y;
      bound[2] = r.center.x + r.half_x, bound[3] = r.center.y + r.half_y;
      for (int k = 0; k < 4; ++k) finite &= std::isfinite(bound[k]);
    }
    if (finite && threshold >= 0) {
      grid_.emplace(bounds_.data(), static_cast<int64_t>(set.size()), 0.0, io.Allocator<double>());
    }
  }

  bool Usable() const { return grid_.has_value(); }

  bool Suppressed(const Candidate& candidate) {
    const size_t slot = slot_of_(candidate);
    if (tiny_kept_ || (tiny_[slot] && any_kept_)) return 1.0 > threshold_;
    if (tiny_[slot]) return false;
    const auto i = Local(slot);
    return grid_->AnyNear(i, [&](int64_t k) {
      // A kept box spanning several cells is visited once per shared cell: test it once.
      int64_t& last = tested_for_[static_cast<size_t>(k)];
      if (last == i) return false;
      last = i;
      return RotatedIoU(rects_[slots_[static_cast<size_t>(k)]], rects_[slot]) > threshold_;
    });
  }

  void Keep(const Candidate& candidate) {
    const size_t slot = slot_of_(candidate);
    any_kept_ = true;
    if (tiny_[slot]) {
      tiny_kept_ = true;
    } else {
      grid_->Insert(Local(slot));
    }
  }

 private:
  // The candidate's position among the set's rectangles, which the grid is over.
  int64_t Local(size_t slot) const { return std::lower_bound(slots_.begin(), slots_.end(), slot) - slots_.begin(); }

  SlotOf slot_of_;
  const RotatedRect* rects_;
  const char* tiny_;
  double threshold_;
  ScratchVector<size_t> slots_;  // the set's rectangles, sorted
  ScratchVector<int64_t> tested_for_;
  Scratch<double> bounds_;  // of the set's rectangles, which the grid reads
  std::optional<BoxGrid<double, SessionAllocator<double>>> grid_;
  bool any_kept_ = false, tiny_kept_ = false;
};

template <typename T, bool kRotated>
class TrtBatchedNmsKernel : public KernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = kRotated ? kTrtRotatedSchema : kTrtSchema;
  static constexpr int64_t kBoxSize = kRotated ? 5 : 4;

  TrtBatchedNmsKernel(const Attributes& attrs, const OpDef& def) : KernelBase(def), attributes_(attrs, kRotated) {}

  void Compute(const KernelIO& io) const {
    const TrtBatchedNmsIo<T, kBoxSize> in(io, attributes_);
    const TrtBatchedNmsRows<T, kBoxSize> out(io, in, attributes_);
    const int64_t batch = in.batch, count = in.count, classes = in.classes, rows = attributes_.keep_topk;
    const BoxLayout<T>& layout = in.layout;
    const MulticlassNmsConfig config = attributes_.Config();

    const T score_threshold = static_cast<T>(attributes_.score_threshold);
    const auto passes = [score_threshold](T score) { return score > score_threshold; };
    const auto score_at = [&](int64_t b, int64_t n, int64_t c) {
      return in.scores.data[(b * count + n) * classes + c];
    };
    const auto emit = [&](int64_t b, std::span<const NmsCandidate<T>> detections) {
      const int64_t first = b * rows;
      for (size_t i = 0; i < detections.size(); ++i) out.Write(b, first + static_cast<int64_t>(i), detections[i]);
      for (int64_t row = first + static_cast<int64_t>(detections.size()); row < first + rows; ++row) out.Pad(row);
    };

    if constexpr (kRotated) {
      // Corners and bounds of every box once; pairs only read them. The plugin's IoU is 1 for
      // a pair with a tiny box (mmdeploy_rotated::TrtRotatedTiny), else that of the two
      // rectangles, which for sides of either sign are those of their absolute values.
      const auto total = static_cast<size_t>(batch * count * layout.per_class);
      Scratch<RotatedRect> rects = io.Allocate<RotatedRect>(total);
      Scratch<char> tiny = io.Allocate<char>(total);
      io.ParallelForRanges(total, 64, [&](size_t begin, size_t end) {
        for (size_t i = begin; i < end; ++i) {
          PrepareTrtRotatedBox(in.boxes.data + 5 * i, *std::construct_at(&rects[i]), tiny[i]);
        }
      });
      const double threshold = attributes_.iou_threshold;
      const TrtRotatedTest<T> test{rects.data(), tiny.data(), count, layout.per_class, threshold};
      const auto suppresses = [&](int64_t b, const NmsCandidate<T>& kept, const NmsCandidate<T>& candidate) {
        return test.Suppresses(b, kept, candidate);
      };
      const auto make_index = [&](int64_t b, std::span<const NmsCandidate<T>> set) {
        return RotatedGroupIndex(
            io, set, [&, b](const NmsCandidate<T>& c) { return static_cast<size_t>(test.Slot(b, c)); }, rects.data(),
            tiny.data(), threshold);
      };
      MulticlassNmsIndexed<T>(
          io, config, batch, count, classes, passes, score_at, [](T score) { return score; }, suppresses, emit,
          make_index);
    } else {
      const T threshold = static_cast<T>(attributes_.iou_threshold);
      const TrtBoxTest<T> test{layout, threshold};
      const auto suppresses = [&](int64_t b, const NmsCandidate<T>& kept, const NmsCandidate<T>& candidate) {
        return test.Suppresses(b, kept, candidate);
      };
      const auto make_index = [&](int64_t b, std::span<const NmsCandidate<T>> set) {
        const auto box_of = [&, b](const NmsCandidate<T>& c, T box[5]) {
          const T* v = layout.At(b, c.box, c.cls);
          box[0] = v[0], box[1] = v[1], box[2] = v[2], box[3] = v[3], box[4] = DetectionOutputArea(v);
        };
        return nms::MakeGridGroupIndex(io, set, box_of, nms::IouRule::kDetectionOutput, T(0), threshold);
      };
      MulticlassNmsIndexed<T>(
          io, config, batch, count, classes, passes, score_at, [](T score) { return score; }, suppresses, emit,
          make_index);
    }
  }

 private:
  TrtBatchedNmsAttributes attributes_;
};

}  // namespace

std::vector<OpPtr> MakeTrt(const OpDef& def) { return MakeOps<TrtBatchedNmsKernel, false, float, double>(def); }
std::vector<OpPtr> MakeTrtRotated(const OpDef& def) { return MakeOps<TrtBatchedNmsKernel, true, float, double>(def); }

}  // namespace ortops::batched_nms
