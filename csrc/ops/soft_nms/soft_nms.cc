// Soft non-maximum suppression (Bodla et al.; mmcv's SoftNonMaxSuppression).
#include "ops/soft_nms/soft_nms.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "math/box_grid.h"
#include "math/box_iou.h"
#include "ops/nms/box_inputs.h"

namespace ortops::soft_nms {

namespace {

// Unsigned integers that order (score, position) as the original's scan does: higher
// score first, then lower position; +0 and -0 tie, as they compare equal.
template <typename T>
struct RankKey;
template <>
struct RankKey<float> {
  using Type = uint64_t;
  static Type Of(float score, int64_t position) {
    return uint64_t{Monotone(std::bit_cast<uint32_t>(score + 0.0f))} << 32 | ~static_cast<uint32_t>(position);
  }
  static uint32_t Monotone(uint32_t bits) { return bits >> 31 ? ~bits : bits | 0x80000000u; }
};
template <>
struct RankKey<double> {
  __extension__ using Type = unsigned __int128;
  static Type Of(double score, int64_t position) {
    return Type{Monotone(std::bit_cast<uint64_t>(score + 0.0))} << 64 | ~static_cast<uint64_t>(position);
  }
  static uint64_t Monotone(uint64_t bits) { return bits >> 63 ? ~bits : bits | (uint64_t{1} << 63); }
};

// The original's next pick: the remaining box with the highest rank key. Keys sit in
// blocks of 256 in an order where neighbouring boxes are mostly in the same block, each
// block's best under a binary tree of bests. A key that falls below its block's best,
// the common case of a decay, costs one store; a block whose best changed is rescanned
// and its tree path redone when the next pick is asked for.
template <typename T>
class SelectionBoard {
 public:
  using Key = typename RankKey<T>::Type;  // 0: not remaining

  SelectionBoard(const ScratchVector<int64_t>& order, const ScratchVector<T>& score,
                 const ScratchVector<int64_t>& position)
      : id_(order),
        slot_(order.size(), 0, order.get_allocator()),
        key_(order.size(), 0, order.get_allocator()),
        tree_(order.get_allocator()),
        rescan_(order.get_allocator()),
        dirty_(order.get_allocator()) {
    const size_t blocks = std::max<size_t>(1, (order.size() + kBlock - 1) / kBlock);
    leaves_ = std::bit_ceil(blocks);
    tree_.assign(2 * leaves_, Best{0, 0});
    rescan_.assign(blocks, 1);
    for (size_t s = 0; s < order.size(); ++s) {
      slot_[static_cast<size_t>(order[s])] = s;
      key_[s] = RankKey<T>::Of(score[static_cast<size_t>(order[s])], position[static_cast<size_t>(order[s])]);
    }
    for (size_t b = 0; b < blocks; ++b) dirty_.push_back(b);
  }

  // Box id's key is now `key` (0 when it no longer remains).
  void Set(int64_t id, Key key) {
    const size_t s = slot_[static_cast<size_t>(id)], b = s / kBlock;
    key_[s] = key;
    Best& best = tree_[leaves_ + b];
    if (key > best.key) {
      best = {key, s};
    } else if (s != best.slot || rescan_[b]) {
      return;
    } else {
      rescan_[b] = 1;
    }
    dirty_.push_back(b);
  }

  // The remaining box with the highest key; there must be one.
  int64_t Top() {
    for (size_t b : dirty_) {
      if (rescan_[b]) {
        rescan_[b] = 0;
        tree_[leaves_ + b] = BlockBest(b * kBlock, std::min(key_.size(), (b + 1) * kBlock));
      }
      for (size_t node = (leaves_ + b) / 2; node >= 1; node /= 2) {
        const Best& left = tree_[2 * node];
        const Best& right = tree_[2 * node + 1];
        tree_[node] = left.key >= right.key ? left : right;
      }
    }
    dirty_.clear();
    return id_[tree_[1].slot];
  }

 private:
  static constexpr size_t kBlock = 256;  // 16 to 512 tried on the benchmark: 256 was fastest
  struct Best {
    Key key;
    size_t slot;
  };

  // The highest key in slots [first, last) and its slot: the maximum through four
  // independent running maxima, then its first occurrence (keys of remaining boxes are
  // unique; all zero when none remains).
  Best BlockBest(size_t first, size_t last) const {
    Key m[4] = {0, 0, 0, 0};
    size_t s = first;
    for (; s + 4 <= last; s += 4) {
      for (size_t lane = 0; lane < 4; ++lane) m[lane] = std::max(m[lane], key_[s + lane]);
    }
    for (; s < last; ++s) m[0] = std::max(m[0], key_[s]);
    const Key top = std::max(std::max(m[0], m[1]), std::max(m[2], m[3]));
    size_t where = first;
    while (where < last && key_[where] != top) ++where;
    return {top, where};
  }

  ScratchVector<int64_t> id_;   // by slot
  ScratchVector<size_t> slot_;  // by id
  ScratchVector<Key> key_;      // by slot
  size_t leaves_ = 1;
  ScratchVector<Best> tree_;    // node 1 the root, block b at leaves_ + b
  ScratchVector<char> rescan_;  // by block: its best must be searched again
  ScratchVector<size_t> dirty_;
};

template <typename T>
class SoftNmsKernel : public KernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = soft_nms::kSchema;

  SoftNmsKernel(const Attributes& attrs, const OpDef& def) : KernelBase(def), attributes_(attrs), decay_(attributes_) {}

  void Compute(const KernelIO& io) const {
    const auto [boxes, scores] = nms::BoxesAndScores<T>(io);
    const int64_t count = boxes.dim(0);
    Check(count < (int64_t{1} << 31), "input 'boxes' has ", count, " boxes; at most 2^31 - 1 are supported");

    const T offset = static_cast<T>(attributes_.offset);
    // Infinite scores (inf * 0) and infinite areas (inf / inf) make NaN scores, which rank keys
    // cannot order as the original's scan does: those inputs take the all-pairs path.
    bool indexed = attributes_.method == 2 || attributes_.iou_threshold > 0;
    for (int64_t i = 0; i < count && indexed; ++i) {
      const T* b = boxes.data + 4 * i;
      indexed = std::isfinite(b[0]) && std::isfinite(b[1]) && std::isfinite(b[2]) && std::isfinite(b[3]) &&
                b[2] - b[0] + offset > 0 && b[3] - b[1] + offset > 0 && std::isfinite(BoxArea(b, offset)) &&
                std::isfinite(scores.data[i]);
    }
    ScratchVector<int64_t> selected(io.Allocator<int64_t>());
    selected.reserve(static_cast<size_t>(count));
    ScratchVector<T> score(scores.data, scores.data + count, io.Allocator<T>());
    if (indexed) {
      SelectIndexed(io, boxes.data, count, score, selected);
    } else {
      SelectAllPairs(io, boxes.data, count, score, selected);
    }
    // A selected box's score no longer changes: it is its decayed score at selection.
    const auto kept = static_cast<int64_t>(selected.size());
    T* dets = io.Output<T>(0, {kept, 5});
    int64_t* indices = io.Output<int64_t>(1, {kept});
    for (int64_t i = 0; i < kept; ++i) {
      const int64_t id = selected[i];
      for (int k = 0; k < 4; ++k) dets[5 * i + k] = boxes.data[4 * id + k];
      dets[5 * i + 4] = score[id];
      indices[i] = id;
    }
  }

 private:
  // The original algorithm step by step: scan for the maximum, swap it to the front, decay
  // every remaining box, drop by moving the last box into the gap. O(N^2); used when a
  // box that does not overlap the selected one can still change (a threshold <= 0 in the
  // naive or linear method, empty or infinite boxes whose IoU is NaN, infinite scores).
  // `selected` receives the box ids in selection order; `score` ends decayed.
  void SelectAllPairs(const KernelIO& io, const T* boxes, int64_t count, ScratchVector<T>& score,
                      ScratchVector<int64_t>& selected) const {
    const T offset = static_cast<T>(attributes_.offset);
    ScratchVector<int64_t> work = io.Vector<int64_t>(static_cast<size_t>(count));
    ScratchVector<T> area = io.Vector<T>(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) work[i] = i, area[i] = BoxArea(boxes + 4 * i, offset);
    const T min_score = static_cast<T>(attributes_.min_score);
    for (int64_t i = 0; i < count; ++i) {
      int64_t best = i;
      for (int64_t pos = i + 1; pos < count; ++pos) {
        if (score[work[best]] < score[work[pos]]) best = pos;
      }
      std::swap(work[i], work[best]);
      const int64_t sel = work[i];
      selected.push_back(sel);
      for (int64_t pos = i + 1; pos < count; ++pos) {
        const int64_t other = work[pos];
        score[other] *= Weight(BoxIoU(boxes + 4 * sel, area[sel], boxes + 4 * other, area[other], offset));
        if (score[other] < min_score) {
          work[pos] = work[count - 1];  // drop it: the last box takes its place and is visited next
          --count;
          --pos;
        }
      }
    }
  }

  // The same selections in about O(N log N + overlapping pairs), when only boxes
  // overlapping the selected one can change: every box has a positive area (so a pair that
  // does not overlap has IoU exactly 0) and IoU 0 keeps weight 1. A board of rank keys
  // picks the next box as the original's scan would; a grid finds the remaining overlapping ones;
  // drops replay the original's move-the-last-box order, which decides later ties.
  void SelectIndexed(const KernelIO& io, const T* boxes, int64_t count, ScratchVector<T>& score,
                     ScratchVector<int64_t>& selected) const {
    const T offset = static_cast<T>(attributes_.offset);
    const T min_score = static_cast<T>(attributes_.min_score);
    ScratchVector<int64_t> work = io.Vector<int64_t>(static_cast<size_t>(count));
    ScratchVector<int64_t> position = io.Vector<int64_t>(static_cast<size_t>(count));
    ScratchVector<T> area = io.Vector<T>(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) work[i] = position[i] = i, area[i] = BoxArea(boxes + 4 * i, offset);
    PackedBoxGrid<T, SessionAllocator<T>> grid(boxes, count, offset, io.Allocator<T>());
    SelectionBoard<T> board(grid.CellOrder(), score, position);
    const auto rank = [&](int64_t k) { return RankKey<T>::Of(score[k], position[k]); };
    ScratchVector<int64_t> drops(io.Allocator<int64_t>()), drop_positions(io.Allocator<int64_t>());
    ScratchVector<char> dropping = io.Vector<char>(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      const int64_t sel = board.Top();
      const int64_t best = position[sel], displaced = work[i];
      work[best] = displaced, position[displaced] = best;
      work[i] = sel, position[sel] = i;
      board.Set(displaced, rank(displaced));
      board.Set(sel, 0);
      selected.push_back(sel);

      drops.clear();
      grid.Remove(sel);
      const T* chosen = boxes + 4 * sel;
      grid.ForEachOverlapping(sel, [&](int64_t k) {
        // Boxes that do not overlap have IoU 0 and keep weight 1 (see above).
        score[k] *= Weight(BoxIoU(chosen, area[sel], boxes + 4 * k, area[k], offset));
        board.Set(k, rank(k));
        if (score[k] < min_score) drops.push_back(k), dropping[k] = 1;
      });
      if (i == 0) {  // the first pass also drops boxes that start below min_score
        for (int64_t pos = 1; pos < count; ++pos) {
          const int64_t k = work[pos];
          if (score[k] < min_score && !dropping[k]) drops.push_back(k), dropping[k] = 1;
        }
      }
      drop_positions.clear();
      for (int64_t k : drops) drop_positions.push_back(position[k]);
      std::sort(drop_positions.begin(), drop_positions.end());
      for (int64_t p : drop_positions) {
        while (p < count && dropping[work[p]]) {
          const int64_t victim = work[p];
          dropping[victim] = 0;
          board.Set(victim, 0);
          grid.Remove(victim);
          const int64_t last = work[--count];
          if (p < count) {
            work[p] = last, position[last] = p;
            board.Set(last, rank(last));
          }
        }
      }
    }
  }

  T Weight(T iou) const { return decay_.Weight(iou); }

  SoftNmsAttributes attributes_;
  Decay<T> decay_;
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<SoftNmsKernel, float, double>(def); }

}  // namespace ortops::soft_nms
