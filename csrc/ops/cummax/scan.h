// Running maximum or minimum along one axis of a tensor viewed as [outer, length, inner],
// with torch.cummax/cummin's rules: ties take the later position, and a NaN, once seen,
// stays (each later NaN takes over its position).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/half.h"
#include "core/kernel_io.h"

namespace ortops::scan {

struct Layout {
  int64_t outer, length, inner;
};

// Whether the running extreme moves to `candidate`: it is at least as good, or NaN. Once
// the current value is NaN every comparison with it is false, so only a NaN takes over.
// Written without branches so the loops below vectorise.
// float16 compares by integer keys in float's order (magnitude, negated when the sign is
// set, so -0 and +0 tie), which vectorises where converting to float would not.
template <typename T, bool kMax>
inline bool Takes(T candidate, T current) {
  if constexpr (std::is_same_v<T, Half>) {
    const int32_t c = candidate.bits & 0x7fff, k = current.bits & 0x7fff;
    const int32_t c_key = candidate.bits & 0x8000 ? -c : c, k_key = current.bits & 0x8000 ? -k : k;
    const bool better = kMax ? c_key >= k_key : c_key <= k_key;
    return (c > 0x7c00) | ((k <= 0x7c00) & better);  // NaN takes over; after a NaN only a NaN
  } else {
    const bool better = kMax ? candidate >= current : candidate <= current;
    if constexpr (std::is_floating_point_v<T>) {
      return better | (candidate != candidate);
    } else {
      return better;
    }
  }
}

// take ? a : b, on the bits for float16 (a select of two structs would copy through memory
// and keep the loops below scalar).
template <typename T>
inline T Pick(bool take, T a, T b) {
  if constexpr (std::is_same_v<T, Half>) {
    Half h;
    h.bits = take ? a.bits : b.bits;
    return h;
  } else {
    return take ? a : b;
  }
}

// values[i] = extreme of input over positions 0..i (or i..length-1 when `reverse`) along the
// axis; indices (may be null) receive the position it came from. Parallel over outer slices
// and chunks of the inner dimension; each step along the axis updates a whole contiguous
// inner row, so the loops vectorise whatever the axis.
template <typename T, bool kMax>
void CumulativeExtreme(const KernelIO& io, const T* input, T* values, int64_t* indices, Layout layout, bool reverse) {
  if (layout.outer * layout.length * layout.inner == 0) return;
  if (layout.inner == 1) {
    // The axis is innermost: each line is contiguous; keep the running state in registers.
    io.ParallelForRanges(static_cast<size_t>(layout.outer), 256, [&](size_t begin, size_t end) {
      for (size_t line = begin; line < end; ++line) {
        const int64_t base = static_cast<int64_t>(line) * layout.length;
        const T* in = input + base;
        T* out = values + base;
        int64_t* index = indices ? indices + base : nullptr;
        int64_t position = reverse ? layout.length - 1 : 0;
        const int64_t step = reverse ? -1 : 1;
        T best = in[position];
        int64_t best_index = position;
        for (int64_t s = 0; s < layout.length; ++s, position += step) {
          const T candidate = in[position];
          const bool take = Takes<T, kMax>(candidate, best);
          best = Pick(take, candidate, best);
          best_index = take ? position : best_index;
          out[position] = best;
          if (index) index[position] = best_index;
        }
      }
    });
    return;
  }
  constexpr int64_t kChunk = 1024;
  const int64_t chunks = (layout.inner + kChunk - 1) / kChunk;
  io.ParallelFor(static_cast<size_t>(layout.outer * chunks), [&](size_t task) {
    const int64_t o = static_cast<int64_t>(task) / chunks;
    const int64_t begin = (static_cast<int64_t>(task) % chunks) * kChunk;
    const int64_t end = std::min(layout.inner, begin + kChunk);
    const int64_t base = o * layout.length * layout.inner;
    const T* previous = nullptr;
    const int64_t* previous_index = nullptr;
    for (int64_t step = 0; step < layout.length; ++step) {
      const int64_t position = reverse ? layout.length - 1 - step : step;
      const int64_t row = base + position * layout.inner;
      const T* in = input + row;
      T* out = values + row;
      int64_t* index = indices ? indices + row : nullptr;
      if (previous == nullptr) {
        for (int64_t k = begin; k < end; ++k) out[k] = in[k];
        if (index) std::fill(index + begin, index + end, position);
      } else if (index) {
        for (int64_t k = begin; k < end; ++k) {
          const bool take = Takes<T, kMax>(in[k], previous[k]);
          out[k] = Pick(take, in[k], previous[k]);
          index[k] = take ? position : previous_index[k];
        }
      } else {
        for (int64_t k = begin; k < end; ++k) out[k] = Pick(Takes<T, kMax>(in[k], previous[k]), in[k], previous[k]);
      }
      previous = out;
      previous_index = index;
    }
  });
}

}  // namespace ortops::scan
