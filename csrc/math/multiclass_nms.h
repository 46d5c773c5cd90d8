// Multi-class NMS with a fixed number of outputs per image: the selection behind ortops'
// BatchedNMS, TensorRT's EfficientNMS_TRT / BatchedNMS_TRT and mmdeploy's TRTBatchedNMS.
//
// Per image, every (box, class) whose score passes the score threshold is a candidate
// (the background class never is). Candidates are grouped per class (or all in one group
// when class-agnostic); in each group the best `pre_topk` enter a greedy NMS in score order;
// the image's output is then the best `max_output` kept candidates over all groups.
//
// One total order is used everywhere: score descending, then box index, then class
// ascending (or, with `ties_class_first`, class before box), so every result is
// deterministic and independent of the thread count. Greedy
// NMS within a group only ever looks at higher-ranked candidates, so a group stops as soon
// as it has kept `max_output` (no later candidate of it can reach the output), and the
// candidates are sorted a chunk at a time, so that a group that fills up early never sorts
// its tail. Nodes differ only in their score test, IoU arithmetic, box decoding and output
// encoding, which they pass in.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <type_traits>

#include "core/host_device.h"
#include "core/kernel_io.h"

namespace ortops {

template <typename T>
struct NmsCandidate {
  T score;
  int32_t box;
  int32_t cls;
};

// The order of the output: score descending, then box, then class ascending (the device path's
// too, device/multiclass_nms.h).
template <typename T>
ORTOPS_HD inline bool RanksBefore(const NmsCandidate<T>& a, const NmsCandidate<T>& b) {
  if (a.score != b.score) return a.score > b.score;
  if (a.box != b.box) return a.box < b.box;
  return a.cls < b.cls;
}

// The order with `ties_class_first`: score descending, then class, then box ascending.
template <typename T>
ORTOPS_HD inline bool RanksBeforeClassFirst(const NmsCandidate<T>& a, const NmsCandidate<T>& b) {
  if (a.score != b.score) return a.score > b.score;
  if (a.cls != b.cls) return a.cls < b.cls;
  return a.box < b.box;
}

struct MulticlassNmsConfig {
  int64_t background_class = -1;  // never a candidate; -1 (or any id outside [0, C)): none
  int64_t pre_topk = -1;          // per group, the best this many enter NMS; negative: all
  int64_t max_output = 0;         // per image
  bool class_agnostic = false;    // one group per image instead of one per class
  // Equal scores ordered by class before box: the order of TensorRT's batched NMS plugins
  // (mmdeploy's TRTBatchedNMS), whose last step is a stable sort of per-class lists.
  bool ties_class_first = false;
};

// For groups with many candidates of which many are kept, where testing each candidate
// against every kept one of its group costs up to candidates x kept IoUs (a region proposal
// stage: thousands of each), an op may give a faster structure for the kept candidates of a
// group: make_index(b, set) receives the candidates that may still be kept (a superset, in no
// order) and returns an object with
//   Usable() -> bool               whether it stands for `suppresses` on this set (finite
//                                  boxes, a threshold at which disjoint boxes cannot suppress);
//                                  if not, the group goes on with the plain loop
//   Suppressed(candidate) -> bool  whether an added candidate suppresses this one
//   Keep(candidate)                adds a candidate
// A group takes it once it has kept kIndexAfterKept candidates by the plain loop (a detection
// head, with few kept per group, never pays for building it), if its NMS set has at least
// kIndexedMinimumSet. NoGroupIndex (the default) gives none.
struct NoGroupIndex {};

inline constexpr size_t kIndexedMinimumSet = 256;
inline constexpr size_t kIndexAfterKept = 64;

namespace multiclass_nms_detail {

template <typename T, bool kClassFirst, typename Passes, typename ScoreAt, typename Activate, typename Suppresses,
          typename Emit, typename MakeIndex>
void Run(const KernelIO& io, const MulticlassNmsConfig& config, int64_t batch, int64_t num_boxes, int64_t num_classes,
         Passes& passes, ScoreAt& score_at, Activate& activate, Suppresses& suppresses, Emit& emit,
         MakeIndex& make_index) {
  using Candidate = NmsCandidate<T>;
  // A lambda rather than a function pointer, so that the sorts inline it.
  const auto ranks_before = [](const Candidate& a, const Candidate& b) {
    if constexpr (kClassFirst) {
      return RanksBeforeClassFirst(a, b);
    } else {
      return RanksBefore(a, b);
    }
  };
  const int64_t groups = config.class_agnostic ? 1 : num_classes;
  const auto limit = static_cast<size_t>(std::max<int64_t>(config.max_output, 0));

  // Greedy NMS of one group's candidates, in place: the kept ones end up at the front, in
  // order; returns how many. Sorts a growing chunk at a time, partitioning the candidates
  // before `partition_end`. keeps(candidate, kept) decides whether the next candidate in
  // rank order is kept, given the `kept` ones already at the front.
  const auto greedy = [&](std::span<Candidate> candidates, size_t size, auto partition_end, auto&& keeps) {
    const auto first = candidates.begin();
    size_t kept = 0, sorted = 0, chunk = std::max<size_t>(2 * limit, 64);
    for (size_t next = 0; next < size && kept < limit; ++next) {
      if (next == sorted) {
        const size_t end = std::min(size, sorted + chunk);
        // Partition the best `end` of all candidates (not only of the first `size`: the
        // pre-top-k are the best ones), then sort the new chunk.
        const auto chunk_end = first + static_cast<std::ptrdiff_t>(end);
        if (chunk_end < partition_end) std::nth_element(first + sorted, chunk_end, partition_end, ranks_before);
        std::sort(first + sorted, chunk_end, ranks_before);
        sorted = end;
        chunk *= 2;
      }
      const Candidate candidate = candidates[next];
      if (keeps(candidate, kept)) candidates[kept++] = candidate;
    }
    return kept;
  };

  auto select_group = [&](int64_t b, std::span<Candidate> candidates) -> size_t {
    size_t size = candidates.size();
    if (config.pre_topk >= 0) size = std::min(size, static_cast<size_t>(config.pre_topk));
    const auto plain_keeps = [&](const Candidate& candidate, size_t kept) {
      for (size_t k = 0; k < kept; ++k) {
        if (suppresses(b, candidates[k], candidate)) return false;
      }
      return true;
    };
    if constexpr (std::is_same_v<MakeIndex, NoGroupIndex>) {
      return greedy(candidates, size, candidates.end(), plain_keeps);
    } else {
      if (size < kIndexedMinimumSet || limit <= kIndexAfterKept) {
        return greedy(candidates, size, candidates.end(), plain_keeps);
      }
      // The group's NMS set is partitioned off first, so that the index can be built for the
      // candidates at the front; the chunks then partition within it (the same best `end`).
      const auto first = candidates.begin(), partition_end = first + static_cast<std::ptrdiff_t>(size);
      if (size < candidates.size()) std::nth_element(first, partition_end, candidates.end(), ranks_before);
      using Index = decltype(make_index(b, std::span<const Candidate>()));
      std::optional<Index> index;
      bool plain = true;
      return greedy(candidates, size, partition_end, [&](const Candidate& candidate, size_t kept) {
        if (plain) {
          if (!plain_keeps(candidate, kept)) return false;
          if (kept + 1 == kIndexAfterKept) {
            // The front holds the kept candidates (this one is about to join them), then
            // processed ones, then those still to come: a superset of what may be added.
            index.emplace(make_index(b, std::span<const Candidate>(candidates.data(), size)));
            plain = !index->Usable();
            if (!plain) {
              for (size_t k = 0; k < kept; ++k) index->Keep(candidates[k]);
              index->Keep(candidate);
            }
          }
          return true;
        }
        if (index->Suppressed(candidate)) return false;
        index->Keep(candidate);
        return true;
      });
    }
  };

  // The candidates among boxes [begin, end) of image b, appended in box order. A block of
  // boxes is first scanned for those with any passing score, in loops without branches or
  // calls that the compiler vectorises (in a detector head almost no box has one, so this
  // costs about one read of the scores); only those boxes are then looked at class by class.
  auto collect = [&](int64_t b, int64_t begin, int64_t end, ScratchVector<Candidate>& out) {
    constexpr int64_t kBlock = 256;
    int64_t rows[kBlock];
    for (int64_t start = begin; start < end; start += kBlock) {
      const int64_t stop = std::min(end, start + kBlock);
      int64_t found = 0;
      for (int64_t n = start; n < stop; ++n) {
        int any = 0;
        for (int64_t c = 0; c < num_classes; ++c) any |= static_cast<int>(passes(score_at(b, n, c)));
        rows[found] = n;
        found += any;
      }
      // The same over the classes of each such box, 16 at a time: test them together, and
      // only where one passes, find which (appending is a call, after which captured values
      // are read again: it is kept off these loops).
      constexpr int64_t kClasses = 16;
      for (int64_t i = 0; i < found; ++i) {
        const int64_t n = rows[i];
        for (int64_t first = 0; first < num_classes; first += kClasses) {
          const int64_t last = std::min(num_classes, first + kClasses);
          int any = 0;
          for (int64_t c = first; c < last; ++c) any |= static_cast<int>(passes(score_at(b, n, c)));
          if (any == 0) continue;
          int64_t passing = 0, classes_found[kClasses];
          for (int64_t c = first; c < last; ++c) {
            classes_found[passing] = c;
            passing += static_cast<int64_t>(passes(score_at(b, n, c)));
          }
          for (int64_t j = 0; j < passing; ++j) {
            const int64_t c = classes_found[j];
            if (c != config.background_class) {
              out.push_back(Candidate{activate(score_at(b, n, c)), static_cast<int32_t>(n), static_cast<int32_t>(c)});
            }
          }
        }
      }
    }
  };

  // One image: collect the candidates (over ranges of boxes in parallel when asked), bucket
  // them by group, select each group (in parallel when asked), merge the kept ones.
  auto select_image = [&](int64_t b, bool parallel) {
    constexpr int64_t kBoxesPerPart = 1024;
    const auto parts = static_cast<size_t>(parallel ? std::clamp<int64_t>(num_boxes / kBoxesPerPart, 1, 64) : 1);
    ScratchVector<ScratchVector<Candidate>> found(parts, ScratchVector<Candidate>(io.Allocator<Candidate>()),
                                                  io.Allocator<ScratchVector<Candidate>>());
    auto collect_part = [&](size_t p) {
      found[p].reserve(1024);  // a detector head's usual count, in one allocation
      collect(b, num_boxes * static_cast<int64_t>(p) / static_cast<int64_t>(parts),
              num_boxes * static_cast<int64_t>(p + 1) / static_cast<int64_t>(parts), found[p]);
    };
    if (parts > 1) {
      io.ParallelFor(parts, collect_part);
    } else {
      collect_part(0);
    }

    ScratchVector<int64_t> group_start = io.Vector<int64_t>(static_cast<size_t>(groups) + 1);
    auto group_of = [&](int64_t c) { return config.class_agnostic ? int64_t{0} : c; };
    for (const auto& part : found) {
      for (const Candidate& candidate : part) ++group_start[group_of(candidate.cls) + 1];
    }
    for (int64_t g = 0; g < groups; ++g) group_start[g + 1] += group_start[g];
    ScratchVector<Candidate> candidates(static_cast<size_t>(group_start[groups]), Candidate{},
                                        io.Allocator<Candidate>());
    ScratchVector<int64_t> fill(group_start.begin(), group_start.end() - 1, io.Allocator<int64_t>());
    for (const auto& part : found) {
      for (const Candidate& candidate : part) candidates[fill[group_of(candidate.cls)]++] = candidate;
    }
    const bool parallel_groups = parallel;

    ScratchVector<size_t> kept = io.Vector<size_t>(static_cast<size_t>(groups));
    auto run_group = [&](size_t g) {
      std::span<Candidate> group(candidates.data() + group_start[g], candidates.data() + group_start[g + 1]);
      kept[g] = select_group(b, group);
    };
    if (parallel_groups) {
      io.ParallelFor(static_cast<size_t>(groups), run_group);
    } else {
      for (size_t g = 0; g < static_cast<size_t>(groups); ++g) run_group(g);
    }

    // Gather the kept candidates of every group to the front, then order the best `limit`.
    size_t total = 0;
    for (int64_t g = 0; g < groups; ++g) {
      const Candidate* group = candidates.data() + group_start[g];
      std::copy(group, group + kept[g], candidates.begin() + static_cast<int64_t>(total));
      total += kept[g];
    }
    const size_t count = std::min(total, limit);
    std::partial_sort(candidates.begin(), candidates.begin() + static_cast<int64_t>(count),
                      candidates.begin() + static_cast<int64_t>(total), ranks_before);
    emit(b, std::span<const Candidate>(candidates.data(), count));
  };

  // A single image parallelises over ranges of its boxes and over its classes; otherwise over
  // images.
  if (batch == 1) {
    select_image(0, true);
  } else {
    io.ParallelFor(static_cast<size_t>(batch), [&](size_t b) { select_image(static_cast<int64_t>(b), false); });
  }
}

// Run with the tie order the config asks for, a compile-time argument of the comparisons.
template <typename T, typename... Args>
void RunInTieOrder(const KernelIO& io, const MulticlassNmsConfig& config, int64_t batch, int64_t num_boxes,
                   int64_t num_classes, Args&&... args) {
  if (config.ties_class_first) {
    Run<T, true>(io, config, batch, num_boxes, num_classes, args...);
  } else {
    Run<T, false>(io, config, batch, num_boxes, num_classes, args...);
  }
}

}  // namespace multiclass_nms_detail

// Runs the selection over `batch` images of `num_boxes` boxes and `num_classes` classes.
//   passes(score) -> bool                  the score test (threshold, strict or not; false for NaN)
//   score_at(b, n, c) -> T                 the score of box n for class c in image b
//   activate(score) -> T                   (optional) the score a candidate ranks and is emitted
//                                          with, from the one that passed: e.g. a sigmoid whose
//                                          threshold `passes` tests on the logit, so that only
//                                          candidates pay for it. Must not decrease (the
//                                          per-group top-k ranks by it).
//   suppresses(b, kept, candidate) -> bool whether a kept candidate suppresses a later one
//                                          (called only for candidates of the same group)
//   emit(b, std::span<const NmsCandidate<T>>) receives image b's output, in output order
// num_boxes and num_classes must be below 2^31 (callers check); emit runs once per image,
// possibly on several threads at once for different images.
template <typename T, typename Passes, typename ScoreAt, typename Activate, typename Suppresses, typename Emit>
void MulticlassNms(const KernelIO& io, const MulticlassNmsConfig& config, int64_t batch, int64_t num_boxes,
                   int64_t num_classes, Passes&& passes, ScoreAt&& score_at, Activate&& activate,
                   Suppresses&& suppresses, Emit&& emit) {
  NoGroupIndex none;
  multiclass_nms_detail::RunInTieOrder<T>(io, config, batch, num_boxes, num_classes, passes, score_at, activate,
                                          suppresses, emit, none);
}

template <typename T, typename Passes, typename ScoreAt, typename Suppresses, typename Emit>
void MulticlassNms(const KernelIO& io, const MulticlassNmsConfig& config, int64_t batch, int64_t num_boxes,
                   int64_t num_classes, Passes&& passes, ScoreAt&& score_at, Suppresses&& suppresses, Emit&& emit) {
  MulticlassNms<T>(
      io, config, batch, num_boxes, num_classes, passes, score_at, [](T score) { return score; }, suppresses, emit);
}

// The same with make_index(b, std::span<const NmsCandidate<T>>) for large groups (see
// NoGroupIndex above); `suppresses` still decides in the groups the index does not take.
template <typename T, typename Passes, typename ScoreAt, typename Activate, typename Suppresses, typename Emit,
          typename MakeIndex>
void MulticlassNmsIndexed(const KernelIO& io, const MulticlassNmsConfig& config, int64_t batch, int64_t num_boxes,
                          int64_t num_classes, Passes&& passes, ScoreAt&& score_at, Activate&& activate,
                          Suppresses&& suppresses, Emit&& emit, MakeIndex&& make_index) {
  multiclass_nms_detail::RunInTieOrder<T>(io, config, batch, num_boxes, num_classes, passes, score_at, activate,
                                          suppresses, emit, make_index);
}

}  // namespace ortops
