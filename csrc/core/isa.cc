#include "core/isa.h"

#include <cstdint>
#include <cstdlib>
#include <string_view>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace ortops {
namespace {

#if defined(__x86_64__)
constexpr Isa kLevels[] = {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512};
#else
constexpr Isa kLevels[] = {Isa::kBaseline};
#endif

struct Choice {
  Isa isa;
  std::string error;
};

Choice Choose() {
  const Isa cpu = CpuIsa();
  const char* env = std::getenv("ORTOPS_ISA");
  if (env == nullptr || *env == '\0') return {cpu, ""};
  const std::string_view requested(env);
  for (Isa isa : kLevels) {
    if (requested != IsaName(isa)) continue;
    if (isa > cpu) {
      return {cpu, "ORTOPS_ISA=" + std::string(requested) + " asks for a level this CPU lacks; it has up to " +
                       IsaName(cpu)};
    }
    return {isa, ""};
  }
  std::string levels;
  for (Isa isa : kLevels) {
    if (isa > cpu) break;
    levels += std::string(levels.empty() ? "" : ", ") + IsaName(isa);
  }
  return {cpu, "ORTOPS_ISA=" + std::string(requested) + " is not a level; this CPU has " + levels};
}

#if defined(__x86_64__)
// XCR0, the register state the operating system saves across context switches (Linux and
// Windows alike); 0 when it has not enabled XSAVE. CPUID says what the CPU has, this what
// the OS lets programs use: an AVX register the OS does not save faults (#UD) on first use.
uint64_t OsSavedState(uint32_t cpuid1_ecx) {
  if (!(cpuid1_ecx & bit_OSXSAVE)) return 0;  // xgetbv itself would fault
  uint32_t low = 0, high = 0;
  __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
  return (uint64_t{high} << 32) | low;
}
#endif

const Choice& Chosen() {
  static const Choice choice = Choose();
  return choice;
}

}  // namespace

Isa CpuIsa() {
#if defined(__x86_64__)
  // Checked here rather than with __builtin_cpu_supports, so that the OS's part of the check
  // does not depend on the libgcc of each platform's toolchain.
  constexpr uint64_t kAvxState = 0x6;            // SSE and the upper halves of the YMM registers
  constexpr uint64_t kAvx512State = 0x6 | 0xe0;  // and the opmask, ZMM upper halves and ZMM16-31
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return Isa::kBaseline;
  const bool fma = ecx & bit_FMA;
  const uint64_t saved = (ecx & bit_AVX) ? OsSavedState(ecx) : 0;
  if (!fma || (saved & kAvxState) != kAvxState || !__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    return Isa::kBaseline;
  }
  constexpr uint32_t kAvx512 = bit_AVX512F | bit_AVX512DQ | bit_AVX512BW | bit_AVX512VL;
  if ((ebx & kAvx512) == kAvx512 && (saved & kAvx512State) == kAvx512State) return Isa::kAvx512;
  if (ebx & bit_AVX2) return Isa::kAvx2;
#endif
  return Isa::kBaseline;
}

Isa ActiveIsa() { return Chosen().isa; }

const std::string& IsaError() { return Chosen().error; }

const char* IsaName(Isa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    case Isa::kBaseline: break;
  }
  return "sse2";
#elif defined(__aarch64__)
  return isa == Isa::kBaseline ? "neon" : "?";
#else
  return isa == Isa::kBaseline ? "baseline" : "?";
#endif
}

}  // namespace ortops
