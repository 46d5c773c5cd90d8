#include "core/custom_op.h"

#include <exception>
#include <mutex>
#include <new>
#include <string>

#include "core/isa.h"

namespace ortops {

namespace {

// The node's name as the model gives it ("" when it has none, or the runtime cannot say).
std::string NodeName(const OrtKernelInfo* info) {
  size_t size = 0;
  if (OrtStatus* status = Api().KernelInfo_GetNodeName(info, nullptr, &size)) {
    Api().ReleaseStatus(status);
    return {};
  }
  std::string name(size, '\0');
  if (OrtStatus* status = Api().KernelInfo_GetNodeName(info, name.data(), &size)) {
    Api().ReleaseStatus(status);
    return {};
  }
  name.resize(size > 0 ? size - 1 : 0);  // size counts the terminating NUL
  return name;
}

}  // namespace

OrtStatus* StatusFromCurrentException(const OpDef& def, const OrtKernelInfo* info) {
  std::string message = std::string(def.domain) + "." + std::string(def.name);
  // ONNX Runtime reports a kernel that fails to be created without saying which node it was
  // for; in a model with many nodes of one op, only the name finds the bad attribute.
  if (info != nullptr) {
    try {
      const std::string node = NodeName(info);
      if (!node.empty()) message += " node '" + node + "'";
    } catch (const std::bad_alloc&) {
      // The message without the name is still worth returning.
    }
  }
  message += ": ";
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
