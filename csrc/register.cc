// The library's one exported symbol. Builds every domain once, on first use, and keeps it
// (and the ops in it) for the life of the library, as ONNX Runtime requires; adding the
// domains to a session's options is then safe from any number of threads and sessions.
#include <ortops/ortops.h>  // the public declaration (include/ortops/ortops.h)

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/isa.h"
#include "core/ort_api.h"
#include "op_table.h"

namespace ortops {
namespace {

// The kernels a row of the op table registers. The CPU build: its CPU kernels. The CUDA
// build: those, and its device kernels for CUDAExecutionProvider. The emulated device
// (libortops_device_on_cpu.so, a test build): its device kernels, run on the host for the
// CPU execution provider, in place of the CPU kernels; the CPU kernels of a row without one.
std::vector<OpPtr> KernelsOf(const OpDef& def) {
#if ORTOPS_DEVICE_ON_CPU
  return def.device.make ? def.device.make(def) : def.make(def);
#else
  std::vector<OpPtr> ops = def.make(def);
  if (def.device.make) {
    for (OpPtr& op : def.device.make(def)) ops.push_back(std::move(op));
  }
  return ops;
#endif
}

class Registry {
 public:
  ~Registry() {
    for (OrtCustomOpDomain* domain : domains_) Api().ReleaseCustomOpDomain(domain);
  }

  // Creates the domains; on failure the registry stays empty and the status says why.
  OrtStatus* Build() {
    for (std::string_view name : kDomains) {
      OrtCustomOpDomain* domain = nullptr;
      if (OrtStatus* status = Api().CreateCustomOpDomain(std::string(name).c_str(), &domain)) return status;
      domains_.push_back(domain);
      for (const OpDef& def : OpTable()) {
        if (def.domain != name) continue;
        for (OpPtr& op : KernelsOf(def)) {
          if (OrtStatus* status = Api().CustomOpDomain_Add(domain, op.get())) return status;
          ops_.push_back(std::move(op));
        }
      }
    }
    return nullptr;
  }

  OrtStatus* AddTo(OrtSessionOptions* options) const {
    for (OrtCustomOpDomain* domain : domains_) {
      if (OrtStatus* status = Api().AddCustomOpDomain(options, domain)) return status;
    }
    return nullptr;
  }

 private:
  std::vector<OrtCustomOpDomain*> domains_;
  std::vector<OpPtr> ops_;
};

OrtStatus* RegisterAll(OrtSessionOptions* options) {
  static std::once_flag built;
  static std::unique_ptr<Registry> registry;
  static std::string build_error;
  std::call_once(built, [] {
    auto candidate = std::make_unique<Registry>();
    if (OrtStatus* status = candidate->Build()) {
      build_error = Api().GetErrorMessage(status);
      Api().ReleaseStatus(status);
      return;
    }
    registry = std::move(candidate);
  });
  if (!registry) return Api().CreateStatus(ORT_FAIL, ("ortops: registration failed: " + build_error).c_str());
  return registry->AddTo(options);
}

}  // namespace
}  // namespace ortops

extern "C" OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  if (api_base == nullptr) return nullptr;  // nothing to report the error through
  if (ortops::InitApi(api_base) == nullptr) {
    // The runtime predates the API version ortops needs; version 1 always exists and is
    // enough to say so.
    const OrtApi* oldest = api_base->GetApi(1);
    std::string message = std::string("ortops needs ONNX Runtime with C API version ") +
                          std::to_string(ortops::kMinOrtApiVersion) + " (1." +
                          std::to_string(ortops::kMinOrtApiVersion) + ") or newer; this runtime is " +
                          api_base->GetVersionString();
    return oldest ? oldest->CreateStatus(ORT_FAIL, message.c_str()) : nullptr;
  }
  try {
    if (const std::string& error = ortops::IsaError(); !error.empty()) {
      return ortops::Api().CreateStatus(ORT_INVALID_ARGUMENT, ("ortops: " + error).c_str());
    }
    return ortops::RegisterAll(options);
  } catch (...) {
    return ortops::Api().CreateStatus(ORT_FAIL, "ortops: registration failed");
  }
}
