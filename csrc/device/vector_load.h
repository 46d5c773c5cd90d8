// Consecutive elements read (and written) as one vector access on a GPU: a thread that takes
// several channels of a pixel, or several neighbouring lines, then issues one instruction
// where it issued one per element, and a warp's accesses cover whole lines.
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

#if defined(__CUDA_ARCH__)
// The vector type of a run of kBytes (4, 8, 16, or 32 as two of 16), void for others.
template <size_t kBytes>
using RunVector = std::conditional_t<
    kBytes == 4, unsigned,
    std::conditional_t<kBytes == 8, uint2, std::conditional_t<kBytes == 16 || kBytes == 32, uint4, void>>>;
#endif

// out[i] = p[i] for i < kN. On a GPU, where `aligned` (AlignedForRuns, and p a multiple of kN
// elements from there) and the run is 4, 8, 16 or 32 bytes, as one or two vector loads.
template <int kN, typename T>
ORTOPS_HD inline void LoadRun(const T* p, bool aligned, T (&out)[kN]) {
#if defined(__CUDA_ARCH__)
  constexpr size_t kBytes = kN * sizeof(T);
  using Vector = RunVector<kBytes>;
  if constexpr (!std::is_void_v<Vector> && kN > 1) {
    if (aligned) {
      constexpr int kVectors = static_cast<int>(kBytes / sizeof(Vector));
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

// p[i] = in[i] for i < kN, as LoadRun reads them.
template <int kN, typename T>
ORTOPS_HD inline void StoreRun(T* p, bool aligned, const T (&in)[kN]) {
#if defined(__CUDA_ARCH__)
  constexpr size_t kBytes = kN * sizeof(T);
  using Vector = RunVector<kBytes>;
  if constexpr (!std::is_void_v<Vector> && kN > 1) {
    if (aligned) {
      constexpr int kVectors = static_cast<int>(kBytes / sizeof(Vector));
      Vector v[kVectors];
      memcpy(v, in, kBytes);
      for (int i = 0; i < kVectors; ++i) reinterpret_cast<Vector*>(p)[i] = v[i];
      return;
    }
  }
#else
  static_cast<void>(aligned);
#endif
  for (int i = 0; i < kN; ++i) p[i] = in[i];
}

}  // namespace ortops::device
