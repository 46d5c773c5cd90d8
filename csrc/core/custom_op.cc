#include "core/custom_op.h"

#include <exception>
#include <string>

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

}  // namespace ortops
