// The device path's runtime on a GPU: ONNX Runtime's compute stream, its CUDA allocator, and
// the copies. This file and a kernel's launch are the only code that needs a GPU to run;
// runtime_host.cc is its twin for the emulated device that CI tests. Nothing here
// synchronises the device: only CopyToHost waits, and only for the kernel's own stream.
#include <cuda_runtime_api.h>

#include <new>

#include "device/device_io.h"

namespace ortops::device {
namespace {

void CheckCuda(cudaError_t error, const char* what) {
  if (error != cudaSuccess)
    Fail("CUDA error in ", what, ": ", cudaGetErrorName(error), ": ", cudaGetErrorString(error));
}

// The CUDA device that holds the kernel's inputs (ONNX Runtime runs a node's inputs and
// outputs on one device), or the calling thread's current one for a node without inputs.
int DeviceOf(OrtKernelContext* context) {
  size_t count = 0;
  ThrowOnError(Api().KernelContext_GetInputCount(context, &count));
  for (size_t i = 0; i < count; ++i) {
    const OrtValue* value = nullptr;
    ThrowOnError(Api().KernelContext_GetInput(context, i, &value));
    if (value == nullptr) continue;
    const OrtMemoryInfo* info = nullptr;
    ThrowOnError(Api().GetTensorMemoryInfo(value, &info));
    OrtMemoryInfoDeviceType type{};
    Api().MemoryInfoGetDeviceType(info, &type);
    if (type != OrtMemoryInfoDeviceType_GPU) continue;  // an input the kernel reads on the host
    int id = 0;
    ThrowOnError(Api().MemoryInfoGetId(info, &id));
    return id;
  }
  int id = 0;
  CheckCuda(cudaGetDevice(&id), "cudaGetDevice");
  return id;
}

OrtMemoryInfo* CudaMemory(OrtKernelContext* context) {
  OrtMemoryInfo* info = nullptr;
  ThrowOnError(Api().CreateMemoryInfo("Cuda", OrtArenaAllocator, DeviceOf(context), OrtMemTypeDefault, &info));
  return info;
}

OrtAllocator* SessionAllocator(OrtKernelContext* context, const OrtMemoryInfo* memory) {
  OrtAllocator* allocator = nullptr;
  ThrowOnError(Api().KernelContext_GetAllocator(context, memory, &allocator));
  return allocator;
}

// Scratch blocks in stream order. ONNX Runtime's CUDA arena hands a freed block to any stream
// at once unless it was allocated on a stream, as KernelContext_GetScratchBuffer (API 18) does.
// Concurrent Run calls use different streams, so a block freed when Compute returns, while its
// work is still queued, could be overwritten by another run's kernel (seen on an H200: garbage
// counts and illegal addresses with threads sharing a session). Runtimes of API 17 lack that
// function: there the stream is synchronised before a block goes back.
const OrtApi* ScratchApi() {
  static const OrtApi* const api = ApiIfAvailable(18);
  return api;
}

void* AllocateOnStream(OrtAllocator* self, size_t bytes) {
  auto* allocator = static_cast<StreamOrderedAllocator*>(self);
  const OrtApi* api = ScratchApi();
  if (api == nullptr) return allocator->session->Alloc(allocator->session, bytes);
  void* data = nullptr;
  if (OrtStatus* status =
          api->KernelContext_GetScratchBuffer(allocator->context, allocator->memory_info, bytes, &data)) {
    api->ReleaseStatus(status);
    return nullptr;  // reported by the caller as a failed allocation
  }
  return data;
}

void FreeOnStream(OrtAllocator* self, void* data) {
  auto* allocator = static_cast<StreamOrderedAllocator*>(self);
  // An error here is the stream's, and the next call on it reports it.
  if (ScratchApi() == nullptr) static_cast<void>(cudaStreamSynchronize(allocator->stream));
  allocator->session->Free(allocator->session, data);
}

const OrtMemoryInfo* InfoOf(const OrtAllocator* self) {
  const auto* allocator = static_cast<const StreamOrderedAllocator*>(self);
  return allocator->session->Info(allocator->session);
}

cudaStream_t ComputeStream(OrtKernelContext* context) {
  void* stream = nullptr;
  ThrowOnError(Api().KernelContext_GetGPUComputeStream(context, &stream));
  return static_cast<cudaStream_t>(stream);
}

}  // namespace

DeviceIO::DeviceIO(OrtKernelContext* context, std::span<const IoSpec> inputs)
    : io_(context, inputs),
      stream_(ComputeStream(context)),
      memory_info_(CudaMemory(context)),
      session_allocator_(SessionAllocator(context, memory_info_.get())),
      allocator_(&stream_allocator_),
      thrust_allocator_(allocator_, &counts_.allocations) {
  stream_allocator_.version = kMinOrtApiVersion;
  stream_allocator_.Alloc = AllocateOnStream;
  stream_allocator_.Free = FreeOnStream;
  stream_allocator_.Info = InfoOf;
  stream_allocator_.context = context;
  stream_allocator_.session = session_allocator_.get();
  stream_allocator_.memory_info = memory_info_.get();
  stream_allocator_.stream = stream_;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CheckCuda(cudaStreamIsCapturing(stream_, &capture), "cudaStreamIsCapturing");
  capturing_ = capture == cudaStreamCaptureStatusActive;
}

Policy DeviceIO::MakePolicy() const { return thrust::cuda::par_nosync(thrust_allocator_).on(stream_); }

void DeviceIO::RequireHostMemory(size_t index) const {
  const OrtValue* value = nullptr;
  ThrowOnError(Api().KernelContext_GetInput(io_.context(), index, &value));
  if (value == nullptr) return;  // an optional input left out: Input says so
  const OrtMemoryInfo* info = nullptr;
  ThrowOnError(Api().GetTensorMemoryInfo(value, &info));
  OrtMemoryInfoDeviceType type{};
  Api().MemoryInfoGetDeviceType(info, &type);
  Check(type == OrtMemoryInfoDeviceType_CPU, "internal error: input ", index,
        " is read on the host but ONNX Runtime gave it in device memory (not declared a host input)");
}

void DeviceIO::CopyBytesToHost(void* host, const void* device, size_t bytes) const {
  if (bytes == 0) return;
  CheckCuda(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
  CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

void DeviceIO::CopyBytesToDevice(void* device, const void* host, size_t bytes) const {
  if (bytes == 0) return;
  CheckCuda(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
}

void DeviceIO::CheckLaunch(const char* what) const { CheckCuda(cudaGetLastError(), what); }

void DeviceIO::FillBytes(void* device, int byte, size_t bytes) const {
  if (bytes == 0) return;
  CheckCuda(cudaMemsetAsync(device, byte, bytes, stream_), "cudaMemsetAsync");
}

}  // namespace ortops::device
