// Consecutive elements read as one vector load on a GPU: a thread that takes several
// channels of a pixel (kChannels) then issues one instruction per pixel instead of one per
// channel, and a warp's loads cover whole lines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/host_device.h"

namespace ortops::device {

// Whether `data` is aligned for LoadRun<kN> of its elements (what the host checks once, for a
// kernel whose runs start at multiples of kN elements from `data`).
template <int kN, typename T>
bool AlignedForRuns(const T* data) {
  constexpr size_t bytes = kN * sizeof(T) < 16 ? kN * sizeof(T) : 16;
  return reinterpret_cast<uintptr_t>(data) % bytes == 0;
}

// out[i] = p[i] for i < kN. On a GPU, where `aligned` (AlignedForRuns, and p a multiple of kN
// elements from there) and the run is 8, 16 or 32 bytes, as one or two vector loads.
template <int kN, typename T>
ORTOPS_HD inline void LoadRun(const T* p, bool aligned, T (&out)[kN]) {
#if defined(__CUDA_ARCH__)
  constexpr size_t kBytes = kN * sizeof(T);
  if constexpr (kBytes == 8 || kBytes == 16 || kBytes == 32) {
    if (aligned) {
      using Vector = std::conditional_t<kBytes == 8, uint2, uint4>;
      constexpr int kVectors = kBytes == 32 ? 2 : 1;
      Vector v[kVectors];
      for (int i = 0; i < kVectors; ++i) v[i] = reinterpret_cast<const Vector*>(p)[i];
      memcpy(out, v, kBytes);
      return;
    }
  }
#else
  static_cast<void>(aligned);
#endif
  for (int i = 0; i < kN; ++i) out[i] = p[i];
}

}  // namespace ortops::device
