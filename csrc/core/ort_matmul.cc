#include "core/ort_matmul.h"

#include <array>

#include "core/error.h"
#include "core/ort_api.h"

namespace ortops {
namespace {

size_t ElementSize(ONNXTensorElementDataType type) {
  return type == ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE ? sizeof(double) : sizeof(float);
}

// Releases the OrtValues of one invocation on every path.
struct Values {
  std::array<OrtValue*, 3> value{nullptr, nullptr, nullptr};
  ~Values() {
    for (OrtValue* v : value) {
      if (v) Api().ReleaseValue(v);
    }
  }
};

}  // namespace

OrtMatMul::OrtMatMul(const OrtKernelInfo* info, ONNXTensorElementDataType type) : type_(type) {
  const char* constraint_names[] = {"T"};
  const ONNXTensorElementDataType constraint_types[] = {type};
  ThrowOnError(Api().CreateOp(info, "MatMul", "", 13, constraint_names, constraint_types, 1, nullptr, 0, 2, 1, &op_));
  OrtStatus* status = Api().CreateCpuMemoryInfo(OrtDeviceAllocator, OrtMemTypeDefault, &cpu_);
  if (status) {
    Api().ReleaseOp(op_);
    ThrowOnError(status);
  }
}

OrtMatMul::~OrtMatMul() {
  Api().ReleaseOp(op_);
  Api().ReleaseMemoryInfo(cpu_);
}

void OrtMatMul::Run(OrtKernelContext* context, const void* a, const void* b, void* c, int64_t m, int64_t k,
                    int64_t n) const {
  const std::array<int64_t, 2> shapes[3] = {{m, k}, {k, n}, {m, n}};
  void* data[3] = {const_cast<void*>(a), const_cast<void*>(b), c};  // inputs are only read
  Values values;
  for (int i = 0; i < 3; ++i) {
    const size_t bytes = static_cast<size_t>(shapes[i][0] * shapes[i][1]) * ElementSize(type_);
    ThrowOnError(
        Api().CreateTensorWithDataAsOrtValue(cpu_, data[i], bytes, shapes[i].data(), 2, type_, &values.value[i]));
  }
  const OrtValue* inputs[2] = {values.value[0], values.value[1]};
  ThrowOnError(Api().InvokeOp(context, op_, inputs, 2, &values.value[2], 1));
}

}  // namespace ortops
