#include "core/ort_api.h"

#include <atomic>
#include <cstdio>
#include <string>

#include "core/error.h"

namespace ortops {
namespace {
std::atomic<const OrtApi*> g_api{nullptr};
std::atomic<const OrtApiBase*> g_base{nullptr};
}  // namespace

const OrtApi* InitApi(const OrtApiBase* base) {
  g_base.store(base, std::memory_order_release);
  if (const OrtApi* api = g_api.load(std::memory_order_acquire)) return api;
  const OrtApi* api = base->GetApi(kMinOrtApiVersion);
  if (api != nullptr) g_api.store(api, std::memory_order_release);
  return api;
}

const OrtApi& Api() { return *g_api.load(std::memory_order_acquire); }

const OrtApi* ApiIfAvailable(uint32_t version) {
  const OrtApiBase* base = g_base.load(std::memory_order_acquire);
  if (base == nullptr) return nullptr;
  unsigned major = 0, minor = 0;
  if (std::sscanf(base->GetVersionString(), "%u.%u", &major, &minor) != 2) return nullptr;
  if (major < 1 || (major == 1 && minor < version)) return nullptr;
  return base->GetApi(version);
}

void ThrowOnError(OrtStatus* status) {
  if (status == nullptr) return;
  std::string message = Api().GetErrorMessage(status);
  Api().ReleaseStatus(status);
  throw Error(message);
}

}  // namespace ortops
