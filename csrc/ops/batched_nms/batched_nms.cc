// ortops' BatchedNMS: multi-class NMS per image with fixed-size, padded outputs.
#include "ops/batched_nms/batched_nms.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/half.h"
#include "math/box_iou.h"
#include "math/multiclass_nms.h"
#include "ops/batched_nms/ortops_batched_nms.h"
#include "ops/nms/group_index.h"

namespace ortops::batched_nms {

namespace {

template <typename T>
struct BatchedNmsKernel : OpKernel<T, kSchema, BatchedNmsSettings<ComputeType<T>>> {
  using OpKernel<T, kSchema, BatchedNmsSettings<ComputeType<T>>>::OpKernel;
  using A = ComputeType<T>;

  void Compute(const KernelIO& io, const BatchedNmsSettings<A>& settings) const {
    const BatchedNmsInputs<T> in = ReadBatchedNmsInputs<T>(io, settings);
    const int64_t batch = in.batch, count = in.count, classes = in.classes, rows = settings.max_output;
    int64_t* num_detections = io.Output<int64_t>(0, {batch});
    const BatchedNmsRows<T, A> out = BatchedNmsOutputRows<T, A>(io, in, settings);
    const CornerBoxes<T, A>& corners = out.boxes;

    const A cutoff = settings.cutoff;
    const auto passes = [cutoff](A score) { return score >= cutoff; };
    const auto score_at = [&](int64_t b, int64_t n, int64_t c) {
      return static_cast<A>(in.scores.data[(b * count + n) * classes + c]);
    };
    const A offset = static_cast<A>(settings.offset);
    const A threshold = static_cast<A>(settings.iou_threshold);
    const BatchedNmsTest<T, A> test{corners, offset, threshold};
    const auto suppresses = [&](int64_t b, const NmsCandidate<A>& kept, const NmsCandidate<A>& candidate) {
      return test.Suppresses(b, kept, candidate);
    };
    const auto emit = [&](int64_t b, std::span<const NmsCandidate<A>> detections) {
      num_detections[b] = static_cast<int64_t>(detections.size());
      const int64_t first = b * rows;
      for (size_t i = 0; i < detections.size(); ++i) out.Write(b, first + static_cast<int64_t>(i), detections[i]);
      for (int64_t row = first + static_cast<int64_t>(detections.size()); row < first + rows; ++row) out.Pad(row);
    };
    // Large groups test a candidate only against the kept boxes near it (ops/nms/group_index.h).
    const auto make_index = [&](int64_t b, std::span<const NmsCandidate<A>> set) {
      const auto box_of = [&, b](const NmsCandidate<A>& c, A box[5]) {
        corners.Corners(b, c.box, c.cls, box);
        box[4] = BoxArea(box, offset);
      };
      return nms::MakeGridGroupIndex(io, set, box_of, nms::IouRule::kBox, offset, threshold);
    };
    const MulticlassNmsConfig config = settings.Config();
    if (settings.score_activation == 1) {
      MulticlassNmsIndexed<A>(
          io, config, batch, count, classes, passes, score_at, [](A score) { return Sigmoid(score); }, suppresses, emit,
          make_index);
    } else {
      MulticlassNmsIndexed<A>(
          io, config, batch, count, classes, passes, score_at, [](A score) { return score; }, suppresses, emit,
          make_index);
    }
  }
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<BatchedNmsKernel, float, double, Half>(def); }

}  // namespace ortops::batched_nms
