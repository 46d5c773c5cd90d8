// The device paths of BatchedNMS_TRT and BatchedNMSDynamic_TRT: device/multiclass_nms.h's
// selection (the CPU kernel's math/multiclass_nms.h: the same detections in the same order)
// with the CPU kernel's score test, IoU test and output rows (trt_batched_nms.h), every box
// sorted and sized once on the device.
#include "core/half.h"
#include "core/op_kernel.h"
#include "device/device_kernel.h"
#include "device/multiclass_nms.h"
#include "ops/trt_batched_nms/trt_batched_nms.h"

namespace ortops::trt_batched_nms {
namespace {

template <typename T>
struct SortBoxes {
  const T* boxes;
  TrtBatchedBox* sorted;
  bool pixel_sizes;
  ORTOPS_HD void operator()(int64_t i) const { sorted[i] = SortedBox(boxes + 4 * i, pixel_sizes); }
};

template <typename T>
struct TrtBatchedNmsProblem {
  const T* scores;
  int64_t count, classes;
  float score_threshold;
  TrtBatchedTest test;

  ORTOPS_HD float Score(int64_t b, int64_t n, int64_t c) const {
    return static_cast<float>(scores[(b * count + n) * classes + c]);
  }
  ORTOPS_HD bool Passes(int64_t b, int64_t n, int64_t c) const { return Score(b, n, c) > score_threshold; }
  ORTOPS_HD bool Suppresses(int64_t b, const NmsCandidate<float>& kept, const NmsCandidate<float>& candidate) const {
    return test.Suppresses(b, kept, candidate);
  }
};

template <typename T, bool kDynamic>
class BatchedNmsDeviceKernel : public device::DeviceKernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = kDynamic ? trt_batched_nms::kSchema : kStaticSchema;

  BatchedNmsDeviceKernel(const Attributes& attrs, const OpDef& def) : DeviceKernelBase(def), attributes_(attrs) {}

  void Compute(const device::DeviceIO& io) const {
    const TrtBatchedNmsInputs<T> in(io, attributes_);
    const int64_t batch = in.batch, count = in.count, keep_top_k = attributes_.keep_top_k;
    const BoxIndex box_index{count, in.columns};
    const auto [num_detections, out] = AllocateOutputs(io, in, attributes_, kDynamic);
    io.Fill(num_detections, 0, static_cast<size_t>(batch) * sizeof(int32_t));
    if (batch == 0 || keep_top_k == 0) return;

    const int64_t total_boxes = batch * count * in.columns;
    Scratch<TrtBatchedBox> sorted = io.Allocate<TrtBatchedBox>(static_cast<size_t>(total_boxes));
    io.ForEach(total_boxes, SortBoxes<T>{in.boxes.data, sorted.data(), !attributes_.normalized});
    const TrtBatchedNmsProblem<T> problem{
        in.scores.data, count, attributes_.num_classes, attributes_.score_threshold,
        TrtBatchedTest{sorted.data(), box_index, attributes_.PlusOne(), attributes_.iou_threshold}};
    const device::Detections<float> detections =
        device::MulticlassNms<float>(io, attributes_.Config(), batch, count, attributes_.num_classes, problem);
    io.ForEach(batch * keep_top_k,
               device::WriteDetectionRows<float, TrtBatchedRows<T>, int32_t>{
                   out, detections.rows.data(), detections.count.data(), keep_top_k, num_detections});
  }

 private:
  TrtBatchedNmsAttributes attributes_;
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<BatchedNmsDeviceKernel, true, float, Half>(def); }
std::vector<OpPtr> MakeStaticDevice(const OpDef& def) {
  return MakeOps<BatchedNmsDeviceKernel, false, float, Half>(def);
}

}  // namespace ortops::trt_batched_nms
