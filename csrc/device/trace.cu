// ReportRun (device/device_io.h): a device kernel's counts, as a line of JSON, appended to
// the file that ORTOPS_DEVICE_TRACE names. For the tests' budgets on the emulated device and
// for the CUDA benchmark on a GPU, which sets the variable around the one run it counts; a
// run without it costs a getenv.
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "core/custom_op.h"
#include "device/device_io.h"

namespace ortops::device {

void ReportRun(const OpDef& def, const DeviceIO& io) {
  const char* const path = std::getenv("ORTOPS_DEVICE_TRACE");
  if (path == nullptr || *path == '\0') return;
  static std::mutex mutex;
  const DeviceCounts& c = io.counts();
  const std::lock_guard lock(mutex);
  FILE* file = std::fopen(path, "a");
  if (file == nullptr) return;
  std::fprintf(file,
               "{\"domain\": \"%.*s\", \"op\": \"%.*s\", \"kernels\": %lld, \"algorithms\": %lld, \"fills\": %lld, "
               "\"waits\": %lld, \"copies_to_device\": %lld, \"allocations\": %lld}\n",
               static_cast<int>(def.domain.size()), def.domain.data(), static_cast<int>(def.name.size()),
               def.name.data(), static_cast<long long>(c.kernels), static_cast<long long>(c.algorithms),
               static_cast<long long>(c.fills), static_cast<long long>(c.waits),
               static_cast<long long>(c.copies_to_device), static_cast<long long>(c.allocations));
  std::fclose(file);
}

}  // namespace ortops::device
