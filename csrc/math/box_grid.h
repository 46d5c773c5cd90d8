// A uniform grid over axis-aligned boxes, for the NMS family: a query visits only boxes
// that may overlap the queried one.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "math/box_iou.h"

namespace ortops {

// The grids take the allocator of their per-call storage (kernels pass the session's).
template <typename Allocator, typename U>
using GridVector = std::vector<U, typename std::allocator_traits<Allocator>::template rebind_alloc<U>>;

// The cells of a uniform grid over axis-aligned boxes (x1, y1, x2, y2), with cells of
// `cell_scale` times the median box side, so that a typical box covers a few cells. Cell
// indices are a monotone function of x and y, so two boxes that overlap with positive
// width and height share a cell.
template <typename T, typename Allocator = std::allocator<T>>
class GridCells {
 public:
  struct Range {
    int64_t x0, x1, y0, y1;  // inclusive; x0 > x1 when the box can overlap nothing
    int64_t Count() const { return x0 > x1 ? 0 : (x1 - x0 + 1) * (y1 - y0 + 1); }
  };

  // A box over more cells than this is kept in a list of its own, which every query visits,
  // instead of in each of its cells.
  static constexpr int64_t kMaxCellsPerBox = 16;

  // `boxes` must be finite.
  GridCells(const T* boxes, int64_t count, T offset, double cell_scale, const Allocator& allocator)
      : boxes_(boxes), offset_(offset) {
    double min_x = 0, min_y = 0, max_x = 0, max_y = 0;
    GridVector<Allocator, double> extents(allocator);
    extents.reserve(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      const T* b = boxes + 4 * i;
      const double x1 = b[0], y1 = b[1], x2 = double(b[2]) + double(offset), y2 = double(b[3]) + double(offset);
      if (x2 <= x1 || y2 <= y1) continue;  // can overlap nothing with positive area
      if (extents.empty()) min_x = x1, min_y = y1, max_x = x2, max_y = y2;
      min_x = std::min(min_x, x1), min_y = std::min(min_y, y1);
      max_x = std::max(max_x, x2), max_y = std::max(max_y, y2);
      extents.push_back(std::max(x2 - x1, y2 - y1));
    }
    origin_x_ = min_x;
    origin_y_ = min_y;
    if (!extents.empty()) {
      auto middle = extents.begin() + static_cast<std::ptrdiff_t>(extents.size() / 2);
      std::nth_element(extents.begin(), middle, extents.end());
      // A few cells per box on average at most: spread-out outliers must not make the grid
      // (allocated and, for wide queries, walked per call) much larger than the input.
      const double max_per_side = std::clamp(2 * std::sqrt(double(count)), 16.0, 1024.0);
      const double span = std::max(max_x - min_x, max_y - min_y);
      cell_ = std::max({*middle * cell_scale, span / max_per_side, 1e-30});
    }
    columns_ = static_cast<int64_t>((max_x - min_x) / cell_) + 1;
    rows_ = static_cast<int64_t>((max_y - min_y) / cell_) + 1;
  }

  int64_t size() const { return columns_ * rows_; }
  size_t Index(int64_t x, int64_t y) const { return static_cast<size_t>(y * columns_ + x); }

  Range Of(int64_t i) const { return OfBox(boxes_ + 4 * i); }

  // The cells of any box (x1, y1, x2, y2), for boxes looked up by their coordinates.
  Range OfBox(const T* b) const {
    const double x1 = b[0], y1 = b[1], x2 = double(b[2]) + double(offset_), y2 = double(b[3]) + double(offset_);
    if (x2 <= x1 || y2 <= y1) return {1, 0, 1, 0};
    return {Column(x1), Column(x2), Row(y1), Row(y2)};
  }

 private:
  int64_t Column(double x) const { return std::clamp<int64_t>(int64_t((x - origin_x_) / cell_), 0, columns_ - 1); }
  int64_t Row(double y) const { return std::clamp<int64_t>(int64_t((y - origin_y_) / cell_), 0, rows_ - 1); }

  const T* boxes_;
  T offset_;
  double origin_x_ = 0, origin_y_ = 0, cell_ = 1;
  int64_t columns_ = 1, rows_ = 1;
};

// Boxes (x1, y1, x2, y2) inserted one by one into a uniform grid, so that a query visits
// only the boxes that share a cell with the queried one. Every box that overlaps it with
// positive width and height is visited; others may be visited too, and a box may be
// visited more than once.
template <typename T, typename Allocator = std::allocator<T>>
class BoxGrid {
 public:
  // `boxes` must be finite. Half the median box side was the fastest cell in
  // benchmarks/bench.py.
  BoxGrid(const T* boxes, int64_t count, T offset, const Allocator& allocator = Allocator())
      : cells_(boxes, count, offset, 0.5, allocator), head_(allocator), entries_(allocator), wide_(allocator) {
    head_.assign(static_cast<size_t>(cells_.size()), -1);
    entries_.reserve(static_cast<size_t>(count));
  }

  // Calls visit(k) for the inserted boxes k near box i until one returns true; returns
  // whether one did.
  template <typename Visit>
  bool AnyNear(int64_t i, Visit&& visit) const {
    for (int64_t k : wide_) {
      if (visit(k)) return true;
    }
    const auto r = cells_.Of(i);
    for (int64_t y = r.y0; y <= r.y1; ++y) {
      for (int64_t x = r.x0; x <= r.x1; ++x) {
        for (int32_t e = head_[cells_.Index(x, y)]; e >= 0; e = entries_[e].next) {
          if (visit(entries_[e].box)) return true;
        }
      }
    }
    return false;
  }

  void Insert(int64_t i) {
    const auto r = cells_.Of(i);
    if (r.Count() == 0) return;
    if (r.Count() > GridCells<T, Allocator>::kMaxCellsPerBox) {
      wide_.push_back(i);
      return;
    }
    for (int64_t y = r.y0; y <= r.y1; ++y) {
      for (int64_t x = r.x0; x <= r.x1; ++x) {
        int32_t& head = head_[cells_.Index(x, y)];
        entries_.push_back({i, head});
        head = static_cast<int32_t>(entries_.size() - 1);
      }
    }
  }

 private:
  struct Entry {
    int64_t box;
    int32_t next;
  };

  GridCells<T, Allocator> cells_;
  GridVector<Allocator, int32_t> head_;
  GridVector<Allocator, Entry> entries_;
  GridVector<Allocator, int64_t> wide_;
};

// All boxes of a set bucketed once, for queries that visit every box overlapping a given
// one exactly once while boxes leave the set (soft-NMS decays every remaining neighbour of
// each selected box, then drops some). Each cell holds its boxes' coordinates contiguously,
// one array per coordinate, so a query tests a whole cell in a loop the compiler
// vectorises; a removal moves the cell's last box into the gap.
template <typename T, typename Allocator = std::allocator<T>>
class PackedBoxGrid {
 public:
  // `boxes` must be finite and the box count below 2^31. Cells of the median box side
  // were the fastest for soft-NMS in benchmarks/bench.py (0.5x to 2x tried): a vectorised
  // test of a few more boxes costs less than meeting a box in more cells.
  PackedBoxGrid(const T* boxes, int64_t count, T offset, const Allocator& allocator = Allocator())
      : boxes_(boxes),
        offset_(offset),
        cells_(boxes, count, offset, 1.0, allocator),
        range_(static_cast<size_t>(count), allocator),
        first_slot_(allocator),
        slot_(allocator),
        begin_(allocator),
        end_(allocator),
        x1_(allocator),
        y1_(allocator),
        x2_(allocator),
        y2_(allocator),
        id_(allocator),
        column_(allocator),
        row_(allocator),
        hit_(allocator),
        found_(allocator),
        wide_(allocator) {
    const auto cell_count = static_cast<size_t>(cells_.size());
    GridVector<Allocator, int64_t> fill(cell_count + 1, 0, allocator);
    first_slot_.assign(static_cast<size_t>(count) + 1, 0);
    for (int64_t i = 0; i < count; ++i) {
      const auto r = range_[static_cast<size_t>(i)] = cells_.Of(i);
      const bool packed = r.Count() > 0 && r.Count() <= kMaxCellsPerBox;
      first_slot_[static_cast<size_t>(i) + 1] = first_slot_[static_cast<size_t>(i)] + (packed ? r.Count() : 0);
      if (r.Count() > kMaxCellsPerBox) wide_.push_back(static_cast<int32_t>(i));
      if (!packed) continue;
      for (int64_t y = r.y0; y <= r.y1; ++y) {
        for (int64_t x = r.x0; x <= r.x1; ++x) ++fill[cells_.Index(x, y) + 1];
      }
    }
    size_t largest = 0;
    for (size_t c = 0; c < cell_count; ++c) {
      largest = std::max(largest, static_cast<size_t>(fill[c + 1]));
      fill[c + 1] += fill[c];
    }
    begin_.assign(fill.begin(), fill.end() - 1);
    end_.assign(begin_.begin(), begin_.end());
    const auto entries = static_cast<size_t>(fill.back());
    for (auto* column : {&x1_, &y1_, &x2_, &y2_}) column->resize(entries);
    id_.resize(entries), column_.resize(entries), row_.resize(entries), slot_.resize(entries);
    hit_.resize(largest), found_.resize(largest);
    for (int64_t i = 0; i < count; ++i) {
      const auto r = range_[static_cast<size_t>(i)];
      if (first_slot_[static_cast<size_t>(i) + 1] == first_slot_[static_cast<size_t>(i)]) continue;
      const T* b = boxes + 4 * i;
      int64_t slot = first_slot_[static_cast<size_t>(i)];
      for (int64_t y = r.y0; y <= r.y1; ++y) {
        for (int64_t x = r.x0; x <= r.x1; ++x) {
          const auto e = static_cast<size_t>(end_[cells_.Index(x, y)]++);
          x1_[e] = b[0], y1_[e] = b[1], x2_[e] = b[2], y2_[e] = b[3];
          id_[e] = static_cast<int32_t>(i), column_[e] = static_cast<int32_t>(r.x0),
          row_[e] = static_cast<int32_t>(r.y0);
          slot_[static_cast<size_t>(slot++)] = static_cast<int64_t>(e);
        }
      }
    }
  }

  // The box ids ordered by their first cell, so that boxes near each other are mostly
  // near each other in the order too.
  GridVector<Allocator, int64_t> CellOrder() const {
    GridVector<Allocator, int64_t> first(static_cast<size_t>(cells_.size()) + 1, 0, id_.get_allocator());
    GridVector<Allocator, int64_t> order(range_.size(), 0, id_.get_allocator());
    const auto cell_of = [&](size_t i) {
      return range_[i].Count() == 0 ? 0 : cells_.Index(range_[i].x0, range_[i].y0);
    };
    for (size_t i = 0; i < range_.size(); ++i) ++first[cell_of(i) + 1];
    for (size_t c = 1; c < first.size(); ++c) first[c] += first[c - 1];
    for (size_t i = 0; i < range_.size(); ++i)
      order[static_cast<size_t>(first[cell_of(i)]++)] = static_cast<int64_t>(i);
    return order;
  }

  // Takes box i, which must be in the set, out of it.
  void Remove(int64_t i) {
    const auto r = range_[static_cast<size_t>(i)];
    if (r.Count() > kMaxCellsPerBox) {
      wide_.erase(std::find(wide_.begin(), wide_.end(), static_cast<int32_t>(i)));
      return;
    }
    int64_t slot = first_slot_[static_cast<size_t>(i)];
    for (int64_t y = r.y0; y <= r.y1; ++y) {  // an empty range (Count() 0) has y0 > y1 too
      for (int64_t x = r.x0; x <= r.x1; ++x) {
        const auto e = static_cast<size_t>(slot_[static_cast<size_t>(slot++)]);
        const auto last = static_cast<size_t>(--end_[cells_.Index(x, y)]);
        if (e == last) continue;
        x1_[e] = x1_[last], y1_[e] = y1_[last], x2_[e] = x2_[last], y2_[e] = y2_[last];
        id_[e] = id_[last], column_[e] = column_[last], row_[e] = row_[last];
        const auto moved = static_cast<size_t>(id_[e]);
        const auto m = range_[moved];
        slot_[static_cast<size_t>(first_slot_[moved] + (y - m.y0) * (m.x1 - m.x0 + 1) + (x - m.x0))] =
            static_cast<int64_t>(e);
      }
    }
  }

  // Calls visit(k) once for every box k in the set that overlaps box i with positive width
  // and height (BoxesIntersect), i itself included if it is in the set.
  template <typename Visit>
  void ForEachOverlapping(int64_t i, Visit&& visit) {
    const T* q = boxes_ + 4 * i;
    for (int32_t k : wide_) {
      if (BoxesIntersect(q, boxes_ + 4 * k, offset_)) visit(int64_t{k});
    }
    const auto r = range_[static_cast<size_t>(i)];
    const T q_x1 = q[0], q_y1 = q[1], q_x2 = q[2], q_y2 = q[3], offset = offset_;
    for (int64_t y = r.y0; y <= r.y1; ++y) {
      for (int64_t x = r.x0; x <= r.x1; ++x) {
        const auto cell = cells_.Index(x, y);
        const auto begin = static_cast<size_t>(begin_[cell]), size = static_cast<size_t>(end_[cell]) - begin;
        // A pair is met in every cell the two share; it counts in the first of them, the
        // cell (max of first columns, max of first rows). In the query's first column
        // every box passes the column test, elsewhere only boxes that start there.
        const int32_t any_column = x == r.x0, any_row = y == r.y0;
        const auto column = static_cast<int32_t>(x), row = static_cast<int32_t>(y);
        const T *x1 = &x1_[begin], *y1 = &y1_[begin], *x2 = &x2_[begin], *y2 = &y2_[begin];
        const int32_t *columns = &column_[begin], *rows = &row_[begin];
        for (size_t e = 0; e < size; ++e) {
          const int32_t overlaps = (std::min(x2[e], q_x2) - std::max(x1[e], q_x1) + offset > 0) &
                                   (std::min(y2[e], q_y2) - std::max(y1[e], q_y1) + offset > 0);
          hit_[e] = overlaps & (any_column | (columns[e] == column)) & (any_row | (rows[e] == row));
        }
        size_t found = 0;
        for (size_t e = 0; e < size; ++e) {
          found_[found] = id_[begin + e];
          found += static_cast<size_t>(hit_[e]);
        }
        for (size_t f = 0; f < found; ++f) visit(int64_t{found_[f]});
      }
    }
  }

 private:
  static constexpr int64_t kMaxCellsPerBox = GridCells<T, Allocator>::kMaxCellsPerBox;

  const T* boxes_;
  T offset_;
  GridCells<T, Allocator> cells_;
  GridVector<Allocator, typename GridCells<T, Allocator>::Range> range_;
  GridVector<Allocator, int64_t> first_slot_;  // box i's entries, one per cell, at slot_[first_slot_[i]...]
  GridVector<Allocator, int64_t> slot_;
  GridVector<Allocator, int64_t> begin_, end_;  // each cell's entries
  GridVector<Allocator, T> x1_, y1_, x2_, y2_;
  GridVector<Allocator, int32_t> id_, column_, row_;  // column_/row_: the box's first cell
  GridVector<Allocator, int32_t> hit_, found_;        // one cell's query results
  GridVector<Allocator, int32_t> wide_;
};

}  // namespace ortops
