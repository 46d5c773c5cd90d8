// ortops::NonMaxSuppression's device path: the CPU kernel's selection, with its kept rows in
// its order. Every (batch, class) is a segment of device/greedy_nms.h's pass:
//   - its boxes sorted by score within the segment (device/sort.h: descending, equal scores
//     lower index first), the boxes that fail the score threshold after all the others, so
//     that its candidates are a prefix of its order, as long as the segment's size;
//   - where a candidate's score is NaN, that segment's order replaced by ONNX Runtime's heap
//     order (visit_order.h), one thread per such segment (the comparable scores' order is the
//     sort's, so the replay is needed only there);
//   - the greedy pass over the candidates in that order with ONNX Runtime's test
//     (OnnxSuppresses, math/box_iou.h), kept box against candidate, stopping at
//     max_output_boxes_per_class;
//   - a scan of the kept counts for each segment's first output row, and the rows written.
// The optional inputs are host inputs (device::DeviceKernelWithHostInputs): the host reads and
// checks them with the CPU kernel's code before anything runs, without a wait. The host waits
// once, for the number of rows (the output's size).

#include <limits>
#include <type_traits>

#include "device/device_kernel.h"
#include "device/greedy_nms.h"
#include "device/sort.h"
#include "math/box_iou.h"
#include "ops/non_max_suppression/non_max_suppression.h"
#include "ops/non_max_suppression/visit_order.h"

namespace ortops::non_max_suppression {
namespace {

using Box = OnnxNmsBox<float>;

// Whether a score makes its box a candidate: strictly above the threshold when there is one
// (a NaN score never is, nor is any with a NaN threshold), every score otherwise.
struct IsCandidate {
  float threshold;
  bool has_threshold;
  ORTOPS_HD bool operator()(float score) const { return !has_threshold || score > threshold; }
};

// The key that item i (of scores [B, C, N]) is sorted by within its segment: its score for a
// comparable candidate, -inf for the rest. Candidates then come first: with a threshold every
// candidate scores above it, so above -inf; without one there are no non-candidates. A NaN
// candidate marks its segment, whose order the heap replay then rewrites whatever the sort
// did with its key.
struct SortKey {
  const float* scores;
  float* keys;
  char* segment_has_nan;
  IsCandidate is_candidate;
  int64_t count;
  ORTOPS_HD void operator()(int64_t i) const {
    const float score = scores[i];
    const bool candidate = is_candidate(score), nan = score != score;
    keys[i] = candidate && !nan ? score : -std::numeric_limits<float>::infinity();
    if (candidate && nan) segment_has_nan[i / count] = 1;
  }
};

// Segment s's candidates (the first of its order) in the order ONNX Runtime's priority queue
// gives them back, for a segment with a NaN candidate: the candidates in ascending index, as
// the runtime queues them, then libstdc++'s heap replayed over them. Sequential, as the heap
// is; segments without NaN return at once.
struct HeapOrderWhereNaN {
  const float* scores;
  const char* segment_has_nan;
  int64_t* order;
  IsCandidate is_candidate;
  int64_t count;
  ORTOPS_HD void operator()(int64_t s) const {
    if (segment_has_nan[s] == 0) return;
    int64_t* items = order + s * count;
    int64_t candidates = 0;
    for (int64_t i = s * count; i < (s + 1) * count; ++i) {
      if (is_candidate(scores[i])) items[candidates++] = i;
    }
    VisitOrderOfHeap(items, candidates, VisitsLater{scores});
  }
};

// size[s] = segment s's candidates: the place after its order's last candidate (they come
// first). Sizes are zeroed before, for segments with none.
struct CandidateCount {
  const float* scores;
  const int64_t* order;
  int64_t* size;
  IsCandidate is_candidate;
  int64_t count;
  ORTOPS_HD void operator()(int64_t p) const {
    if (!is_candidate(scores[order[p]])) return;
    const int64_t k = p % count;
    if (k + 1 == count || !is_candidate(scores[order[p + 1]])) size[p / count] = k + 1;
  }
};

// Place p of the order: its box ([B, N, 4] input, item i = (b C + c) N + n holds box b N + n)
// in ONNX Runtime's form.
struct GatherBoxes {
  const float* boxes;
  const int64_t* order;
  Box* sorted;
  int64_t classes, count;
  bool center_point_box;
  ORTOPS_HD void operator()(int64_t p) const {
    const int64_t item = order[p], n = item % count, b = item / (classes * count);
    sorted[p] = MakeOnnxNmsBox(boxes + 4 * (b * count + n), center_point_box);
  }
};

// Positions i < j of segment s: whether kept box i suppresses candidate j, as the CPU
// kernel's grid tests them (candidate first).
struct OnnxSuppressesInSegment {
  const Box* sorted;
  int64_t count;
  float threshold;
  ORTOPS_HD bool operator()(int64_t s, int64_t i, int64_t j) const {
    return OnnxSuppresses(sorted[s * count + j], sorted[s * count + i], threshold);
  }
};

// ONNX Runtime's NonMaxSuppression takes float32 only; so does this one (as the CPU kernel).
template <typename T>
class NonMaxSuppressionDeviceKernel
    : public device::DeviceKernelWithHostInputs<kMaxOutputInput, kIouThresholdInput, kScoreThresholdInput> {
  static_assert(std::is_same_v<T, float>);

 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = non_max_suppression::kSchema;

  NonMaxSuppressionDeviceKernel(const Attributes& attrs, const OpDef& def)
      : DeviceKernelWithHostInputs(def), attributes_(attrs) {}

  void Compute(const device::DeviceIO& io) const {
    const NmsInputs<float> in = ReadInputs<float>(io);
    // (With no box or class, B * C may be huge: scores holds no value then.)
    if (in.max_output == 0 || in.batch == 0 || in.classes == 0 || in.count == 0) {
      io.Output<int64_t>(0, {0, 3});
      return;
    }
    const int64_t count = in.count, segments = in.batch * in.classes, items = segments * count;
    const auto size = static_cast<size_t>(items);
    const IsCandidate is_candidate{in.score_threshold.value_or(0.0f), in.score_threshold.has_value()};

    Scratch<float> keys = io.Allocate<float>(size);
    Scratch<char> segment_has_nan = io.Allocate<char>(static_cast<size_t>(segments));
    io.Fill(segment_has_nan.data(), 0, segment_has_nan.size());
    io.ForEach(items, SortKey{in.scores.data, keys.data(), segment_has_nan.data(), is_candidate, count});
    Scratch<int64_t> order = io.Allocate<int64_t>(size);
    device::OrderByScoreWithinSegments(io, keys.data(), segments, count, order.data());
    io.ForEach(segments, HeapOrderWhereNaN{in.scores.data, segment_has_nan.data(), order.data(), is_candidate, count});
    // Without a threshold every box is a candidate: the pass takes `count` for every segment.
    Scratch<int64_t> candidates;
    if (in.score_threshold) {
      candidates = io.Allocate<int64_t>(static_cast<size_t>(segments));
      io.Fill(candidates.data(), 0, candidates.size() * sizeof(int64_t));
      io.ForEach(items, CandidateCount{in.scores.data, order.data(), candidates.data(), is_candidate, count});
    }

    Scratch<Box> sorted = io.Allocate<Box>(size);
    io.ForEach(items, GatherBoxes{in.boxes.data, order.data(), sorted.data(), in.classes, count,
                                  attributes_.center_point_box == 1});
    const int64_t capacity = device::KeptCapacity(count, in.max_output);
    Scratch<int64_t> kept = io.Allocate<int64_t>(static_cast<size_t>(segments * capacity));
    Scratch<int64_t> kept_count = io.Allocate<int64_t>(static_cast<size_t>(segments));
    device::GreedyKeepSegments(io, segments, count, candidates.data(), in.max_output,
                               OnnxSuppressesInSegment{sorted.data(), count, in.iou_threshold}, kept.data(),
                               kept_count.data());

    device::OutputBatchClassBoxRows(io, 0, segments, in.classes, count, capacity, order.data(), kept.data(),
                                    kept_count.data());
  }

 private:
  NmsAttributes attributes_;
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<NonMaxSuppressionDeviceKernel, float>(def); }

}  // namespace ortops::non_max_suppression
