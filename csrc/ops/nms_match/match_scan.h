// The scan at the heart of NMSMatch: which of the later boxes can a kept box suppress?
// Compiled per instruction-set level (core/isa.h) in match_scan_simd.cc.
#pragma once

#include <cstdint>

#include "core/isa.h"
#include "ops/nms/suppress.h"

namespace ortops::nms_match {

// The later boxes are nms::BoxColumns (ops/nms/suppress.h) with areas as MatchArea
// (math/box_iou.h) gives them. A box that must not be found again has x1 = +inf and
// x2 = -inf: it overlaps nothing.
using nms::BoxColumns;

// The kept box, and `band`: in [0, 1), below a threshold t > 0 by more than rounding (see
// MatchBand in nms_match.cc), or 0 to test overlap only.
template <typename T>
struct MatchQuery {
  T x1, y1, x2, y2, area, band;
};

// Writes to `out`, in increasing order, every k < columns.count for which MatchIoU(query,
// box k) may reach the threshold t > 0 that `band` was made from, and returns how many: at
// least all k where it does (a box that cannot overlap the query, or whose intersection is
// below band * union, cannot), so the caller tests only these with the exact MatchIoU.
ORTOPS_ISA_DECLARE(int64_t MayMatch(const BoxColumns<float>& columns, const MatchQuery<float>& query, int64_t* out);
                   int64_t MayMatch(const BoxColumns<double>& columns, const MatchQuery<double>& query, int64_t* out))

}  // namespace ortops::nms_match
