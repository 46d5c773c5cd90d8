// Run-time dispatch of the hot loops to the widest instruction set the CPU has.
//
// A loop that pays for wide vectors lives in a source file of its own, `*_simd.cc`, which
// the build compiles once per level (CMakeLists.txt): as part of the library for the
// baseline, and again with -mavx2 -mfma and with -mavx512* on x86-64, each time with its
// functions in that level's namespace (isa_baseline, isa_avx2, isa_avx512). Its header
// declares the functions for every level with ORTOPS_ISA_DECLARE, and a kernel calls them
// through ORTOPS_ISA_CALL, which picks the level chosen once, at load (ActiveIsa).
//
// Headers that a `*_simd.cc` includes put their inline functions in the inline namespace
// ORTOPS_ISA_NS, so that the linker never merges an AVX-512 copy of one with the baseline's
// (a COMDAT merge would run AVX-512 code on every CPU); tests/cpp/check_isa_symbols.cmake
// checks that the per-level objects define no weak symbol outside their level's namespace.
//
// Every x86-64 level is compiled without contracting a * b + c into a fused multiply-add
// (-ffp-contract=off, as the SSE2 baseline has none), so every level computes the same
// roundings and returns the same bits; the wider levels only do more lanes at a time.
#pragma once

#include <string>

#ifndef ORTOPS_ISA_NS
#define ORTOPS_ISA_NS isa_baseline
#endif

namespace ortops {

// Levels, lowest first. On ARM64 the baseline is NEON (every ARMv8-A core has it).
enum class Isa { kBaseline, kAvx2, kAvx512 };

// The level this CPU (and its operating system) supports.
Isa CpuIsa();

// The level the hot loops use: CpuIsa(), or the lower level named by the environment
// variable ORTOPS_ISA (read once, at the first call).
Isa ActiveIsa();

// The level's name as ORTOPS_ISA spells it: sse2 / avx2 / avx512 on x86-64, neon on ARM64.
const char* IsaName(Isa isa);

// Why the value of ORTOPS_ISA cannot be used (unknown name, or a level this CPU lacks), or
// "" when it can or is unset. Registration fails with this message, so a forced level
// is never silently replaced by another.
const std::string& IsaError();

}  // namespace ortops

#if defined(__x86_64__)
#define ORTOPS_ISA_DECLARE(...) \
  namespace isa_baseline {      \
  __VA_ARGS__;                  \
  }                             \
  namespace isa_avx2 {          \
  __VA_ARGS__;                  \
  }                             \
  namespace isa_avx512 {        \
  __VA_ARGS__;                  \
  }
// The function of the active level (a conditional expression, so void functions work too).
#define ORTOPS_ISA_CALL(function, ...)                                                 \
  (::ortops::ActiveIsa() == ::ortops::Isa::kAvx512 ? isa_avx512::function(__VA_ARGS__) \
   : ::ortops::ActiveIsa() == ::ortops::Isa::kAvx2 ? isa_avx2::function(__VA_ARGS__)   \
                                                   : isa_baseline::function(__VA_ARGS__))
#else
#define ORTOPS_ISA_DECLARE(...) \
  namespace isa_baseline {      \
  __VA_ARGS__;                  \
  }
#define ORTOPS_ISA_CALL(function, ...) isa_baseline::function(__VA_ARGS__)
#endif
