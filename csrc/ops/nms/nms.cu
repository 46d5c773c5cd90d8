// NMS's device path: boxes sorted by score as the CPU kernel visits them, every pair's IoU
// test with the CPU kernel's arithmetic (BoxIoU, kept box first), and the greedy pass of
// device/greedy_nms.h; the same kept indices as the CPU kernel.
#include "device/device_kernel.h"
#include "device/greedy_nms.h"
#include "device/sort.h"
#include "math/box_iou.h"
#include "ops/nms/box_inputs.h"
#include "ops/nms/nms.h"

namespace ortops::nms {
namespace {

// Box order[k] as the k-th of the sorted columns, with its area.
template <typename T>
struct GatherSorted {
  const T* boxes;
  const int64_t* order;
  T* sorted;  // [N, 5]: x1, y1, x2, y2, area
  T offset;
  ORTOPS_HD void operator()(int64_t k) const {
    const T* box = boxes + 4 * order[k];
    T* out = sorted + 5 * k;
    for (int c = 0; c < 4; ++c) out[c] = box[c];
    out[4] = BoxArea(box, offset);
  }
};

template <typename T>
struct IoUAbove {
  const T* sorted;
  T offset, threshold;
  ORTOPS_HD bool operator()(int64_t kept, int64_t candidate) const {
    const T* a = sorted + 5 * kept;
    const T* b = sorted + 5 * candidate;
    return BoxIoU(a, a[4], b, b[4], offset) > threshold;
  }
};

struct OriginalIndex {
  const int64_t* order;
  const int64_t* kept;
  int64_t* out;
  ORTOPS_HD void operator()(int64_t k) const { out[k] = order[kept[k]]; }
};

template <typename T>
class NmsDeviceKernel : public device::DeviceKernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = nms::kSchema;

  NmsDeviceKernel(const Attributes& attrs, const OpDef& def)
      : DeviceKernelBase(def), attributes_(attrs), threshold_(static_cast<T>(attributes_.iou_threshold)) {}

  void Compute(const device::DeviceIO& io) const {
    const auto [boxes, scores] = BoxesAndScoresInputs<T>(io);
    const int64_t count = boxes.dim(0);
    const int64_t bad = io.FirstWhere(5 * count, IsNaNInBoxesOrScores<T>{boxes.data, scores.data, 4 * count});
    Check(bad < 0, bad < 4 * count ? kBoxesNaN : kScoresNaN);

    Scratch<int64_t> order = io.Allocate<int64_t>(static_cast<size_t>(count));
    device::OrderByScore(io, scores.data, count, order.data());
    const T offset = static_cast<T>(attributes_.offset);
    Scratch<T> sorted = io.Allocate<T>(static_cast<size_t>(5 * count));
    io.ForEach(count, GatherSorted<T>{boxes.data, order.data(), sorted.data(), offset});
    Scratch<int64_t> kept = io.Allocate<int64_t>(static_cast<size_t>(count));
    const int64_t kept_count =
        device::GreedyKeep(io, count, IoUAbove<T>{sorted.data(), offset, threshold_}, kept.data());
    int64_t* out = io.Output<int64_t>(0, {kept_count});
    io.ForEach(kept_count, OriginalIndex{order.data(), kept.data(), out});
  }

 private:
  NmsAttributes attributes_;
  T threshold_;
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<NmsDeviceKernel, float, double>(def); }

}  // namespace ortops::nms
