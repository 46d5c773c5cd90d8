// The emulated device: the device path's runtime on the host, for libortops_device_on_cpu.so.
// Device memory is the session's CPU memory, the stream is the calling thread (every
// algorithm has finished when it returns), and copies are memcpy. The GPU's twin of this
// file is runtime_cuda.cu.
#include <cstdlib>
#include <cstring>
#include <new>

#include "device/device_io.h"

namespace ortops::device {
namespace {

OrtMemoryInfo* CpuMemory() {
  OrtMemoryInfo* cpu = nullptr;
  ThrowOnError(Api().CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &cpu));
  return cpu;
}

OrtAllocator* SessionAllocator(OrtKernelContext* context, const OrtMemoryInfo* memory) {
  OrtAllocator* allocator = nullptr;
  ThrowOnError(Api().KernelContext_GetAllocator(context, memory, &allocator));
  return allocator;
}

}  // namespace

// The stream is the calling thread: a freed block is reused only by later work.
DeviceIO::DeviceIO(OrtKernelContext* context, std::span<const IoSpec> inputs)
    : io_(context, inputs),
      memory_info_(CpuMemory()),
      session_allocator_(SessionAllocator(context, memory_info_.get())),
      allocator_(session_allocator_.get()),
      thrust_allocator_(allocator_, &counts_.allocations),
      capturing_(std::getenv("ORTOPS_EMULATED_GRAPH_CAPTURE") != nullptr) {}

Policy DeviceIO::MakePolicy() const { return thrust::cpp::par(thrust_allocator_); }

// Every input is in host memory here.
void DeviceIO::RequireHostMemory(size_t) const {}

void DeviceIO::CopyBytesToHost(void* host, const void* device, size_t bytes) const {
  if (bytes != 0) std::memcpy(host, device, bytes);
}

void DeviceIO::CopyBytesToDevice(void* device, const void* host, size_t bytes) const {
  if (bytes != 0) std::memcpy(device, host, bytes);
}

void DeviceIO::FillBytes(void* device, int byte, size_t bytes) const {
  if (bytes != 0) std::memset(device, byte, bytes);
}

}  // namespace ortops::device
