#include "core/ort_gemm.h"

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

OrtGemm::OrtGemm(const OrtKernelInfo* info, ONNXTensorElementDataType type, bool transpose_b)
    : type_(type), transpose_b_(transpose_b) {
  const char* constraint_names[] = {"T"};
  const ONNXTensorElementDataType constraint_types[] = {type};
  // The kernel reads every attribute, defaults included, from what is passed here.
  const int64_t no = 0, trans_b = transpose_b ? 1 : 0;
  const float one = 1.0f;
  struct {
    const char* name;
    const void* value;
    OrtOpAttrType type;
  } const specs[] = {{"transA", &no, ORT_OP_ATTR_INT},
                     {"transB", &trans_b, ORT_OP_ATTR_INT},
                     {"alpha", &one, ORT_OP_ATTR_FLOAT},
                     {"beta", &one, ORT_OP_ATTR_FLOAT}};
  std::array<OrtOpAttr*, 4> attributes{};
  OrtStatus* status = nullptr;
  for (size_t i = 0; i < attributes.size() && !status; ++i) {
    status = Api().CreateOpAttr(specs[i].name, specs[i].value, 1, specs[i].type, &attributes[i]);
  }
  if (!status) {
    status = Api().CreateOp(info, "Gemm", "", 13, constraint_names, constraint_types, 1, attributes.data(),
                            static_cast<int>(attributes.size()), 2, 1, &op_);
  }
  for (OrtOpAttr* attribute : attributes) {
    if (attribute) Api().ReleaseOpAttr(attribute);
  }
  ThrowOnError(status);
  status = Api().CreateCpuMemoryInfo(OrtDeviceAllocator, OrtMemTypeDefault, &cpu_);
  if (status) {
    Api().ReleaseOp(op_);
    ThrowOnError(status);
  }
}

OrtGemm::~OrtGemm() {
  Api().ReleaseOp(op_);
  Api().ReleaseMemoryInfo(cpu_);
}

void OrtGemm::Run(OrtKernelContext* context, const void* a, const void* b, void* c, int64_t m, int64_t k,
                  int64_t n) const {
  const std::array<int64_t, 2> b_shape = transpose_b_ ? std::array<int64_t, 2>{n, k} : std::array<int64_t, 2>{k, n};
  const std::array<int64_t, 2> shapes[3] = {{m, k}, b_shape, {m, n}};
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
