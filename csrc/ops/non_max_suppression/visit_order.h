// The order in which ONNX Runtime's NonMaxSuppression visits one (batch, class)'s candidates:
// a std::priority_queue (a binary max-heap in a vector: make_heap, then pop_heap per visit)
// ordered by score, equal scores by lower index first. Where the scores are comparable that is
// simply descending score, then index (math/score_order.h, or a device sort, computes it). A
// NaN score compares neither below nor above anything, so the visits then depend on how the
// heap moves its entries: VisitOrderOfHeap replays libstdc++'s heap algorithm (the one ONNX
// Runtime's Linux builds run; other standard libraries may visit NaN differently).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace ortops::non_max_suppression {

// The priority queue's "less": a below b.
struct VisitsLater {
  const float* scores;  // by box index
  ORTOPS_HD bool operator()(int64_t a, int64_t b) const {
    return scores[a] < scores[b] || (scores[a] == scores[b] && a > b);
  }
};

// Puts `value` into heap[0, size) at `hole` (whose entry has been taken out): the hole goes
// down to a leaf along the larger children (the right one unless it is below the left, a lone
// left child last), then `value` climbs from there while above its parent, but not above
// `top`. So libstdc++ restores a heap both when building one and after a pop.
template <typename Less>
ORTOPS_HD inline void SiftHole(int64_t* heap, int64_t hole, int64_t size, int64_t value, const Less& less) {
  const int64_t top = hole;
  int64_t child = hole;
  while (child < (size - 1) / 2) {
    child = 2 * (child + 1);
    if (less(heap[child], heap[child - 1])) --child;
    heap[hole] = heap[child];
    hole = child;
  }
  if ((size & 1) == 0 && child == (size - 2) / 2) {
    child = 2 * (child + 1);
    heap[hole] = heap[child - 1];
    hole = child - 1;
  }
  for (int64_t parent = (hole - 1) / 2; hole > top && less(heap[parent], value); parent = (hole - 1) / 2) {
    heap[hole] = heap[parent];
    hole = parent;
  }
  heap[hole] = value;
}

// items[0, count): the candidates' box indices in ascending order (as ONNX Runtime queues
// them); rewritten to the order the queue gives them back in.
template <typename Less>
ORTOPS_HD inline void VisitOrderOfHeap(int64_t* items, int64_t count, const Less& less) {
  if (count < 2) return;
  for (int64_t parent = (count - 2) / 2;; --parent) {  // make_heap
    SiftHole(items, parent, count, items[parent], less);
    if (parent == 0) break;
  }
  for (int64_t size = count; size > 1; --size) {  // pop_heap moves the top behind the heap
    const int64_t last = items[size - 1];
    items[size - 1] = items[0];
    SiftHole(items, 0, size - 1, last, less);
  }
  for (int64_t i = 0, j = count - 1; i < j; ++i, --j) {  // popped last-first
    const int64_t t = items[i];
    items[i] = items[j];
    items[j] = t;
  }
}

}  // namespace ortops::non_max_suppression
