#include "core/platform.h"

#include <algorithm>

#if defined(_WIN32)
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#ifndef NOMINMAX  // libstdc++ defines it for MinGW
#define NOMINMAX
#endif
#include <windows.h>
#else
#include <unistd.h>
#endif

namespace ortops {

int64_t OnlineProcessors() {
#if defined(_WIN32)
  // GetSystemInfo would count only the calling thread's processor group (at most 64).
  const int64_t count = GetActiveProcessorCount(ALL_PROCESSOR_GROUPS);
#else
  const int64_t count = sysconf(_SC_NPROCESSORS_ONLN);
#endif
  return std::max<int64_t>(count, 1);
}

}  // namespace ortops
