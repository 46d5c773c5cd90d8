#include "core/isa.h"

#include <cstdlib>
#include <string_view>

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

const Choice& Chosen() {
  static const Choice choice = Choose();
  return choice;
}

}  // namespace

Isa CpuIsa() {
#if defined(__x86_64__)
  // libgcc's checks include the operating system's support (XCR0) for the wider registers.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma")) {
    return Isa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
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
