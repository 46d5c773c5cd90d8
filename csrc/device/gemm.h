// The device's matrix product, for the ops whose device path multiplies matrices
// (deformable convolution's columns, attention's scores and weighted values).
//
// Compiled by nvcc, a product runs on cuBLAS, the one ONNX Runtime's CUDA provider has
// loaded, with the provider's own handle and stream (gemm.cu). Everywhere else, and on a GPU
// where that cuBLAS cannot be found, it runs as one thread per element of C, each summing
// its products in the order k = 0, 1, ..., K - 1 in T (float or double) and storing the sum
// once: what the emulated device of CI runs (csrc/device/README.md). cuBLAS sums in an
// order of its own, so the two agree within rounding, not to the bit.
#pragma once

#include <cstdint>

#include "device/device_io.h"

namespace ortops::device {

// C = A x B, or A x B^T, for `batch` products at once. Matrices are row-major in device
// memory: element (i, j) of a matrix with leading dimension ld sits at i * ld + j, and
// product b's matrices start `stride` elements after product b - 1's (0: the same matrix).
template <typename T>  // float or double (float16 operands are widened to float first)
struct MatrixProduct {
  int64_t m = 0, n = 0, k = 0;
  const T* a = nullptr;  // [m, k]
  int64_t lda = 0, stride_a = 0;
  const T* b = nullptr;  // [k, n], or [n, k] when b_transposed
  int64_t ldb = 0, stride_b = 0;
  bool b_transposed = false;
  T* c = nullptr;  // [m, n], overwritten
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
};

// Queues the products on the kernel's stream. Each of C's elements is written once (k = 0
// gives zeros); nothing else is read or written.
template <typename T>
void Gemm(const DeviceIO& io, const MatrixProduct<T>& product);

}  // namespace ortops::device
