// The visiting order of greedy NMS: boxes by descending score, equal scores by lower index
// (a stable sort by score), shared by the single-set NMS ops.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <numeric>
#include <type_traits>

#include "core/kernel_io.h"

namespace ortops {

// `scores` must not hold NaN. -0 and +0 are equal scores.
template <typename T>
ScratchVector<int64_t> ScoreOrder(const KernelIO& io, const T* scores, int64_t count) {
  ScratchVector<int64_t> order = io.Vector<int64_t>(static_cast<size_t>(count));
  if constexpr (std::is_same_v<T, float>) {
    if (count <= int64_t{std::numeric_limits<uint32_t>::max()}) {
      // One integer key per box: the score's bits mapped to an order-reversed unsigned key
      // (+ 0.0f makes -0 equal +0, as the comparison of scores has it), then the index, so
      // an unstable sort of the keys is the stable sort by score, and a fast one.
      ScratchVector<uint64_t> keys = io.Vector<uint64_t>(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) {
        const uint32_t bits = std::bit_cast<uint32_t>(scores[i] + 0.0f);
        const uint32_t ascending = bits & 0x80000000u ? ~bits : bits | 0x80000000u;
        keys[static_cast<size_t>(i)] = (uint64_t{~ascending} << 32) | static_cast<uint64_t>(i);
      }
      std::sort(keys.begin(), keys.end());
      for (size_t i = 0; i < keys.size(); ++i) order[i] = static_cast<int64_t>(keys[i] & 0xffffffffu);
      return order;
    }
  }
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  return order;
}

}  // namespace ortops
