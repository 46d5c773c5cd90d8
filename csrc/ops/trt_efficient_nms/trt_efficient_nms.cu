// EfficientNMS_TRT's device path: device/multiclass_nms.h's selection (the CPU kernel's
// math/multiclass_nms.h: the same detections in the same order) with the CPU kernel's score
// test, decoder, IoU test and output rows (trt_efficient_nms.h), boxes decoded once per slot
// on the device.
#include "device/device_kernel.h"
#include "device/multiclass_nms.h"
#include "ops/trt_efficient_nms/trt_efficient_nms.h"

namespace ortops::trt_efficient_nms {
namespace {

template <typename T>
struct PrepareIouBoxes {
  EfficientBoxes<T> layout;
  IouBox* boxes;
  ORTOPS_HD void operator()(int64_t slot) const { PrepareIouBox(layout, slot, boxes[slot]); }
};

template <typename T>
struct EfficientNmsProblem {
  const T* scores;
  int64_t anchors_count, classes;
  float score_threshold;
  EfficientTest<T> test;

  ORTOPS_HD float Score(int64_t b, int64_t n, int64_t c) const {
    return static_cast<float>(scores[(b * anchors_count + n) * classes + c]);
  }
  ORTOPS_HD bool Passes(int64_t b, int64_t n, int64_t c) const { return Score(b, n, c) >= score_threshold; }
  ORTOPS_HD bool Suppresses(int64_t b, const NmsCandidate<float>& kept, const NmsCandidate<float>& candidate) const {
    return test.Suppresses(b, kept, candidate);
  }
};

template <typename T>
class EfficientNmsDeviceKernel : public device::DeviceKernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = trt_efficient_nms::kSchema;

  EfficientNmsDeviceKernel(const Attributes& attrs, const OpDef& def) : DeviceKernelBase(def), attributes_(attrs) {}

  void Compute(const device::DeviceIO& io) const {
    const EfficientNmsInputs<T> in(io, attributes_.box_coding);
    const int64_t batch = in.batch, max_output = attributes_.max_output;
    int32_t* num_detections = io.Output<int32_t>(0, {batch, 1});
    const EfficientRows<T> out{in.layout, io.Output<T>(1, {batch, max_output, 4}), io.Output<T>(2, {batch, max_output}),
                               io.Output<int32_t>(3, {batch, max_output}), attributes_.score_activation != 0};
    const auto rows = static_cast<size_t>(batch * max_output);
    io.Fill(num_detections, 0, static_cast<size_t>(batch) * sizeof(int32_t));
    io.Fill(out.out_boxes, 0, 4 * rows * sizeof(T));  // +0 in every element type
    io.Fill(out.out_scores, 0, rows * sizeof(T));
    io.Fill(out.out_classes, 0, rows * sizeof(int32_t));
    if (batch == 0 || in.anchors_count == 0 || in.classes == 0) return;

    const int64_t total_boxes = batch * in.layout.PerImage();
    Scratch<IouBox> iou_boxes = io.Allocate<IouBox>(static_cast<size_t>(total_boxes));
    io.ForEach(total_boxes, PrepareIouBoxes<T>{in.layout, iou_boxes.data()});
    const EfficientNmsProblem<T> problem{in.scores.data, in.anchors_count, in.classes, attributes_.score_threshold,
                                         EfficientTest<T>{in.layout, iou_boxes.data(), attributes_.iou_threshold}};
    const device::Detections<float> detections =
        device::MulticlassNms<float>(io, attributes_.Config(), batch, in.anchors_count, in.classes, problem);
    io.ForEach(batch * max_output,
               device::WriteDetectionRows<float, EfficientRows<T>, int32_t>{
                   out, detections.rows.data(), detections.count.data(), max_output, num_detections});
  }

 private:
  EfficientNmsAttributes<T> attributes_;
};

}  // namespace

// Float32 only, as the CPU kernel (see Make).
std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<EfficientNmsDeviceKernel, float>(def); }

}  // namespace ortops::trt_efficient_nms
