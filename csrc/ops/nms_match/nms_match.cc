// NMS that reports which kept box suppressed which (mmdeploy's NMSMatch).
#include "ops/nms_match/nms_match.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "math/box_iou.h"
#include "math/score_order.h"
#include "ops/nms_match/match_scan.h"

namespace ortops::nms_match {

namespace {

// The `band` of MayMatch (match_scan.h) for a threshold t > 0: t (1 - 2^-20), rounded. Where
// MatchIoU = float(inter / (double(union) + 1e-10)) reaches t with a positive union, the
// quotient before its two roundings (to double, then float) is at least t (1 - 2^-23), and
// inter >= t (1 - 2^-23) union exceeds band * union even after that product's rounding, when
// t is a normal float (relative rounding bounds hold) no greater than 1 (no overflow of the
// product): only then is the band used, elsewhere 0 (overlap alone is tested).
template <typename T>
T MatchBand(float threshold) {
  if (!(threshold >= 1e-30f && threshold <= 1.0f)) return T(0);
  return static_cast<T>(static_cast<double>(threshold) * (1.0 - 0x1p-20));
}

template <typename T>
class NmsMatchKernel : public KernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = nms_match::kSchema;

  NmsMatchKernel(const Attributes&, const OpDef& def) : KernelBase(def) {}

  void Compute(const KernelIO& io) const {
    const auto [boxes, scores, iou_threshold, score_threshold] = ReadInputs<T>(io);
    const int64_t batch = boxes.dim(0), count = boxes.dim(1), classes = scores.dim(1);
    for (int64_t i = 0; i < boxes.size(); ++i) Check(!std::isnan(boxes.data[i]), kBoxesNaN);
    for (int64_t i = 0; i < scores.size(); ++i) Check(!std::isnan(scores.data[i]), kScoresNaN);
    if (scores.size() == 0) {  // no box or no class: no match, and B * C may be huge
      io.Output<int64_t>(0, {0, 4});
      return;
    }

    // Per (batch, class): (kept, suppressed) box pairs in output order. A box is suppressed
    // at most once, so `count` pairs always fit.
    using Pairs = ScratchVector<std::array<int64_t, 2>>;
    ScratchVector<Pairs> pairs(static_cast<size_t>(batch * classes), Pairs(io.Allocator<std::array<int64_t, 2>>()),
                               io.Allocator<Pairs>());
    io.ParallelFor(pairs.size(), [&](size_t task) {
      const int64_t b = static_cast<int64_t>(task) / classes;
      pairs[task].reserve(static_cast<size_t>(count));
      Select(io, boxes.data + b * count * 4, scores.data + static_cast<int64_t>(task) * count, count, iou_threshold,
             score_threshold, pairs[task]);
    });
    int64_t total = 0;
    for (const auto& p : pairs) total += static_cast<int64_t>(p.size());
    int64_t* matches = io.Output<int64_t>(0, {total, 4});
    for (size_t task = 0; task < pairs.size(); ++task) {
      const int64_t b = static_cast<int64_t>(task) / classes, c = static_cast<int64_t>(task) % classes;
      for (const auto& [kept, suppressed] : pairs[task]) {
        *matches++ = b, *matches++ = c, *matches++ = kept, *matches++ = suppressed;
      }
    }
  }

 private:
  // Greedy NMS of one class of one image, as the original's loop: each kept box, in score
  // order, suppresses every later box not yet suppressed whose MatchIoU with it reaches the
  // threshold. The boxes are kept in score order, one array per coordinate, and a kept box
  // tests the later ones with MayMatch (vectorised) before the exact IoU; suppressed boxes
  // are marked so that MayMatch skips them, and squeezed out once they are a quarter of
  // those left to scan.
  static void Select(const KernelIO& io, const T* box, const T* score, int64_t count, float threshold,
                     T score_threshold, ScratchVector<std::array<int64_t, 2>>& out) {
    const ScratchVector<int64_t> order = ScoreOrder(io, score, count);
    const auto n = static_cast<size_t>(count);
    Scratch<T> x1 = io.Allocate<T>(n), y1 = io.Allocate<T>(n), x2 = io.Allocate<T>(n), y2 = io.Allocate<T>(n),
               area = io.Allocate<T>(n);
    Scratch<int64_t> id = io.Allocate<int64_t>(n), candidates = io.Allocate<int64_t>(n);
    ScratchVector<char> suppressed = io.Vector<char>(n);
    for (size_t r = 0; r < n; ++r) {
      const T* b = box + 4 * order[r];
      x1[r] = b[0], y1[r] = b[1], x2[r] = b[2], y2[r] = b[3], area[r] = MatchArea(b), id[r] = order[r];
    }
    const bool filter = threshold > 0.0f;  // otherwise even disjoint boxes reach it: test all
    const T band = MatchBand<T>(threshold);
    size_t live = n, suppressed_later = 0;  // boxes [0, live) remain; suppressed ones after `kept`
    for (size_t kept = 0; kept < live; ++kept) {
      if (suppressed[kept]) {
        --suppressed_later;
        continue;
      }
      const size_t first = kept + 1;
      int64_t found = 0;
      if (filter) {
        const BoxColumns<T> later{x1.data() + first, y1.data() + first,   x2.data() + first,
                                  y2.data() + first, area.data() + first, static_cast<int64_t>(live - first)};
        const MatchQuery<T> query{x1[kept], y1[kept], x2[kept], y2[kept], area[kept], band};
        found = ORTOPS_ISA_CALL(MayMatch, later, query, candidates.data());
      } else {
        for (size_t r = first; r < live; ++r)
          candidates[static_cast<size_t>(found++)] = static_cast<int64_t>(r - first);
      }
      const bool reports = score[id[kept]] > score_threshold;
      for (int64_t f = 0; f < found; ++f) {
        const size_t r = first + static_cast<size_t>(candidates[static_cast<size_t>(f)]);
        // Written as the original's test, so a NaN IoU (infinite boxes) suppresses nothing.
        if (suppressed[r] || !(MatchIoU(x1[kept], y1[kept], x2[kept], y2[kept], area[kept], x1[r], y1[r], x2[r], y2[r],
                                        area[r]) >= threshold)) {
          continue;
        }
        suppressed[r] = 1;
        ++suppressed_later;
        x1[r] = std::numeric_limits<T>::infinity(), x2[r] = -std::numeric_limits<T>::infinity();
        if (reports) out.push_back({id[kept], id[r]});
      }
      if (suppressed_later > 16 && 4 * suppressed_later > live - first) {
        size_t to = first;
        for (size_t r = first; r < live; ++r) {
          if (suppressed[r]) continue;
          x1[to] = x1[r], y1[to] = y1[r], x2[to] = x2[r], y2[to] = y2[r], area[to] = area[r], id[to] = id[r];
          suppressed[to++] = 0;
        }
        std::fill(suppressed.begin() + static_cast<std::ptrdiff_t>(to),
                  suppressed.begin() + static_cast<std::ptrdiff_t>(live), 0);
        live = to;
        suppressed_later = 0;
      }
    }
  }
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<NmsMatchKernel, float, double>(def); }

}  // namespace ortops::nms_match
