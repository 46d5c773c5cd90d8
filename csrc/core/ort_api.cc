#include "core/ort_api.h"

#include <atomic>
#include <string>

#include "core/error.h"

namespace ortops {
namespace {
std::atomic<const OrtApi*> g_api{nullptr};
}  // namespace

const OrtApi* InitApi(const OrtApiBase* base) {
  if (const OrtApi* api = g_api.load(std::memory_order_acquire)) return api;
  const OrtApi* api = base->GetApi(kMinOrtApiVersion);
  if (api != nullptr) g_api.store(api, std::memory_order_release);
  return api;
}

const OrtApi& Api() { return *g_api.load(std::memory_order_acquire); }

void ThrowOnError(OrtStatus* status) {
  if (status == nullptr) return;
  std::string message = Api().GetErrorMessage(status);
  Api().ReleaseStatus(status);
  throw Error(message);
}

}  // namespace ortops
