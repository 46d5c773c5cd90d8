// A uniform grid over axis-aligned boxes, for the NMS family: a query visits only boxes
// that may overlap the queried one.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ortops {

// Boxes (x1, y1, x2, y2) indexed by a uniform grid, so that a query visits only the boxes
// that share a cell with the queried one. Every box that overlaps it with positive width
// and height is visited (cell indices are a monotone function of x and y, so such boxes
// share a cell); others may be visited too, and a box may be visited more than once.
template <typename T>
class BoxGrid {
 public:
  // Sizes the grid so a typical box covers a few cells (half the median box side was the
  // fastest in benchmarks/bench.py). `boxes` must be finite.
  BoxGrid(const T* boxes, int64_t count, T offset) : boxes_(boxes), offset_(offset) {
    double min_x = 0, min_y = 0, max_x = 0, max_y = 0;
    std::vector<double> extents;
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
      const double span = std::max(max_x - min_x, max_y - min_y);
      cell_ = std::max({*middle * 0.5, span / kMaxCellsPerSide, 1e-30});
    }
    columns_ = static_cast<int64_t>((max_x - min_x) / cell_) + 1;
    rows_ = static_cast<int64_t>((max_y - min_y) / cell_) + 1;
    head_.assign(static_cast<size_t>(columns_ * rows_), -1);
    entries_.reserve(static_cast<size_t>(count));
  }

  // Calls visit(k) for the inserted boxes k near box i until one returns true; returns
  // whether one did.
  template <typename Visit>
  bool AnyNear(int64_t i, Visit&& visit) const {
    for (int64_t k : wide_) {
      if (visit(k)) return true;
    }
    const CellRange r = Cells(i);
    for (int64_t y = r.y0; y <= r.y1; ++y) {
      for (int64_t x = r.x0; x <= r.x1; ++x) {
        for (int32_t e = head_[static_cast<size_t>(y * columns_ + x)]; e >= 0; e = entries_[e].next) {
          if (visit(entries_[e].box)) return true;
        }
      }
    }
    return false;
  }

  void Insert(int64_t i) {
    const CellRange r = Cells(i);
    if (r.x0 > r.x1) return;
    if ((r.x1 - r.x0 + 1) * (r.y1 - r.y0 + 1) > kMaxCellsPerBox) {
      wide_.push_back(i);
      return;
    }
    for (int64_t y = r.y0; y <= r.y1; ++y) {
      for (int64_t x = r.x0; x <= r.x1; ++x) {
        int32_t& head = head_[static_cast<size_t>(y * columns_ + x)];
        entries_.push_back({i, head});
        head = static_cast<int32_t>(entries_.size() - 1);
      }
    }
  }

 private:
  static constexpr double kMaxCellsPerSide = 1024;
  static constexpr int64_t kMaxCellsPerBox = 16;

  struct CellRange {
    int64_t x0, x1, y0, y1;  // inclusive; x0 > x1 when the box can overlap nothing
  };
  struct Entry {
    int64_t box;
    int32_t next;
  };

  int64_t Column(double x) const { return std::clamp<int64_t>(int64_t((x - origin_x_) / cell_), 0, columns_ - 1); }
  int64_t Row(double y) const { return std::clamp<int64_t>(int64_t((y - origin_y_) / cell_), 0, rows_ - 1); }

  CellRange Cells(int64_t i) const {
    const T* b = boxes_ + 4 * i;
    const double x1 = b[0], y1 = b[1], x2 = double(b[2]) + double(offset_), y2 = double(b[3]) + double(offset_);
    if (x2 <= x1 || y2 <= y1) return {1, 0, 1, 0};
    return {Column(x1), Column(x2), Row(y1), Row(y2)};
  }

  const T* boxes_;
  T offset_;
  double origin_x_ = 0, origin_y_ = 0, cell_ = 1;
  int64_t columns_ = 1, rows_ = 1;
  std::vector<int32_t> head_;
  std::vector<Entry> entries_;
  std::vector<int64_t> wide_;
};

}  // namespace ortops
