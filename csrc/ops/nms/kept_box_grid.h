// The kept boxes of a greedy NMS, for the test "does a kept box suppress this candidate?" in
// about constant time per candidate: shared by NMS and the batched NMS family.
#pragma once

#include <cstdint>

#include "core/kernel_io.h"
#include "math/box_grid.h"
#include "ops/nms/suppress.h"

namespace ortops::nms {

// Kept boxes in a uniform grid (math/box_grid.h), each cell's boxes stored one array per
// coordinate, so that a query tests a cell's boxes in vector lanes (AnySuppresses). A box is
// stored in every cell it covers (a cell's capacity is the count of all boxes covering it,
// known before any is kept); a box over many cells in a list every query tests.
//
// Only boxes that share a cell are tested, so the rule must give no passing IoU to boxes
// that do not overlap with positive width and height (their coordinates plus `offset` as
// their far corner): for a threshold >= 0, the IoUs of suppress.h with a kBox / kTrtBatched
// offset equal to this one (kTrtBatched's disjoint boxes excepted, see TrtBatchedIoU), and
// kEfficient for a threshold > 0. Boxes must be finite.
template <typename T>
class KeptBoxGrid {
 public:
  // Half the median box side was the fastest cell for the scalar grid; with a cell's boxes
  // tested in vector lanes, fewer, larger cells do better (benchmarks/bench.py nms_case).
  static constexpr double kCellScale = 1.0;
  using Range = typename GridCells<T, SessionAllocator<T>>::Range;

  // `boxes`: (x1, y1, x2, y2) of every box that may be kept, `count` of them.
  KeptBoxGrid(const KernelIO& io, const T* boxes, int64_t count, T offset)
      : cells_(boxes, count, offset, kCellScale, io.Allocator<T>()),
        range_(static_cast<size_t>(count), io.Allocator<Range>()),
        start_(io.Vector<int64_t>(static_cast<size_t>(cells_.size()) + 1)),
        fill_(io.Allocator<int64_t>()) {
    int64_t wide = 0;
    for (int64_t i = 0; i < count; ++i) {
      const Range r = range_[static_cast<size_t>(i)] = cells_.Of(i);
      if (r.Count() > kMaxCells) {
        ++wide;
        continue;
      }
      for (int64_t y = r.y0; y <= r.y1; ++y) {
        for (int64_t x = r.x0; x <= r.x1; ++x) ++start_[cells_.Index(x, y) + 1];
      }
    }
    for (size_t c = 1; c < start_.size(); ++c) start_[c] += start_[c - 1];
    fill_.assign(start_.begin(), start_.end() - 1);
    wide_begin_ = wide_end_ = start_.back();
    const auto entries = static_cast<size_t>(wide_begin_ + wide);
    for (auto* column : {&x1_, &y1_, &x2_, &y2_, &area_}) *column = io.Allocate<T>(entries);
  }

  // Whether a kept box suppresses the candidate box i (of the boxes given at construction).
  bool Suppresses(int64_t i, const Candidate<T>& candidate) const {
    return Suppresses(range_[static_cast<size_t>(i)], candidate);
  }

  // Whether a kept box suppresses a candidate that is one of the boxes given at construction,
  // found by its coordinates.
  bool Suppresses(const Candidate<T>& candidate) const { return Suppresses(RangeOf(candidate), candidate); }

  void Insert(int64_t i, const Candidate<T>& box) { Insert(range_[static_cast<size_t>(i)], box); }
  void Insert(const Candidate<T>& box) { Insert(RangeOf(box), box); }

 private:
  static constexpr int64_t kMaxCells = GridCells<T, SessionAllocator<T>>::kMaxCellsPerBox;

  Range RangeOf(const Candidate<T>& box) const {
    const T corners[4] = {box.x1, box.y1, box.x2, box.y2};
    return cells_.OfBox(corners);
  }

  bool Suppresses(const Range& r, const Candidate<T>& candidate) const {
    if (wide_end_ > wide_begin_ && Any(wide_begin_, wide_end_, candidate)) return true;
    for (int64_t y = r.y0; y <= r.y1; ++y) {
      for (int64_t x = r.x0; x <= r.x1; ++x) {
        const size_t cell = cells_.Index(x, y);
        if (fill_[cell] > start_[cell] && Any(start_[cell], fill_[cell], candidate)) return true;
      }
    }
    return false;
  }

  void Insert(const Range& r, const Candidate<T>& box) {
    if (r.Count() > kMaxCells) {
      Store(wide_end_++, box);
      return;
    }
    for (int64_t y = r.y0; y <= r.y1; ++y) {
      for (int64_t x = r.x0; x <= r.x1; ++x) Store(fill_[cells_.Index(x, y)]++, box);
    }
  }

  bool Any(int64_t begin, int64_t end, const Candidate<T>& candidate) const {
    const BoxColumns<T> kept{x1_.data() + begin, y1_.data() + begin,   x2_.data() + begin,
                             y2_.data() + begin, area_.data() + begin, end - begin};
    return ORTOPS_ISA_CALL(AnySuppresses, kept, candidate);
  }

  void Store(int64_t e, const Candidate<T>& box) {
    const auto k = static_cast<size_t>(e);
    x1_[k] = box.x1, y1_[k] = box.y1, x2_[k] = box.x2, y2_[k] = box.y2, area_[k] = box.area;
  }

  GridCells<T, SessionAllocator<T>> cells_;
  ScratchVector<Range> range_;
  ScratchVector<int64_t> start_, fill_;  // each cell's kept boxes: entries [start_, fill_)
  int64_t wide_begin_ = 0, wide_end_ = 0;
  Scratch<T> x1_, y1_, x2_, y2_, area_;
};

}  // namespace ortops::nms
