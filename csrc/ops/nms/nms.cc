// Greedy non-maximum suppression over one set of boxes (mmcv's NonMaxSuppression).
#include "ops/nms/nms.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "math/box_iou.h"

namespace ortops::nms {
namespace {

constexpr IoSpec kInputs[] = {
    {"boxes", ElemType::kTypeParam, "`[N, 4]` boxes as (x1, y1, x2, y2)"},
    {"scores", ElemType::kTypeParam, "`[N]` one score per box"},
};
constexpr IoSpec kOutputs[] = {
    {"indices", ElemType::kInt64, "`[K]` indices into `boxes` of the kept boxes, highest score first"},
};
constexpr AttrSpec kAttributes[] = {
    {"iou_threshold", AttrType::kFloat, "0.5",
     "a box is dropped when its IoU with a kept box is strictly greater than this"},
    {"offset", AttrType::kInt, "0", "0 or 1; 1 is the legacy convention where a box's width is x2 - x1 + 1"},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "Greedy non-maximum suppression. Boxes are visited in descending score order "
        "(ties: lower index first, so the result is deterministic); a box is kept unless "
        "its IoU with an already kept box is strictly greater than `iou_threshold`. "
        "IoU uses areas `(x2 - x1 + offset) * (y2 - y1 + offset)`. "
        "Equal to `torchvision.ops.nms` when `offset` is 0. "
        "NaN in `boxes` or `scores` is an error.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = kAttributes,
};

namespace {

// Kept boxes, indexed by a uniform grid so that a candidate is tested only against the kept
// boxes that share a cell with it. This gives exactly the greedy result: with a threshold
// >= 0, a pair can only exceed it if the boxes overlap with positive width and height, and
// two such boxes always share a cell (cell indices are a monotone function of x and y).
template <typename T>
class KeptBoxGrid {
 public:
  // Sizes the grid so a typical box covers a few cells (half the median box side was the
  // fastest in benchmarks/bench.py). `boxes` must be finite.
  KeptBoxGrid(const T* boxes, int64_t count, T offset) : boxes_(boxes), offset_(offset) {
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

  // True if `suppresses(k)` holds for a kept box k that may overlap box i.
  template <typename Suppresses>
  bool AnyNear(int64_t i, Suppresses&& suppresses) const {
    for (int64_t k : wide_) {
      if (suppresses(k)) return true;
    }
    const CellRange r = Cells(i);
    for (int64_t y = r.y0; y <= r.y1; ++y) {
      for (int64_t x = r.x0; x <= r.x1; ++x) {
        for (int32_t e = head_[static_cast<size_t>(y * columns_ + x)]; e >= 0; e = entries_[e].next) {
          if (suppresses(entries_[e].box)) return true;
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

template <typename T>
class NmsKernel : public KernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = nms::kSchema;

  NmsKernel(const Attributes& attrs, const OpDef& def)
      : KernelBase(def), iou_threshold_(attrs.Float("iou_threshold")), offset_(attrs.Int("offset")) {
    Check(offset_ == 0 || offset_ == 1, "attribute 'offset' must be 0 or 1, got ", offset_);
    Check(!std::isnan(iou_threshold_), "attribute 'iou_threshold' is NaN");
  }

  void Compute(const KernelIO& io) const {
    const ConstTensor<T> boxes = io.Input<T>(0, 2);
    const ConstTensor<T> scores = io.Input<T>(1, 1);
    Check(boxes.dim(1) == 4, "input 'boxes' must have shape [N, 4], got ", ShapeText{boxes.shape});
    Check(scores.dim(0) == boxes.dim(0), "input 'scores' must have shape [N] with N = ", boxes.dim(0),
          " (the number of boxes), got ", ShapeText{scores.shape});
    const int64_t count = boxes.dim(0);
    bool finite = true;
    for (int64_t i = 0; i < count * 4; ++i) {
      Check(!std::isnan(boxes.data[i]), "input 'boxes' contains NaN");
      finite &= std::isfinite(boxes.data[i]);
    }
    for (int64_t i = 0; i < count; ++i) Check(!std::isnan(scores.data[i]), "input 'scores' contains NaN");

    std::vector<int64_t> order(count);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return scores.data[a] > scores.data[b]; });

    const T offset = static_cast<T>(offset_);
    const T threshold = static_cast<T>(iou_threshold_);
    std::vector<T> areas(count);
    for (int64_t i = 0; i < count; ++i) areas[i] = BoxArea(boxes.data + 4 * i, offset);
    auto overlaps = [&](int64_t kept, int64_t candidate) {
      return BoxIoU(boxes.data + 4 * kept, areas[kept], boxes.data + 4 * candidate, areas[candidate], offset) >
             threshold;
    };

    std::vector<int64_t> kept;
    if (threshold >= 0 && finite) {
      KeptBoxGrid<T> grid(boxes.data, count, offset);
      for (int64_t i : order) {
        if (grid.AnyNear(i, [&](int64_t k) { return overlaps(k, i); })) continue;
        kept.push_back(i);
        grid.Insert(i);
      }
    } else {
      // A negative threshold (every overlap counts) or infinite coordinates: test every pair.
      for (int64_t i : order) {
        if (std::none_of(kept.begin(), kept.end(), [&](int64_t k) { return overlaps(k, i); })) kept.push_back(i);
      }
    }
    int64_t* out = io.Output<int64_t>(0, {static_cast<int64_t>(kept.size())});
    std::copy(kept.begin(), kept.end(), out);
  }

 private:
  float iou_threshold_;
  int64_t offset_;
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<NmsKernel, float, double>(def); }

}  // namespace ortops::nms
