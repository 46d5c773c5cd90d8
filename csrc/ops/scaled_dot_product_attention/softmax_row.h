// Attention's softmax of one row, shared by the CPU kernel (softmax_simd.cc, compiled per
// instruction-set level, where its loops vectorise) and the device path (a thread per row):
// the same operations in the same order, so the same bits from the same scores.
#pragma once

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>

#include "core/host_device.h"
#include "core/isa.h"
#include "math/exp.h"

namespace ortops {
inline namespace ORTOPS_ISA_NS {  // compiled per instruction-set level (core/isa.h)

// Float bits as an int32 that orders as the floats do (NaN aside); its own inverse.
ORTOPS_HD inline int32_t OrderedFloatKey(uint32_t bits) {
  const auto key = static_cast<int32_t>(bits);
  return key ^ ((key >> 31) & 0x7fffffff);
}

// In place: row * scale (+ mask), then the softmax with the row's maximum subtracted. The mask
// is read at mask[j * mask_stride] (stride 0: one value for the row), or not at all if null.
// A row holding NaN or +inf, or all -inf, becomes NaN throughout, as in PyTorch and cuDNN.
// Each pass is a loop of its own without float comparisons, so that it vectorises.
ORTOPS_HD inline void ScaledSoftmaxRow(float* row, int64_t count, float scale, const float* mask, int64_t mask_stride) {
  if (mask == nullptr) {
    for (int64_t j = 0; j < count; ++j) row[j] *= scale;
  } else if (mask_stride == 1) {
    for (int64_t j = 0; j < count; ++j) row[j] = row[j] * scale + mask[j];
  } else {  // one mask value for the whole row
    for (int64_t j = 0; j < count; ++j) row[j] = row[j] * scale + mask[0];
  }
  // The maximum over keys that order floats as integers, and whether there is a NaN.
  int32_t max_key = INT32_MIN;
  uint32_t nan = 0;
  for (int64_t j = 0; j < count; ++j) {
    const uint32_t bits = std::bit_cast<uint32_t>(row[j]);
    max_key = std::max(max_key, OrderedFloatKey(bits));
    nan |= static_cast<uint32_t>((bits & 0x7fffffffu) > 0x7f800000u);
  }
  const auto max_bits = static_cast<uint32_t>(OrderedFloatKey(static_cast<uint32_t>(max_key)));
  if (nan || (max_bits & 0x7fffffffu) == 0x7f800000u) {  // a NaN, +inf, or all -inf: NaN throughout
    std::fill_n(row, count, NAN);
    return;
  }
  const float max = std::bit_cast<float>(max_bits);
  for (int64_t j = 0; j < count; ++j) row[j] = ExpNonPositive(row[j] - max);
  // Eight running sums, so that the additions do not wait on each other, added at the end.
  float sums[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= count; j += 8) {
    for (int lane = 0; lane < 8; ++lane) sums[lane] += row[j + lane];
  }
  for (; j < count; ++j) sums[0] += row[j];
  const float sum = ((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7]));
  for (j = 0; j < count; ++j) row[j] /= sum;
}

}  // namespace ORTOPS_ISA_NS
}  // namespace ortops
