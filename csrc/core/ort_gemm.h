// Matrix products through ONNX Runtime's own Gemm kernel (MLAS), invoked from inside a
// custom kernel with the op-invocation C API: a tuned, threaded GEMM with no dependency of
// our own. Created once per kernel; Run may be called concurrently.
#pragma once

#include <onnxruntime_c_api.h>

#include <cstdint>

namespace ortops {

class OrtGemm {
 public:
  // transpose_b false: b is given as b[k, n], as it is stored (a second operand kept
  // row-major, such as attention's values).
  OrtGemm(const OrtKernelInfo* info, ONNXTensorElementDataType type, bool transpose_b = true);
  ~OrtGemm();
  OrtGemm(const OrtGemm&) = delete;
  OrtGemm& operator=(const OrtGemm&) = delete;

  // c[m, n] = a[m, k] x transpose(b[n, k]) (or a[m, k] x b[k, n] when made with
  // transpose_b false), all row-major and contiguous, of the element type given at
  // construction. b comes transposed by default because producers that write one row of b
  // per output column (im2col per position) then write contiguously.
  void Run(OrtKernelContext* context, const void* a, const void* b, void* c, int64_t m, int64_t k, int64_t n) const;

 private:
  OrtOp* op_ = nullptr;
  OrtMemoryInfo* cpu_ = nullptr;
  ONNXTensorElementDataType type_;
  bool transpose_b_;
};

}  // namespace ortops
