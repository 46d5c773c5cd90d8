// math/multiclass_nms.h's selection on the device: per image, the (box, class) pairs that pass
// the score test (never the background class) are the candidates; per group (a class, or the
// whole image when class-agnostic) the best `pre_topk` go through greedy NMS in rank order,
// stopping at `max_output` kept; the image's detections are the best `max_output` kept
// candidates over all its groups. The rank order is the CPU's (score descending, then box,
// then class, or class before box with `ties_class_first`), so the detections are the same.
//
// On the device: the candidates are compacted in (image, box, class) order (or (image, class,
// box)), so that their position is the tie order; a stable sort by score within each group
// orders them; every group is a segment of device/greedy_nms.h's pass (its size: the group's
// candidates, at most pre_topk; its limit: max_output); each kept candidate then finds its
// rank among its image's kept ones by a binary search in each of the image's groups (each
// kept list already in rank order), and the first max_output go to the image's rows. The host
// waits twice, for sizes it allocates by: the number of candidates and the largest group.
//
// The node's own arithmetic comes in a Problem, a plain struct called on the device:
//   bool Passes(int64_t b, int64_t n, int64_t c) const   the score test of box n, class c, image b
//   A Score(int64_t b, int64_t n, int64_t c) const       the score it ranks and is emitted with
//                                                        (activated: must not decrease with the
//                                                        raw score)
//   bool Suppresses(int64_t b, const NmsCandidate<A>& kept, const NmsCandidate<A>& candidate) const
#pragma once

#include <thrust/reduce.h>
#include <thrust/sort.h>

#include <cstdint>

#include "device/compact.h"
#include "device/greedy_nms.h"
#include "device/sort.h"
#include "math/multiclass_nms.h"

namespace ortops::device {

// Image b's detections, in output order: rows[b * max_output + r] for r < count[b] (device
// memory both).
template <typename A>
struct Detections {
  Scratch<NmsCandidate<A>> rows;
  Scratch<int64_t> count;
};

// Row i = b rows + r of a node's fixed-size outputs: image b's r-th detection (out.Write), or
// out.Pad past them; with `counts`, also image b's number of detections, once per image.
template <typename A, typename Rows, typename Count = int64_t>
struct WriteDetectionRows {
  Rows out;
  const NmsCandidate<A>* detections;
  const int64_t* found;
  int64_t rows;
  Count* counts = nullptr;
  ORTOPS_HD void operator()(int64_t i) const {
    const int64_t b = i / rows, r = i % rows;
    if (r < found[b]) {
      out.Write(b, i, detections[i]);
    } else {
      out.Pad(i);
    }
    if (counts != nullptr && r == 0) counts[b] = static_cast<Count>(found[b]);
  }
};

namespace multiclass_nms_detail {

// Whether item i = (b N + n) C + c is a candidate.
template <typename Problem>
struct IsCandidate {
  Problem problem;
  int64_t boxes, classes, background;
  ORTOPS_HD bool operator()(int64_t i) const {
    const int64_t c = i % classes, n = i / classes % boxes, b = i / (classes * boxes);
    return c != background && problem.Passes(b, n, c);
  }
};

// The key that puts items of one image in (class, box) order: b C + c.
struct ImageClassKey {
  const int64_t* items;
  int64_t* keys;
  int64_t boxes, classes;
  ORTOPS_HD void operator()(int64_t m) const { keys[m] = items[m] / (classes * boxes) * classes + items[m] % classes; }
};

template <typename A, typename Problem>
struct MakeCandidates {
  Problem problem;
  const int64_t* items;
  NmsCandidate<A>* candidates;
  A* scores;
  int64_t* group;
  int64_t boxes, classes, groups;
  ORTOPS_HD void operator()(int64_t m) const {
    const int64_t i = items[m], c = i % classes, n = i / classes % boxes, b = i / (classes * boxes);
    const A score = problem.Score(b, n, c);
    candidates[m] = NmsCandidate<A>{score, static_cast<int32_t>(n), static_cast<int32_t>(c)};
    scores[m] = score;
    group[m] = b * groups + (groups == 1 ? 0 : c);
  }
};

// The bounds [start[s], end[s]) of each segment s in a list sorted by segment (segment of
// place k: segment[order[k]], or segment[k] when order is null); both zeroed before.
struct SegmentBounds {
  const int64_t* segment;
  const int64_t* order;
  int64_t* start;
  int64_t* end;
  int64_t count;
  ORTOPS_HD int64_t At(int64_t k) const { return segment[order != nullptr ? order[k] : k]; }
  ORTOPS_HD void operator()(int64_t k) const {
    const int64_t s = At(k);
    if (k == 0 || At(k - 1) != s) start[s] = k;
    if (k == count - 1 || At(k + 1) != s) end[s] = k + 1;
  }
};

// Each segment's [start, end) among the `count` positions k, sorted by segment[order[k]]:
// start and end 0 for a segment with none.
struct SegmentRanges {
  Scratch<int64_t> start, end;
};
inline SegmentRanges FindSegments(const DeviceIO& io, const int64_t* segment, const int64_t* order, int64_t count,
                                  int64_t segments) {
  SegmentRanges ranges{io.Allocate<int64_t>(static_cast<size_t>(segments)),
                       io.Allocate<int64_t>(static_cast<size_t>(segments))};
  io.Fill(ranges.start.data(), 0, ranges.start.size() * sizeof(int64_t));
  io.Fill(ranges.end.data(), 0, ranges.end.size() * sizeof(int64_t));
  io.ForEach(count, SegmentBounds{segment, order, ranges.start.data(), ranges.end.data(), count});
  return ranges;
}

// size[s] = end[s] - start[s], at most `most` (when >= 0).
struct ClippedSize {
  const int64_t* start;
  int64_t* end_then_size;
  int64_t most;
  ORTOPS_HD void operator()(int64_t s) const {
    const int64_t size = end_then_size[s] - start[s];
    end_then_size[s] = most >= 0 && size > most ? most : size;
  }
};

struct Larger {
  ORTOPS_HD int64_t operator()(int64_t a, int64_t b) const { return a < b ? b : a; }
};

// Positions i < j of group s: the candidates at places start[s] + i and + j of the order.
template <typename A, typename Problem>
struct GroupSuppresses {
  Problem problem;
  const NmsCandidate<A>* candidates;
  const int64_t* order;
  const int64_t* start;
  int64_t groups;
  ORTOPS_HD bool operator()(int64_t s, int64_t i, int64_t j) const {
    return problem.Suppresses(s / groups, candidates[order[start[s] + i]], candidates[order[start[s] + j]]);
  }
};

// Kept slot e = s capacity + k of group s (k < kept_count[s]): its candidate's rank among the
// kept candidates of its image b, in the CPU's order (score descending, then the compacted
// order), is k plus, for each other group of b, how many of that group's kept ones come before
// it: a prefix of the group's kept list, which is in that order, found by binary search. The
// ranks of an image's kept candidates are distinct (no two share a compacted position), so
// the first max_output go to distinct rows.
template <typename A>
struct PlaceKept {
  const NmsCandidate<A>* candidates;
  const A* scores;
  const int64_t* order;  // group s's set: order[start[s] + i]
  const int64_t* start;
  const int64_t* kept;  // [groups of all images, capacity]: positions into the set
  const int64_t* kept_count;
  NmsCandidate<A>* rows;
  int64_t capacity, groups, max_output;

  ORTOPS_HD int64_t Candidate(int64_t s, int64_t k) const { return order[start[s] + kept[s * capacity + k]]; }
  ORTOPS_HD void operator()(int64_t e) const {
    const int64_t s = e / capacity, k = e % capacity;
    if (k >= kept_count[s]) return;
    const int64_t b = s / groups, p = Candidate(s, k);
    const A score = scores[p];
    int64_t rank = k;
    for (int64_t t = b * groups; t < (b + 1) * groups; ++t) {
      if (t == s) continue;
      int64_t before = 0, after = kept_count[t];
      while (before < after) {
        const int64_t middle = before + (after - before) / 2, q = Candidate(t, middle);
        const bool ahead = scores[q] > score || (!(scores[q] < score) && q < p);
        if (ahead) {
          before = middle + 1;
        } else {
          after = middle;
        }
      }
      rank += before;
    }
    if (rank < max_output) rows[b * max_output + rank] = candidates[p];
  }
};

// Image b's number of detections: its groups' kept candidates, at most max_output.
struct CountDetections {
  const int64_t* kept_count;
  int64_t* count;
  int64_t groups, max_output;
  ORTOPS_HD void operator()(int64_t b) const {
    int64_t found = 0;
    for (int64_t t = b * groups; t < (b + 1) * groups; ++t) found += kept_count[t];
    count[b] = found < max_output ? found : max_output;
  }
};

}  // namespace multiclass_nms_detail

// Runs the selection over `batch` images of `num_boxes` boxes and `num_classes` classes (each
// below 2^31, as the callers check).
template <typename A, typename Problem>
Detections<A> MulticlassNms(const DeviceIO& io, const MulticlassNmsConfig& config, int64_t batch, int64_t num_boxes,
                            int64_t num_classes, const Problem& problem) {
  using namespace multiclass_nms_detail;
  const int64_t max_output = config.max_output > 0 ? config.max_output : 0;
  Detections<A> out{io.Allocate<NmsCandidate<A>>(static_cast<size_t>(batch * max_output)),
                    io.Allocate<int64_t>(static_cast<size_t>(batch))};
  io.Fill(out.count.data(), 0, out.count.size() * sizeof(int64_t));
  const int64_t items = batch * num_boxes * num_classes;
  if (items == 0 || max_output == 0) return out;

  // The candidates, in (image, box, class) order, or (image, class, box).
  Scratch<int64_t> item = io.Allocate<int64_t>(static_cast<size_t>(items));
  const int64_t candidates =
      Compact(io, items, IsCandidate<Problem>{problem, num_boxes, num_classes, config.background_class}, item.data());
  if (candidates == 0) return out;
  const auto size = static_cast<size_t>(candidates);
  if (config.ties_class_first) {
    Scratch<int64_t> keys = io.Allocate<int64_t>(size);
    io.ForEach(candidates, ImageClassKey{item.data(), keys.data(), num_boxes, num_classes});
    thrust::stable_sort_by_key(io.policy(), keys.data(), keys.data() + candidates, item.data());
  }
  const int64_t groups = config.class_agnostic ? 1 : num_classes, segments = batch * groups;
  Scratch<NmsCandidate<A>> candidate = io.Allocate<NmsCandidate<A>>(size);
  Scratch<A> score = io.Allocate<A>(size);
  Scratch<int64_t> group = io.Allocate<int64_t>(size);
  io.ForEach(candidates, MakeCandidates<A, Problem>{problem, item.data(), candidate.data(), score.data(), group.data(),
                                                    num_boxes, num_classes, groups});

  // Each group's candidates in rank order, the first pre_topk of them its NMS set.
  Scratch<int64_t> order = io.Allocate<int64_t>(size);
  OrderByScoreWithinSegments(io, score.data(), group.data(), candidates, order.data());
  auto [start, set_size] = FindSegments(io, group.data(), order.data(), candidates, segments);
  io.ForEach(segments, ClippedSize{start.data(), set_size.data(), config.pre_topk});
  const int64_t largest =
      thrust::reduce(io.policy(), set_size.data(), set_size.data() + segments, int64_t{0}, Larger{});
  io.NoteWait();
  if (largest == 0) return out;

  const int64_t capacity = KeptCapacity(largest, max_output);
  Scratch<int64_t> kept = io.Allocate<int64_t>(static_cast<size_t>(segments * capacity));
  Scratch<int64_t> kept_count = io.Allocate<int64_t>(static_cast<size_t>(segments));
  GreedyKeepSegments(io, segments, largest, set_size.data(), max_output,
                     GroupSuppresses<A, Problem>{problem, candidate.data(), order.data(), start.data(), groups},
                     kept.data(), kept_count.data());

  // Each image's kept candidates by rank, the first max_output of them its detections.
  io.ForEach(segments * capacity, PlaceKept<A>{candidate.data(), score.data(), order.data(), start.data(), kept.data(),
                                               kept_count.data(), out.rows.data(), capacity, groups, max_output});
  io.ForEach(batch, CountDetections{kept_count.data(), out.count.data(), groups, max_output});
  return out;
}

}  // namespace ortops::device
