#include "core/custom_op.h"

#include <atomic>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <vector>

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

// Releases a status it is given and says whether there was one.
bool Failed(OrtStatus* status) {
  if (status == nullptr) return false;
  Api().ReleaseStatus(status);
  return true;
}

}  // namespace

bool InfersSameShapeOutputs(const OpSchema& schema) {
  for (const IoSpec& input : schema.inputs) {
    if (input.optional) return false;
  }
  for (const IoSpec& output : schema.outputs) {
    if (output.doc.starts_with("same shape")) return true;
  }
  return false;
}

OrtStatus* InferSameShapeOutputs(OrtShapeInferContext* context, const OpSchema& schema) {
  const OrtApi& api = Api();
  OrtTensorTypeAndShapeInfo* input = nullptr;
  if (Failed(api.ShapeInferContext_GetInputTypeShape(context, 0, &input))) return nullptr;
  size_t rank = 0;
  // ONNX Runtime gives an input of unknown rank as rank 0; no "same shape" output of ortops
  // is a scalar (each such op refuses scalar inputs), so rank 0 says nothing.
  std::vector<int64_t> dims;
  std::vector<const char*> symbols;
  bool known = !Failed(api.GetDimensionsCount(input, &rank)) && rank > 0;
  // The symbols made here, which `symbols` points into: reserved for every dim, so that no
  // push_back moves them.
  std::vector<std::string> names;
  if (known) {
    dims.resize(rank);
    symbols.resize(rank);
    known = !Failed(api.GetDimensions(input, dims.data(), rank)) &&
            !Failed(api.GetSymbolicDimensions(input, symbols.data(), rank));
  }
  // A dim that is neither known nor named can only be set with a name (ONNX Runtime writes an
  // unnamed one as its value, -1): a name of its own, equal to no other dim.
  static std::atomic<uint64_t> next_name{0};
  names.reserve(rank);
  for (size_t k = 0; known && k < rank; ++k) {
    if (dims[k] < 0 && (symbols[k] == nullptr || symbols[k][0] == '\0')) {
      names.push_back("ortops_dim_" + std::to_string(next_name++));
      symbols[k] = names.back().c_str();
    } else if (dims[k] >= 0) {
      symbols[k] = "";
    }
  }
  ONNXTensorElementDataType input_type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  known = known && !Failed(api.GetTensorElementType(input, &input_type));
  for (size_t i = 0; known && i < schema.outputs.size(); ++i) {
    const IoSpec& spec = schema.outputs[i];
    if (!spec.doc.starts_with("same shape")) continue;
    const bool generic = spec.type == ElemType::kTypeParam;
    if (generic && schema.inputs[0].type != ElemType::kTypeParam) continue;
    const ONNXTensorElementDataType type = generic ? input_type : Resolve<float>(spec.type);
    OrtTensorTypeAndShapeInfo* output = nullptr;
    if (Failed(api.CreateTensorTypeAndShapeInfo(&output))) break;
    const bool set = !Failed(api.SetTensorElementType(output, type)) &&
                     !Failed(api.SetDimensions(output, dims.data(), rank)) &&
                     !Failed(api.SetSymbolicDimensions(output, symbols.data(), rank));
    if (set) Failed(api.ShapeInferContext_SetOutputTypeShape(context, i, output));
    api.ReleaseTensorTypeAndShapeInfo(output);
  }
  return nullptr;  // `input` belongs to the context
}

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
