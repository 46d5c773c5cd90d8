// math/multiclass_nms.h's selection on the device: per image, the (box, class) pairs that pass
// the score test (never the background class) are the candidates; per group (a class, or the
// whole image when class-agnostic) the best `pre_topk` go through greedy NMS in rank order,
// stopping at `max_output` kept; the image's detections are the best `max_output` kept
// candidates over all its groups. The rank order is the CPU's (score descending, then box,
// then class, or class before box with `ties_class_first`), so the detections are the same.
//
// On the device, without a wait: every (image, group) is a segment with room for all of its
// items (N boxes for a class, N x C items for a class-agnostic image), laid out in the tie
// order (box, then class, or class then box). One scan ranks each segment's candidates among
// its items, so they are written to the front of their segment in that order with their
// scores; a segmented stable sort by score (a block per segment on a GPU) puts each in rank
// order, its first pre_topk the group's NMS set; device/greedy_against_kept.h's pass keeps at
// most max_output of each (a block per segment, whatever the sizes); and each kept candidate
// finds its rank among its image's kept ones by a binary search in each of the image's groups
// (each kept list already in rank order), the first max_output going to the image's rows. No
// size comes back to the host, so the nodes that use this have no wait at all, and a session
// can capture them in a CUDA graph. The price is scratch memory for every item, candidate or
// not (at most 20 bytes an item with float scores, 110 MB for 8 images x 8400 boxes x 80
// classes), as TensorRT's EfficientNMS plugin asks for.
//
// The node's own arithmetic comes in a Problem, a plain struct called on the device:
//   bool Passes(int64_t b, int64_t n, int64_t c) const   the score test of box n, class c, image b
//   A Score(int64_t b, int64_t n, int64_t c) const       the score it ranks and is emitted with
//                                                        (activated: must not decrease with the
//                                                        raw score)
//   bool Suppresses(int64_t b, const NmsCandidate<A>& kept, const NmsCandidate<A>& candidate) const
#pragma once

#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/scan.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/error.h"
#include "device/greedy_against_kept.h"
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

// Where each item of the batch lies in the segments: segment s = b G + g (G groups an image)
// holds `room` items, in the tie order of the CPU's rank: by box for a class, by (box, class)
// or (class, box) for a class-agnostic image. Place p = s room + r.
struct SegmentLayout {
  int64_t boxes, classes, groups, room;
  bool ties_class_first;

  ORTOPS_HD void Item(int64_t p, int64_t& b, int64_t& n, int64_t& c) const {
    const int64_t s = p / room, r = p % room;
    b = s / groups;
    if (groups != 1) {
      c = s % groups;
      n = r;
    } else if (ties_class_first) {
      c = r / boxes;
      n = r % boxes;
    } else {
      n = r / classes;
      c = r % classes;
    }
  }
};

// 1 where the item at place p is a candidate (passes its score test; never the background).
template <typename Problem>
struct IsCandidateAt {
  Problem problem;
  SegmentLayout layout;
  int64_t background;
  ORTOPS_HD int64_t operator()(int64_t p) const {
    int64_t b = 0, n = 0, c = 0;
    layout.Item(p, b, n, c);
    return c != background && problem.Passes(b, n, c) ? 1 : 0;
  }
};

// Writes the candidate at place p to its segment's front, at its rank among the segment's
// candidates (`before`: the exclusive scan of IsCandidateAt over all places): its score (the
// sort key, -0 made +0 so that the radix sort orders it as comparisons do) and its place in
// the segment.
template <typename A, typename Problem>
struct WriteCandidate {
  IsCandidateAt<Problem> is_candidate;
  const int64_t* before;
  A* keys;
  int32_t* places;
  ORTOPS_HD void operator()(int64_t p) const {
    if (is_candidate(p) == 0) return;
    const int64_t room = is_candidate.layout.room, first = p - p % room;
    int64_t b = 0, n = 0, c = 0;
    is_candidate.layout.Item(p, b, n, c);
    const int64_t slot = first + before[p] - before[first];
    keys[slot] = is_candidate.problem.Score(b, n, c) + A(0);
    places[slot] = static_cast<int32_t>(p % room);
  }
};

// Segment s's candidates [begin[s], end[s]) (its front) and its NMS set's size: at most
// pre_topk of them.
template <typename Problem>
struct SegmentCandidates {
  IsCandidateAt<Problem> is_candidate;
  const int64_t* before;
  int64_t* begin;
  int64_t* end;
  int64_t* set_size;
  int64_t pre_topk;
  ORTOPS_HD void operator()(int64_t s) const {
    const int64_t room = is_candidate.layout.room, first = s * room, last = first + room - 1;
    const int64_t count = before[last] + is_candidate(last) - before[first];
    begin[s] = first;
    end[s] = first + count;
    set_size[s] = pre_topk >= 0 && count > pre_topk ? pre_topk : count;
  }
};

// The NMS sets' candidates, in rank order at the front of their segments.
template <typename A, typename Problem>
struct MakeCandidates {
  Problem problem;
  SegmentLayout layout;
  const int32_t* places;  // sorted
  const int64_t* set_size;
  NmsCandidate<A>* candidates;
  ORTOPS_HD void operator()(int64_t slot) const {
    const int64_t room = layout.room, first = slot - slot % room;
    if (slot % room >= set_size[slot / room]) return;
    int64_t b = 0, n = 0, c = 0;
    layout.Item(first + places[slot], b, n, c);
    candidates[slot] = NmsCandidate<A>{problem.Score(b, n, c), static_cast<int32_t>(n), static_cast<int32_t>(c)};
  }
};

// Positions i < j of segment s's NMS set.
template <typename A, typename Problem>
struct SegmentSuppresses {
  Problem problem;
  const NmsCandidate<A>* candidates;
  int64_t room, groups;
  ORTOPS_HD bool operator()(int64_t s, int64_t i, int64_t j) const {
    return problem.Suppresses(s / groups, candidates[s * room + i], candidates[s * room + j]);
  }
};

// Kept slot e = s capacity + k of segment s (k < kept_count[s]): its candidate's rank among
// the kept candidates of its image b, in the CPU's order (score descending, then the tie
// order), is k plus, for each other group of b, how many of that group's kept ones come before
// it: a prefix of the group's kept list, which is in that order, found by binary search. The
// ranks of an image's kept candidates are distinct (no two share a box and a class), so the
// first max_output go to distinct rows.
template <typename A>
struct PlaceKept {
  const NmsCandidate<A>* candidates;  // segment s's NMS set at [s room, + set size)
  const int64_t* kept;                // [segments, capacity]: positions into the set
  const int64_t* kept_count;
  NmsCandidate<A>* rows;
  SegmentLayout layout;
  int64_t capacity, max_output;

  ORTOPS_HD const NmsCandidate<A>& Candidate(int64_t s, int64_t k) const {
    return candidates[s * layout.room + kept[s * capacity + k]];
  }
  ORTOPS_HD void operator()(int64_t e) const {
    const int64_t s = e / capacity, k = e % capacity;
    if (k >= kept_count[s]) return;
    const int64_t groups = layout.groups, b = s / groups;
    const NmsCandidate<A>& candidate = Candidate(s, k);
    int64_t rank = k;
    for (int64_t t = b * groups; t < (b + 1) * groups; ++t) {
      if (t == s) continue;
      int64_t before = 0, after = kept_count[t];
      while (before < after) {
        const int64_t middle = before + (after - before) / 2;
        const NmsCandidate<A>& other = Candidate(t, middle);
        const bool ahead =
            layout.ties_class_first ? RanksBeforeClassFirst(other, candidate) : RanksBefore(other, candidate);
        if (ahead) {
          before = middle + 1;
        } else {
          after = middle;
        }
      }
      rank += before;
    }
    if (rank < max_output) rows[b * max_output + rank] = candidate;
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
  if (items == 0 || max_output == 0 || config.pre_topk == 0) return out;

  const int64_t groups = config.class_agnostic ? 1 : num_classes, segments = batch * groups;
  const SegmentLayout layout{num_boxes, num_classes, groups, items / segments, config.ties_class_first};
  Check(layout.room <= INT32_MAX && segments <= INT32_MAX, "a class-agnostic image of ", num_boxes, " boxes and ",
        num_classes, " classes, or ", segments, " (image, class) groups, is more than the device path handles (2^31)");
  const auto places = static_cast<size_t>(items);
  const IsCandidateAt<Problem> is_candidate{problem, layout, config.background_class};

  // Each segment's candidates at its front, in tie order, then in rank order.
  Scratch<int64_t> begin = io.Allocate<int64_t>(static_cast<size_t>(segments));
  Scratch<int64_t> end = io.Allocate<int64_t>(static_cast<size_t>(segments));
  Scratch<int64_t> set_size = io.Allocate<int64_t>(static_cast<size_t>(segments));
  Scratch<int32_t> tie_places = io.Allocate<int32_t>(places), sorted_places = io.Allocate<int32_t>(places);
  int sorted_into = 0;
  {
    Scratch<A> keys = io.Allocate<A>(places);
    {
      Scratch<int64_t> before = io.Allocate<int64_t>(places);
      const thrust::counting_iterator<int64_t> first(0);
      thrust::exclusive_scan(io.policy(), thrust::make_transform_iterator(first, is_candidate),
                             thrust::make_transform_iterator(first + items, is_candidate), before.data());
      io.ForEach(items, WriteCandidate<A, Problem>{is_candidate, before.data(), keys.data(), tie_places.data()});
      io.ForEach(segments, SegmentCandidates<Problem>{is_candidate, before.data(), begin.data(), end.data(),
                                                      set_size.data(), config.pre_topk});
    }
    Scratch<A> sorted_keys = io.Allocate<A>(places);
    sorted_into = SortWithinRanges(io, keys.data(), sorted_keys.data(), tie_places.data(), sorted_places.data(), items,
                                   segments, begin.data(), end.data());
  }
  const int32_t* ranked_places = sorted_into == 0 ? tie_places.data() : sorted_places.data();
  Scratch<NmsCandidate<A>> candidates = io.Allocate<NmsCandidate<A>>(places);
  io.ForEach(items, MakeCandidates<A, Problem>{problem, layout, ranked_places, set_size.data(), candidates.data()});

  // Greedy NMS in each NMS set, at most max_output kept.
  const int64_t set_room = config.pre_topk >= 0 ? std::min(layout.room, config.pre_topk) : layout.room;
  const int64_t capacity = std::min(set_room, max_output);
  Scratch<int64_t> kept = io.Allocate<int64_t>(static_cast<size_t>(segments * capacity));
  Scratch<int64_t> kept_count = io.Allocate<int64_t>(static_cast<size_t>(segments));
  GreedyKeepAgainstKept(io, segments, GreedySets{set_size.data(), kept.data(), kept_count.data(), capacity, max_output},
                        SegmentSuppresses<A, Problem>{problem, candidates.data(), layout.room, groups});

  // Each image's kept candidates by rank, the first max_output of them its detections.
  io.ForEach(segments * capacity, PlaceKept<A>{candidates.data(), kept.data(), kept_count.data(), out.rows.data(),
                                               layout, capacity, max_output});
  io.ForEach(batch, CountDetections{kept_count.data(), out.count.data(), groups, max_output});
  return out;
}

}  // namespace ortops::device
