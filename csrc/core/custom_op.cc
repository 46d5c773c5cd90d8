#include "core/custom_op.h"

#include <exception>
#include <mutex>
#include <string>

#include "core/isa.h"

namespace ortops {

OrtStatus* StatusFromCurrentException(const OpDef& def) {
  std::string message = std::string(def.domain) + "." + std::string(def.name) + ": ";
  OrtErrorCode code = ORT_INVALID_ARGUMENT;
  try {
    throw;
  } catch (const Error& e) {
    message += e.what();
  } catch (const std::bad_alloc&) {
    message += "out of memory";
    code = ORT_FAIL;
  } catch (const std::exception& e) {
    message += e.what();
    code = ORT_FAIL;
  } catch (...) {
    message += "unknown error";
    code = ORT_FAIL;
  }
  return Api().CreateStatus(code, message.c_str());
}

void LogIsaOnce(const OrtKernelInfo* info) {
  static std::once_flag logged;
  std::call_once(logged, [info] {
    const OrtLogger* logger = nullptr;
    if (OrtStatus* status = Api().KernelInfo_GetLogger(info, &logger)) {
      Api().ReleaseStatus(status);
      return;
    }
    const std::string message = std::string("ortops: CPU kernels use ") + IsaName(ActiveIsa()) + " (this CPU has " +
                                IsaName(CpuIsa()) + "; the environment variable ORTOPS_ISA picks a lower level)";
    if (OrtStatus* status =
            Api().Logger_LogMessage(logger, ORT_LOGGING_LEVEL_INFO, message.c_str(), ORT_FILE, __LINE__, __func__)) {
      Api().ReleaseStatus(status);
    }
  });
}

}  // namespace ortops
