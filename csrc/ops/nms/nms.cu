// NMS's device path: boxes sorted by score as the CPU kernel visits them, every pair's IoU
// test with the CPU kernel's arithmetic (BoxIoU's, kept box first), and the greedy pass of
// device/greedy_nms.h; the same kept indices as the CPU kernel. The host waits once, for
// the kept count (the output's size), which comes back with the NaN checks' results.
#include "device/device_kernel.h"
#include "device/greedy_nms.h"
#include "device/sort.h"
#include "math/box_iou.h"
#include "ops/nms/box_inputs.h"
#include "ops/nms/nms.h"

namespace ortops::nms {
namespace {

// What the host reads back, in one copy: the kept count, and whether a box or a score held
// NaN (set to 1 by any thread that finds one; the CPU kernel checks the boxes first).
enum Summary : int64_t { kKeptCount, kBoxNaN, kScoreNaN, kSummaryValues };

// A box's corners, aligned so that one load reads them.
template <typename T>
struct alignas(4 * sizeof(T)) Corners {
  T x1, y1, x2, y2;
};

// Box order[k] as the k-th of the sorted boxes, with its area; NaN noted in the summary.
template <typename T>
struct GatherSorted {
  const T* boxes;
  const T* scores;
  const int64_t* order;
  Corners<T>* corners;
  T* areas;
  int64_t* summary;
  T offset;
  ORTOPS_HD void operator()(int64_t k) const {
    const int64_t index = order[k];
    const T* box = boxes + 4 * index;
    corners[k] = Corners<T>{box[0], box[1], box[2], box[3]};
    areas[k] = BoxArea(box, offset);
    if (box[0] != box[0] || box[1] != box[1] || box[2] != box[2] || box[3] != box[3]) summary[kBoxNaN] = 1;
    if (scores[index] != scores[index]) summary[kScoreNaN] = 1;
  }
};

template <typename T>
struct IoUAbove {
  const Corners<T>* corners;
  const T* areas;
  T offset, threshold;
  ORTOPS_HD bool operator()(int64_t kept, int64_t candidate) const {
    const Corners<T> a = corners[kept], b = corners[candidate];
    return BoxIoUAbove(a.x1, a.y1, a.x2, a.y2, areas[kept], b.x1, b.y1, b.x2, b.y2, areas[candidate], offset,
                       threshold);
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
    if (count == 0) {
      io.Output<int64_t>(0, {0});
      return;
    }
    // NaN scores sort somewhere and NaN boxes suppress nothing: every step stays in bounds,
    // and the summary turns either into the CPU kernel's error.
    Scratch<int64_t> order = io.Allocate<int64_t>(static_cast<size_t>(count));
    device::OrderByScore(io, scores.data, count, order.data());
    const T offset = static_cast<T>(attributes_.offset);
    Scratch<Corners<T>> corners = io.Allocate<Corners<T>>(static_cast<size_t>(count));
    Scratch<T> areas = io.Allocate<T>(static_cast<size_t>(count));
    Scratch<int64_t> summary = io.Allocate<int64_t>(kSummaryValues);
    io.Fill(summary.data(), 0, summary.size() * sizeof(int64_t));
    io.ForEach(count, GatherSorted<T>{boxes.data, scores.data, order.data(), corners.data(), areas.data(),
                                      summary.data(), offset});
    Scratch<int64_t> kept = io.Allocate<int64_t>(static_cast<size_t>(count));
    device::GreedyKeep(io, count, IoUAbove<T>{corners.data(), areas.data(), offset, threshold_}, kept.data(),
                       summary.data() + kKeptCount);
    int64_t host[kSummaryValues];
    io.CopyToHost(host, summary.data(), kSummaryValues);
    Check(host[kBoxNaN] == 0, kBoxesNaN);
    Check(host[kScoreNaN] == 0, kScoresNaN);
    const int64_t kept_count = host[kKeptCount];
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
