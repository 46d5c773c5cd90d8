// NMSMatch's device path: every (batch, class) a segment of the greedy pass of
// device/greedy_nms.h, over its boxes in the CPU kernel's score order (device/sort.h) with
// the CPU kernel's test (MatchIoU >= threshold, kept box first). A box that is not kept was
// suppressed by the first kept box before it that reaches the threshold with it (the CPU
// kernel's loop visits kept boxes in order and marks a box once), so each such box finds its
// suppressor in parallel; the reported pairs are compacted and ordered by (segment, kept box
// position), suppressed boxes ascending within: the CPU kernel's rows.
//
// The thresholds are host inputs (device::DeviceKernelWithHostInputs): the host checks them
// with the CPU kernel's messages before anything runs, and they are usually constants that
// ONNX Runtime keeps on the host anyway.
#include <thrust/sort.h>

#include "device/compact.h"
#include "device/device_kernel.h"
#include "device/greedy_nms.h"
#include "device/sort.h"
#include "math/box_iou.h"
#include "ops/nms_match/nms_match.h"

namespace ortops::nms_match {
namespace {

// Box order[p] % N of image p / (C N) as the p-th of the sorted boxes, with its MatchArea.
template <typename T>
struct GatherSorted {
  const T* boxes;
  const int64_t* order;
  T* sorted;  // [B C N, 5]: x1, y1, x2, y2, area
  int64_t classes, count;
  ORTOPS_HD void operator()(int64_t p) const {
    const T* box = boxes + 4 * (p / (classes * count) * count + order[p] % count);
    T* out = sorted + 5 * p;
    for (int k = 0; k < 4; ++k) out[k] = box[k];
    out[4] = MatchArea(box);
  }
};

// Whether sorted box p (kept) suppresses sorted box q, as the CPU kernel tests it (a NaN IoU
// from infinite boxes suppresses nothing).
template <typename T>
ORTOPS_HD inline bool MatchSuppresses(const T* sorted, int64_t p, int64_t q, float threshold) {
  const T* a = sorted + 5 * p;
  const T* b = sorted + 5 * q;
  return MatchIoU(a[0], a[1], a[2], a[3], a[4], b[0], b[1], b[2], b[3], b[4]) >= threshold;
}

template <typename T>
struct SuppressesInSegment {
  const T* sorted;
  int64_t count;
  float threshold;
  ORTOPS_HD bool operator()(int64_t segment, int64_t i, int64_t j) const {
    return MatchSuppresses(sorted, segment * count + i, segment * count + j, threshold);
  }
};

struct MarkKept {
  const int64_t* kept;
  const int64_t* kept_count;
  char* is_kept;  // [B C N], zeroed
  int64_t count;
  ORTOPS_HD void operator()(int64_t i) const {
    const int64_t segment = i / count;
    if (i % count < kept_count[segment]) is_kept[segment * count + kept[i]] = 1;
  }
};

// For sorted position p = s N + j that was not kept: the position of its suppressor, the first
// kept position of segment s that suppresses it, when that box scores above the threshold
// (it reports its matches); else -1.
template <typename T>
struct ReportedBy {
  const T* sorted;
  const T* scores;
  const int64_t* order;
  const int64_t* kept;
  const int64_t* kept_count;
  const char* is_kept;
  int64_t* by;
  int64_t count;
  float threshold;
  T score_threshold;
  ORTOPS_HD void operator()(int64_t p) const {
    by[p] = -1;
    if (is_kept[p]) return;
    const int64_t segment = p / count, first = segment * count;
    for (int64_t k = 0; k < kept_count[segment] && kept[first + k] < p - first; ++k) {
      const int64_t suppressor = first + kept[first + k];
      if (!MatchSuppresses(sorted, suppressor, p, threshold)) continue;
      if (scores[order[suppressor]] > score_threshold) by[p] = suppressor;
      return;
    }
  }
};

struct IsReported {
  const int64_t* by;
  ORTOPS_HD bool operator()(int64_t p) const { return by[p] >= 0; }
};

struct SuppressorKey {
  const int64_t* by;
  const int64_t* items;
  int64_t* keys;
  ORTOPS_HD void operator()(int64_t m) const { keys[m] = by[items[m]]; }
};

// Row m: (b, c, kept box, suppressed box) of reported sorted position items[m].
struct WriteMatches {
  const int64_t* order;
  const int64_t* by;
  const int64_t* items;
  int64_t* out;
  int64_t classes, count;
  ORTOPS_HD void operator()(int64_t m) const {
    const int64_t p = items[m], segment = p / count;
    int64_t* row = out + 4 * m;
    row[0] = segment / classes;
    row[1] = segment % classes;
    row[2] = order[by[p]] % count;
    row[3] = order[p] % count;
  }
};

template <typename T>
class NmsMatchDeviceKernel : public device::DeviceKernelWithHostInputs<kIouThresholdInput, kScoreThresholdInput> {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = nms_match::kSchema;

  NmsMatchDeviceKernel(const Attributes&, const OpDef& def) : DeviceKernelWithHostInputs(def) {}

  void Compute(const device::DeviceIO& io) const {
    const auto [boxes, scores, iou_threshold, score_threshold] = ReadInputs<T>(io);
    const int64_t batch = boxes.dim(0), count = boxes.dim(1), classes = scores.dim(1);
    const device::EitherFails<device::IsNaN<T>, device::IsNaN<T>> nan_in_boxes_or_scores{
        {boxes.data}, {scores.data}, boxes.size()};
    if (scores.size() == 0) {  // no box or no class: no match, and B * C may be huge
      Check(io.FirstWhere(boxes.size(), nan_in_boxes_or_scores) < 0, kBoxesNaN);
      io.Output<int64_t>(0, {0, 4});
      return;
    }
    // What the host reads at the end, in one wait: the matches, and the first NaN of the boxes
    // then the scores (-1: none), past which every pass stays in bounds (a NaN score sorts
    // somewhere, a NaN IoU suppresses nothing).
    Scratch<int64_t> summary = io.Allocate<int64_t>(2);
    io.FirstWhereInto(boxes.size() + scores.size(), nan_in_boxes_or_scores, summary.data() + 1);

    const int64_t segments = batch * classes, total = segments * count;
    const auto size = static_cast<size_t>(total);
    Scratch<int64_t> order = io.Allocate<int64_t>(size);
    device::OrderByScoreWithinSegments(io, scores.data, segments, count, order.data());
    Scratch<T> sorted = io.Allocate<T>(5 * size);
    io.ForEach(total, GatherSorted<T>{boxes.data, order.data(), sorted.data(), classes, count});

    Scratch<int64_t> kept = io.Allocate<int64_t>(size);
    Scratch<int64_t> kept_count = io.Allocate<int64_t>(static_cast<size_t>(segments));
    device::GreedyKeepSegments(io, segments, count, nullptr, count,
                               SuppressesInSegment<T>{sorted.data(), count, iou_threshold}, kept.data(),
                               kept_count.data());
    Scratch<char> is_kept = io.Allocate<char>(size);
    io.Fill(is_kept.data(), 0, size);
    io.ForEach(total, MarkKept{kept.data(), kept_count.data(), is_kept.data(), count});
    Scratch<int64_t> by = io.Allocate<int64_t>(size);
    io.ForEach(total, ReportedBy<T>{sorted.data(), scores.data, order.data(), kept.data(), kept_count.data(),
                                    is_kept.data(), by.data(), count, iou_threshold, score_threshold});

    // The reported positions, ascending (so suppressed boxes stay ascending), then ordered by
    // their suppressor's position (which orders segments too).
    Scratch<int64_t> items = io.Allocate<int64_t>(size);
    device::CompactInto(io, total, IsReported{by.data()}, items.data(), summary.data());
    int64_t host[2];
    io.CopyToHost(host, summary.data(), 2);
    const int64_t matches = host[0], nan = host[1];
    Check(nan < 0 || nan >= boxes.size(), kBoxesNaN);
    Check(nan < 0, kScoresNaN);
    int64_t* out = io.Output<int64_t>(0, {matches, 4});
    if (matches == 0) return;
    Scratch<int64_t> keys = io.Allocate<int64_t>(static_cast<size_t>(matches));
    io.ForEach(matches, SuppressorKey{by.data(), items.data(), keys.data()});
    thrust::stable_sort_by_key(io.policy(), keys.data(), keys.data() + matches, items.data());
    io.ForEach(matches, WriteMatches{order.data(), by.data(), items.data(), out, classes, count});
  }
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<NmsMatchDeviceKernel, float, double>(def); }

}  // namespace ortops::nms_match
