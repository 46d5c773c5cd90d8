// NMSRotated's device path: every (batch, class) a segment of the greedy pass of
// device/greedy_nms.h, its boxes in the CPU kernel's score order (device/sort.h), every
// pair's test the CPU kernel's own (nms_rotated::Suppresses: the exact IoU in float64, and in
// mmdeploy's domain the original's float32 arithmetic for degenerate boxes), the kept boxes
// at or below the score threshold left out afterwards; the same rows as the CPU kernel.

#include "device/device_kernel.h"
#include "device/greedy_nms.h"
#include "device/sort.h"
#include "ops/nms_rotated/nms_rotated.h"

namespace ortops::nms_rotated {
namespace {

using mmdeploy_rotated::RawBox;

template <typename T>
struct PrepareBoxes {
  const T* boxes;
  RotatedRect* rects;
  RawBox<T>* raw;  // null outside mmdeploy's domain
  char* proper;
  char* finite;
  ORTOPS_HD void operator()(int64_t i) const {
    const T* box = boxes + 5 * i;
    PrepareBox(box, raw != nullptr, rects[i], raw != nullptr ? raw + i : nullptr, proper[i]);
    bool all_finite = true;
    for (int k = 0; k < 5; ++k) all_finite = all_finite && std::isfinite(box[k]);
    finite[i] = all_finite ? 1 : 0;
  }
};

// Positions i < j of segment s = b * C + c: the boxes order[s N + i] % N and order[s N + j] % N
// of image b.
template <typename T>
struct SuppressesInSegment {
  const int64_t* order;
  const RotatedRect* rects;
  const RawBox<T>* raw;
  const char* proper;
  const char* finite;
  int64_t classes, count;
  float iou_threshold;
  ORTOPS_HD bool operator()(int64_t segment, int64_t i, int64_t j) const {
    const int64_t image = segment / classes * count;
    const int64_t k = image + order[segment * count + i] % count, x = image + order[segment * count + j] % count;
    // A box that is not finite is refused by the check, whose answer the host reads only at
    // the end: it suppresses nothing meanwhile, and never reaches mmdeploy's hull arithmetic.
    return finite[k] && finite[x] && Suppresses(rects, raw, proper, k, x, iou_threshold);
  }
};

// Per segment: drops the kept positions whose score is at or below the threshold (they have
// suppressed; they are not emitted), in place, and leaves the number emitted.
template <typename T>
struct EmittedOnly {
  const T* scores;
  const int64_t* order;
  int64_t* kept;
  int64_t* kept_count;
  int64_t count;
  T score_threshold;
  ORTOPS_HD void operator()(int64_t segment) const {
    int64_t* positions = kept + segment * count;
    int64_t emitted = 0;
    for (int64_t k = 0; k < kept_count[segment]; ++k) {
      if (scores[order[segment * count + positions[k]]] > score_threshold) positions[emitted++] = positions[k];
    }
    kept_count[segment] = emitted;
  }
};

template <typename T>
class NmsRotatedDeviceKernel : public device::DeviceKernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = nms_rotated::kSchema;

  NmsRotatedDeviceKernel(const Attributes& attrs, const OpDef& def) : DeviceKernelBase(def), attributes_(attrs, def) {}

  void Compute(const device::DeviceIO& io) const {
    const auto [boxes, scores] = BoxesAndScoresInputs<T>(io);
    const int64_t batch = boxes.dim(0), count = boxes.dim(1), classes = scores.dim(1);
    if (scores.size() == 0) {  // no box or no class: nothing to keep, and B * C may be huge
      device::CheckEach(io, boxes.data, boxes.size(), 1, device::IsNotFinite<T>{boxes.data},
                        [&](int64_t i, const T* value) { FailNotFinite(boxes.shape, "boxes", i, *value); });
      io.Output<int64_t>(0, {0, 3});
      return;
    }
    // Both inputs are checked on the device as the boxes are kept, and the host reads the
    // first value that fails with the output's size: one wait for both.
    Scratch<int64_t> refused = io.Allocate<int64_t>(1);
    io.FirstWhereInto(
        boxes.size() + scores.size(),
        device::EitherFails<device::IsNotFinite<T>, device::IsNotFinite<T>>{{boxes.data}, {scores.data}, boxes.size()},
        refused.data());

    const bool compat = attributes_.compat;
    const int64_t total_boxes = batch * count, segments = batch * classes;
    Scratch<RotatedRect> rects = io.Allocate<RotatedRect>(static_cast<size_t>(total_boxes));
    Scratch<RawBox<T>> raw = io.Allocate<RawBox<T>>(compat ? static_cast<size_t>(total_boxes) : 0);
    Scratch<char> proper = io.Allocate<char>(static_cast<size_t>(total_boxes));
    Scratch<char> finite = io.Allocate<char>(static_cast<size_t>(total_boxes));
    io.ForEach(total_boxes, PrepareBoxes<T>{boxes.data, rects.data(), raw.data(), proper.data(), finite.data()});

    Scratch<int64_t> order = io.Allocate<int64_t>(static_cast<size_t>(segments * count));
    device::OrderByScoreWithinSegments(io, scores.data, segments, count, order.data());
    Scratch<int64_t> kept = io.Allocate<int64_t>(static_cast<size_t>(segments * count));
    Scratch<int64_t> kept_count = io.Allocate<int64_t>(static_cast<size_t>(segments));
    const SuppressesInSegment<T> suppresses{order.data(),  rects.data(), raw.data(), proper.data(),
                                            finite.data(), classes,      count,      attributes_.iou_threshold};
    device::GreedyKeepSegments(io, segments, count, nullptr, count, suppresses, kept.data(), kept_count.data());
    io.ForEach(segments, EmittedOnly<T>{scores.data, order.data(), kept.data(), kept_count.data(), count,
                                        static_cast<T>(attributes_.score_threshold)});

    const int64_t bad = device::OutputBatchClassBoxRows(io, 0, segments, classes, count, count, order.data(),
                                                        kept.data(), kept_count.data(), refused.data());
    if (bad >= 0) {  // the CPU kernel's message, which names the value
      const bool in_boxes = bad < boxes.size();
      const ConstTensor<T>& tensor = in_boxes ? boxes : scores;
      const int64_t i = in_boxes ? bad : bad - boxes.size();
      T value{};
      io.CopyToHost(&value, tensor.data + i, 1);
      FailNotFinite(tensor.shape, in_boxes ? "boxes" : "scores", i, value);
    }
  }

 private:
  NmsRotatedAttributes attributes_;
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<NmsRotatedDeviceKernel, float, double>(def); }

}  // namespace ortops::nms_rotated
