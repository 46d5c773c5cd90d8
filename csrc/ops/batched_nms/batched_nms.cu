// The device paths of the batched NMS nodes of this folder: device/multiclass_nms.h's
// selection (the CPU kernels' math/multiclass_nms.h, the same detections in the same order)
// with each node's score test, IoU test and output rows, shared with its CPU kernel.
#include <thrust/copy.h>

#include "core/half.h"
#include "core/op_kernel.h"
#include "device/device_kernel.h"
#include "device/multiclass_nms.h"
#include "ops/batched_nms/batched_nms.h"
#include "ops/batched_nms/mmdeploy_batched_nms.h"
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

template <typename T>
struct BatchedNmsDeviceKernel : OpKernel<T, kSchema, BatchedNmsSettings<ComputeType<T>>, device::DeviceKernelBase> {
  using OpKernel<T, kSchema, BatchedNmsSettings<ComputeType<T>>, device::DeviceKernelBase>::OpKernel;
  using A = ComputeType<T>;

  void Compute(const device::DeviceIO& io, const BatchedNmsSettings<A>& settings) const {
    const BatchedNmsInputs<T> in = ReadBatchedNmsInputs<T>(io, settings);
    const int64_t batch = in.batch, count = in.count, classes = in.classes, rows = settings.max_output;
    int64_t* num_detections = io.Output<int64_t>(0, {batch});
    const BatchedNmsRows<T, A> out = BatchedNmsOutputRows<T, A>(io, in, settings);
    const CornerBoxes<T, A>& corners = out.boxes;
    const BatchedNmsProblem<T> problem{
        in.scores.data,
        count,
        classes,
        settings.cutoff,
        settings.score_activation == 1,
        BatchedNmsTest<T, A>{corners, static_cast<A>(settings.offset), static_cast<A>(settings.iou_threshold)}};
    const device::Detections<A> detections =
        device::MulticlassNms<A>(io, settings.Config(), batch, count, classes, problem);
    thrust::copy(io.policy(), detections.count.data(), detections.count.data() + batch, num_detections);
    io.ForEach(batch * rows, device::WriteDetectionRows<A, BatchedNmsRows<T, A>>{out, detections.rows.data(),
                                                                                 detections.count.data(), rows});
  }
};

// mmdeploy's TRTBatchedNMS and TRTBatchedRotatedNMS as device::MulticlassNms asks for them.
template <typename T, typename Test>
struct TrtBatchedNmsProblem {
  const T* scores;
  int64_t count, classes;
  T score_threshold;
  Test test;

  ORTOPS_HD bool Passes(int64_t b, int64_t n, int64_t c) const { return Score(b, n, c) > score_threshold; }
  ORTOPS_HD T Score(int64_t b, int64_t n, int64_t c) const { return scores[(b * count + n) * classes + c]; }
  ORTOPS_HD bool Suppresses(int64_t b, const NmsCandidate<T>& kept, const NmsCandidate<T>& candidate) const {
    return test.Suppresses(b, kept, candidate);
  }
};

template <typename T>
struct PrepareTrtRotatedBoxes {
  const T* boxes;
  RotatedRect* rects;
  char* tiny;
  ORTOPS_HD void operator()(int64_t i) const { PrepareTrtRotatedBox(boxes + 5 * i, rects[i], tiny[i]); }
};

template <typename T, bool kRotated>
class TrtBatchedNmsDeviceKernel : public device::DeviceKernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = kRotated ? kTrtRotatedSchema : kTrtSchema;
  static constexpr int64_t kBoxSize = kRotated ? 5 : 4;

  TrtBatchedNmsDeviceKernel(const Attributes& attrs, const OpDef& def)
      : DeviceKernelBase(def), attributes_(attrs, kRotated) {}

  void Compute(const device::DeviceIO& io) const {
    const TrtBatchedNmsIo<T, kBoxSize> in(io, attributes_);
    const TrtBatchedNmsRows<T, kBoxSize> out(io, in, attributes_);
    const T score_threshold = static_cast<T>(attributes_.score_threshold);
    if constexpr (kRotated) {
      const int64_t total = in.batch * in.count * in.layout.per_class;
      Scratch<RotatedRect> rects = io.Allocate<RotatedRect>(static_cast<size_t>(total));
      Scratch<char> tiny = io.Allocate<char>(static_cast<size_t>(total));
      io.ForEach(total, PrepareTrtRotatedBoxes<T>{in.boxes.data, rects.data(), tiny.data()});
      const TrtRotatedTest<T> test{rects.data(), tiny.data(), in.count, in.layout.per_class,
                                   static_cast<double>(attributes_.iou_threshold)};
      Run(io, in, out,
          TrtBatchedNmsProblem<T, TrtRotatedTest<T>>{in.scores.data, in.count, in.classes, score_threshold, test});
    } else {
      const TrtBoxTest<T> test{in.layout, static_cast<T>(attributes_.iou_threshold)};
      Run(io, in, out,
          TrtBatchedNmsProblem<T, TrtBoxTest<T>>{in.scores.data, in.count, in.classes, score_threshold, test});
    }
  }

 private:
  template <typename Problem>
  void Run(const device::DeviceIO& io, const TrtBatchedNmsIo<T, kBoxSize>& in,
           const TrtBatchedNmsRows<T, kBoxSize>& out, const Problem& problem) const {
    const device::Detections<T> detections =
        device::MulticlassNms<T>(io, attributes_.Config(), in.batch, in.count, in.classes, problem);
    const int64_t rows = attributes_.keep_topk;
    io.ForEach(in.batch * rows, device::WriteDetectionRows<T, TrtBatchedNmsRows<T, kBoxSize>>{
                                    out, detections.rows.data(), detections.count.data(), rows});
  }

  TrtBatchedNmsAttributes attributes_;
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<BatchedNmsDeviceKernel, float, double, Half>(def); }

std::vector<OpPtr> MakeTrtDevice(const OpDef& def) {
  return MakeOps<TrtBatchedNmsDeviceKernel, false, float, double>(def);
}
std::vector<OpPtr> MakeTrtRotatedDevice(const OpDef& def) {
  return MakeOps<TrtBatchedNmsDeviceKernel, true, float, double>(def);
}

}  // namespace ortops::batched_nms
