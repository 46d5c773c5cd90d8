// The vector width of the instruction-set level a `*_simd.cc` file is compiled for, and
// generic vectors of that width (a GCC and Clang extension, not intrinsics) that the compiler
// lowers to the level's registers (NEON's on ARM64). In the level's inline namespace, since
// each level defines them differently (core/isa.h).
#pragma once

#include <cstdint>

#include "core/isa.h"

namespace ortops {
inline namespace ORTOPS_ISA_NS {

#if defined(__AVX512F__)
inline constexpr int kVectorBytes = 64;
#elif defined(__AVX2__)
inline constexpr int kVectorBytes = 32;
#else
inline constexpr int kVectorBytes = 16;
#endif

// Lanes<A>::Vector: kVectorBytes of A (float or double).
template <typename A>
struct Lanes {
  typedef A Vector __attribute__((vector_size(kVectorBytes)));
  static constexpr int64_t kCount = kVectorBytes / static_cast<int64_t>(sizeof(A));
};

}  // namespace ORTOPS_ISA_NS
}  // namespace ortops
