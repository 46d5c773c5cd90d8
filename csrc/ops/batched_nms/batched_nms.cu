// The device paths of the batched NMS nodes of this folder: device/multiclass_nms.h's
// selection (the CPU kernels' math/multiclass_nms.h, the same detections in the same order)
// with each node's score test, IoU test and output rows, shared with its CPU kernel.
#include <thrust/copy.h>

#include "core/half.h"
#include "device/device_kernel.h"
#include "device/multiclass_nms.h"
#include "math/score_cutoff.h"
#include "ops/batched_nms/batched_nms.h"
#include "ops/batched_nms/ortops_batched_nms.h"

namespace ortops::batched_nms {
namespace {

// ortops' BatchedNMS as device::MulticlassNms asks for it.
template <typename T>
struct BatchedNmsProblem {
  using A = ComputeType<T>;
  const T* scores;
  int64_t count, classes;
  A cutoff;
  bool activation;
  BatchedNmsTest<T, A> test;

  ORTOPS_HD A Raw(int64_t b, int64_t n, int64_t c) const {
    return static_cast<A>(scores[(b * count + n) * classes + c]);
  }
  ORTOPS_HD bool Passes(int64_t b, int64_t n, int64_t c) const { return Raw(b, n, c) >= cutoff; }
  ORTOPS_HD A Score(int64_t b, int64_t n, int64_t c) const {
    const A score = Raw(b, n, c);
    return activation ? Sigmoid(score) : score;
  }
  ORTOPS_HD bool Suppresses(int64_t b, const NmsCandidate<A>& kept, const NmsCandidate<A>& candidate) const {
    return test.Suppresses(b, kept, candidate);
  }
};

// Row i = b rows + r of the outputs: image b's r-th detection, or padding.
template <typename T, typename Rows>
struct WriteRows {
  Rows out;
  const NmsCandidate<ComputeType<T>>* detections;
  const int64_t* found;
  int64_t rows;
  ORTOPS_HD void operator()(int64_t i) const {
    const int64_t b = i / rows;
    if (i % rows < found[b]) {
      out.Write(b, i, detections[i]);
    } else {
      out.Pad(i);
    }
  }
};

template <typename T>
class BatchedNmsDeviceKernel : public device::DeviceKernelBase {
 public:
  using Element = T;
  using A = ComputeType<T>;
  static constexpr const OpSchema& kSchema = batched_nms::kSchema;

  BatchedNmsDeviceKernel(const Attributes& attrs, const OpDef& def)
      : DeviceKernelBase(def),
        attributes_(attrs),
        cutoff_(ScoreCutoff<A>(attributes_.score_threshold, attributes_.score_activation == 1, /*strict=*/true)) {}

  void Compute(const device::DeviceIO& io) const {
    const auto [boxes, scores, batch, count, classes, shared] = ReadBatchedNmsInputs<T>(io, attributes_);
    const int64_t rows = attributes_.max_output;
    int64_t* num_detections = io.Output<int64_t>(0, {batch});
    const CornerBoxes<T, A> corners{BoxLayout<T>{boxes.data, count, shared ? 1 : classes, 4},
                                    attributes_.box_coding == 1};
    const BatchedNmsRows<T, A> out{corners, io.Output<T>(1, {batch, rows, 4}), io.Output<T>(2, {batch, rows}),
                                   io.Output<int64_t>(3, {batch, rows}), io.Output<int64_t>(4, {batch, rows})};
    const BatchedNmsProblem<T> problem{
        scores.data,
        count,
        classes,
        cutoff_,
        attributes_.score_activation == 1,
        BatchedNmsTest<T, A>{corners, static_cast<A>(attributes_.offset), static_cast<A>(attributes_.iou_threshold)}};
    const device::Detections<A> detections =
        device::MulticlassNms<A>(io, attributes_.Config(), batch, count, classes, problem);
    thrust::copy(io.policy(), detections.count.data(), detections.count.data() + batch, num_detections);
    io.ForEach(batch * rows,
               WriteRows<T, BatchedNmsRows<T, A>>{out, detections.rows.data(), detections.count.data(), rows});
  }

 private:
  BatchedNmsAttributes attributes_;
  A cutoff_;
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<BatchedNmsDeviceKernel, float, double, Half>(def); }

}  // namespace ortops::batched_nms
