// The device's matrix product (gemm.h): one thread per element of C, as the emulated device
// runs it, and, compiled by nvcc, cuBLAS in its place wherever it can run there.
#include <cstdint>

#include "device/gemm.h"

#if defined(__CUDACC__)
#include <dlfcn.h>

#include <climits>
#endif

namespace ortops::device {
namespace {

// The twin of cuBLAS that the host runs (and a GPU without cuBLAS): element `index` of
// C, counted over the batch, then the rows, then the columns; its products summed from
// k = 0 upward.
template <typename T>
struct ProductElement {
  MatrixProduct<T> p;

  ORTOPS_HD void operator()(int64_t index) const {
    const int64_t j = index % p.n, i = index / p.n % p.m, item = index / (p.m * p.n);
    const T* row = p.a + item * p.stride_a + i * p.lda;
    const T* column = p.b + item * p.stride_b + (p.b_transposed ? j * p.ldb : j);
    const int64_t step = p.b_transposed ? 1 : p.ldb;
    T sum = 0;
    for (int64_t k = 0; k < p.k; ++k) sum += row[k] * column[k * step];
    p.c[item * p.stride_c + i * p.ldc + j] = sum;
  }
};

#if defined(__CUDACC__)
// GPU only, unverified on hardware until scripts/test_gpu.sh has run: cuBLAS, never linked
// (the library must load where no CUDA library is installed), but found in the process,
// where ONNX Runtime's CUDA provider loaded it, together with the provider's handle. The
// few declarations needed are written here with cuBLAS's ABI (its enums are ints) rather
// than taken from its headers, which the build does not have.
using CublasHandle = void*;
using GetStream = int (*)(CublasHandle handle, cudaStream_t* stream);
using SetStream = int (*)(CublasHandle handle, cudaStream_t stream);
using GemmStridedBatchedEx = int (*)(CublasHandle handle, int transa, int transb, int m, int n, int k,
                                     const void* alpha, const void* a, int a_type, int lda, long long stride_a,
                                     const void* b, int b_type, int ldb, long long stride_b, const void* beta, void* c,
                                     int c_type, int ldc, long long stride_c, int batch, int compute_type,
                                     int algorithm);
constexpr int kOpN = 0, kOpT = 1;                                // cublasOperation_t
constexpr int kReal32 = 0, kReal64 = 1;                          // cudaDataType
constexpr int kCompute32Pedantic = 69, kCompute64Pedantic = 71;  // cublasComputeType_t
constexpr int kDefaultAlgorithm = -1;                            // CUBLAS_GEMM_DEFAULT
// onnxruntime/core/providers/cuda/cuda_resource.h: resource version 1 (ONNX Runtime 1.16
// on) has CudaResource::cublas_handle_t = cuda_resource_offset (10000) + 2.
constexpr int kCudaResourceVersion = 1, kCublasHandleResource = 10002;

struct Cublas {
  GetStream get_stream = nullptr;
  SetStream set_stream = nullptr;
  GemmStridedBatchedEx gemm = nullptr;
};

// The cuBLAS that is already loaded (RTLD_NOLOAD: never a second copy), by the sonames of
// the CUDA versions onnxruntime-gpu builds for; looked up once. Kept open, so that its
// functions stay valid for as long as this library is loaded.
const Cublas& LoadedCublas() {
  static const Cublas cublas = [] {
    for (const char* soname : {"libcublas.so.13", "libcublas.so.12"}) {
      void* library = dlopen(soname, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
      if (library == nullptr) continue;
      Cublas found{reinterpret_cast<GetStream>(dlsym(library, "cublasGetStream_v2")),
                   reinterpret_cast<SetStream>(dlsym(library, "cublasSetStream_v2")),
                   reinterpret_cast<GemmStridedBatchedEx>(dlsym(library, "cublasGemmStridedBatchedEx"))};
      if (found.get_stream != nullptr && found.set_stream != nullptr && found.gemm != nullptr) return found;
      dlclose(library);
    }
    return Cublas{};
  }();
  return cublas;
}

// ONNX Runtime's cuBLAS handle for this kernel's stream, or null where the provider has
// none to give.
CublasHandle ProviderHandle(const DeviceIO& io) {
  void* handle = nullptr;
  OrtStatus* status =
      Api().KernelContext_GetResource(io.context(), kCudaResourceVersion, kCublasHandleResource, &handle);
  if (status != nullptr) {
    Api().ReleaseStatus(status);
    return nullptr;
  }
  return handle;
}

bool FitsInt(int64_t value) { return value >= 0 && value <= INT_MAX; }

// The product on cuBLAS; false where it cannot run there (no cuBLAS or handle, sizes beyond
// its int arguments), and then nothing has been queued. cuBLAS is column-major: the
// row-major C = A op(B) is, read column-major, C^T = op(B)^T A^T, so B goes first. The
// pedantic compute types keep cuBLAS from the reduced precision (TF32) that the provider
// may have enabled on its handle.
template <typename T>
bool RunOnCublas(const DeviceIO& io, const MatrixProduct<T>& p) {
  const Cublas& cublas = LoadedCublas();
  if (cublas.gemm == nullptr) return false;
  // cuBLAS's bounds on the leading dimensions, for the column-major operands.
  const int64_t ldb_min = p.b_transposed ? p.k : p.n;
  if (!FitsInt(p.m) || !FitsInt(p.n) || !FitsInt(p.k) || !FitsInt(p.batch) || !FitsInt(p.lda) || !FitsInt(p.ldb) ||
      !FitsInt(p.ldc) || p.lda < p.k || p.ldb < ldb_min || p.ldc < p.n || p.k < 1) {
    return false;
  }
  const CublasHandle handle = ProviderHandle(io);
  if (handle == nullptr) return false;
  constexpr bool kDouble = sizeof(T) == sizeof(double);
  constexpr int type = kDouble ? kReal64 : kReal32;
  const T one = 1, zero = 0;
  // The provider made the handle for this stream; set it again only if it is not (setting
  // it resets the handle's workspace).
  cudaStream_t current = nullptr;
  int status = cublas.get_stream(handle, &current);
  if (status == 0 && current != io.stream()) status = cublas.set_stream(handle, io.stream());
  if (status == 0) {
    status =
        cublas.gemm(handle, p.b_transposed ? kOpT : kOpN, kOpN, static_cast<int>(p.n), static_cast<int>(p.m),
                    static_cast<int>(p.k), &one, p.b, type, static_cast<int>(p.ldb), p.stride_b, p.a, type,
                    static_cast<int>(p.lda), p.stride_a, &zero, p.c, type, static_cast<int>(p.ldc), p.stride_c,
                    static_cast<int>(p.batch), kDouble ? kCompute64Pedantic : kCompute32Pedantic, kDefaultAlgorithm);
  }
  Check(status == 0, "cuBLAS error ", status, " in a ", p.batch, " x [", p.m, ", ", p.k, "] x [", p.k, ", ", p.n,
        "] matrix product");
  return true;
}
#endif

}  // namespace

template <typename T>
void Gemm(const DeviceIO& io, const MatrixProduct<T>& product) {
  if (product.m <= 0 || product.n <= 0 || product.batch <= 0) return;
#if defined(__CUDACC__)
  if (RunOnCublas(io, product)) {
    io.NoteLaunch();
    return;
  }
#endif
  io.ForEach(product.batch * product.m * product.n, ProductElement<T>{product});
}

template void Gemm<float>(const DeviceIO&, const MatrixProduct<float>&);
template void Gemm<double>(const DeviceIO&, const MatrixProduct<double>&);

}  // namespace ortops::device
