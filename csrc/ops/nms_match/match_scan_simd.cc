// Compiled once per instruction-set level (core/isa.h).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "ops/nms_match/match_scan.h"

namespace ortops::nms_match::ORTOPS_ISA_NS {
namespace {

// A block of boxes is tested in a loop without exits or calls, which the compiler
// vectorises, into a mask as wide as T (so that the vectors stay one type); only a block
// where some box may match is then looked at box by box. Most pairs of a detector's boxes
// are far below the threshold.
template <typename T>
int64_t Scan(const BoxColumns<T>& boxes, const MatchQuery<T>& q, int64_t* out) {
  using Mask = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  constexpr int64_t kBlock = 64;
  // Unions above this make band * union safe from overflow (band < 1).
  constexpr T kUnionLimit = std::numeric_limits<T>::max() / 2;
  const T* __restrict x1 = boxes.x1;
  const T* __restrict y1 = boxes.y1;
  const T* __restrict x2 = boxes.x2;
  const T* __restrict y2 = boxes.y2;
  const T* __restrict area = boxes.area;
  int64_t found = 0;
  for (int64_t start = 0; start < boxes.count; start += kBlock) {
    const int64_t size = std::min(boxes.count - start, kBlock);
    Mask may[kBlock];
    Mask any = 0;
    for (int64_t k = 0; k < size; ++k) {
      const int64_t e = start + k;
      const T width = std::max(T(0), std::min(q.x2, x2[e]) - std::max(q.x1, x1[e]));
      const T height = std::max(T(0), std::min(q.y2, y2[e]) - std::max(q.y1, y1[e]));
      const T inter = width * height;
      const T union_area = q.area + area[e] - inter;
      // With a positive union, the exact quotient reaches t only if inter > band * union.
      const bool below = (union_area > T(0)) & (union_area <= kUnionLimit) & (inter <= q.band * union_area);
      may[k] = static_cast<Mask>((inter > T(0)) & !below);
      any |= may[k];
    }
    if (any == 0) continue;
    for (int64_t k = 0; k < size; ++k) {
      out[found] = start + k;
      found += static_cast<int64_t>(may[k] != 0);
    }
  }
  return found;
}

}  // namespace

int64_t MayMatch(const BoxColumns<float>& columns, const MatchQuery<float>& query, int64_t* out) {
  return Scan(columns, query, out);
}
int64_t MayMatch(const BoxColumns<double>& columns, const MatchQuery<double>& query, int64_t* out) {
  return Scan(columns, query, out);
}

}  // namespace ortops::nms_match::ORTOPS_ISA_NS
