// What a device kernel sees of ONNX Runtime: its inputs and outputs (in device memory), the
// stream to run on, scratch memory, and the few algorithms every op is written with.
//
// One source, two backends (csrc/device/README.md). Compiled by nvcc, the algorithms run on
// the GPU, on ONNX Runtime's compute stream, with temporaries from the session's CUDA
// allocator; compiled by the host compiler with THRUST_DEVICE_SYSTEM_CPP (the emulated
// device of libortops_device_on_cpu.so, which CI runs through the whole test suite), the same
// calls run on the host, with the session's CPU allocator. Only runtime_cuda.cu and
// runtime_host.cc differ between the two: everything an op writes is shared.
//
// Host code of a device kernel never dereferences a tensor's data or a Buffer: on the GPU
// they are device addresses. Values the host needs (an output size, a failed check) come
// back through CopyToHost or FirstWhere, which wait for the stream.
#pragma once

#include <thrust/execution_policy.h>
#include <thrust/find.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/host_device.h"
#include "core/kernel_io.h"

#if defined(__CUDACC__)
#include <cuda_runtime_api.h>
#include <thrust/system/cuda/execution_policy.h>
#else
#include <thrust/system/cpp/execution_policy.h>
#endif

namespace ortops {
struct OpDef;
}

namespace ortops::device {

// The execution provider a device kernel registers for: CUDA's when compiled by nvcc; the
// CPU's (nullptr) for the emulated device, which the test suite loads in a CPU session.
#if defined(__CUDACC__)
inline constexpr const char* kExecutionProvider = "CUDAExecutionProvider";
#else
inline constexpr const char* kExecutionProvider = nullptr;
#endif

// Temporary storage of Thrust's algorithms (sort, scan, find) from the session's allocator
// for the device, so that no algorithm allocates on its own.
class ThrustAllocator {
 public:
  using value_type = char;
  ThrustAllocator(OrtAllocator* allocator, int64_t* allocations) : allocator_(allocator), allocations_(allocations) {}
  char* allocate(std::ptrdiff_t bytes) {
    void* data = allocator_->Alloc(allocator_, static_cast<size_t>(bytes));
    if (data == nullptr) throw std::bad_alloc();
    ++*allocations_;
    return static_cast<char*>(data);
  }
  void deallocate(char* data, size_t) noexcept { allocator_->Free(allocator_, data); }

 private:
  OrtAllocator* allocator_;
  int64_t* allocations_;
};

// What one run of a device kernel asked of the device, counted the same way in both builds
// (the emulated device's twins of GPU-only launches count as those launches), so that the
// tests can hold each node to a budget on any machine (csrc/device/README.md, "Budgets").
struct DeviceCounts {
  int64_t kernels = 0;     // ForEach, and launches written by hand (the greedy pass, cuBLAS)
  int64_t algorithms = 0;  // Thrust's sorts, scans, selections, reductions, searches: a few kernels each
  int64_t fills = 0;       // memsets on the stream
  int64_t waits = 0;       // the host waited for the stream: a copy to the host, an algorithm's result
  int64_t copies_to_device = 0;
  int64_t allocations = 0;  // scratch blocks from the session's allocator, Thrust's temporaries included
};

#if defined(__CUDACC__)
using Stream = cudaStream_t;
// Asynchronous on the stream: an algorithm returns as soon as its work is queued, unless
// its result goes to the host (find_if, reduce).
using Policy = decltype(thrust::cuda::par_nosync(std::declval<ThrustAllocator&>()).on(Stream{}));
#else
using Stream = void*;
using Policy = decltype(thrust::cpp::par(std::declval<ThrustAllocator&>()));
#endif

// The GPU's scratch allocator (runtime_cuda.cu): blocks ordered on the kernel's stream.
struct StreamOrderedAllocator : OrtAllocator {
  OrtKernelContext* context = nullptr;
  OrtAllocator* session = nullptr;
  OrtMemoryInfo* memory_info = nullptr;
  Stream stream{};
};

struct ReleaseMemoryInfo {
  void operator()(OrtMemoryInfo* info) const { Api().ReleaseMemoryInfo(info); }
};
struct ReleaseAllocator {
  void operator()(OrtAllocator* allocator) const { Api().ReleaseAllocator(allocator); }
};

class DeviceIO {
 public:
  DeviceIO(OrtKernelContext* context, std::span<const IoSpec> inputs);
  DeviceIO(const DeviceIO&) = delete;
  DeviceIO& operator=(const DeviceIO&) = delete;

  // As KernelIO's, with the same checks and messages; the data live in device memory.
  template <typename T>
  ConstTensor<T> Input(size_t index, int rank = -1) const {
    return io_.Input<T>(index, rank);
  }
  // An input the kernel reads on the host: one its class declares a host input
  // (DeviceKernelWithHostInputs), which ONNX Runtime hands over in host memory; anything else
  // is an error.
  template <typename T>
  ConstTensor<T> HostInput(size_t index, int rank = -1) const {
    RequireHostMemory(index);
    return io_.Input<T>(index, rank);
  }
  template <typename T>
  T* Output(size_t index, const Shape& shape) const {
    return io_.Output<T>(index, shape);
  }
  bool Has(size_t index) const { return io_.Has(index); }
  size_t InputCount() const { return io_.InputCount(); }
  size_t OutputCount() const { return io_.OutputCount(); }

  // Thrust's algorithms run with this policy: on the kernel's stream, temporaries from the
  // session's allocator. Each call counts one algorithm.
  Policy policy() const {
    ++counts_.algorithms;
    return MakePolicy();
  }

  // `count` uninitialised elements of device memory from the session's allocator. Freed when
  // the Scratch goes out of scope; work queued on the stream that still uses it stays safe,
  // because the memory is allocated in stream order (runtime_cuda.cu): the arena hands it out
  // again only to work queued after it on this stream, or once the streams have met.
  template <typename T>
  Scratch<T> Allocate(size_t count) const {
    if (count != 0) ++counts_.allocations;
    return Scratch<T>(count == 0 ? nullptr : allocator_, count);
  }

  // Runs body(i) for every i in [0, count): one GPU thread each, or a loop on the host.
  template <typename Body>
  void ForEach(int64_t count, const Body& body) const {
    if (count <= 0) return;
    ++counts_.kernels;
    thrust::for_each_n(MakePolicy(), thrust::counting_iterator<int64_t>(0), count, body);
  }

  // The smallest i in [0, count) with predicate(i), or -1: the device's half of a check
  // whose message the host then writes (see CheckEach). Waits for the stream, except in a
  // CUDA graph's capture, where it checks nothing and gives -1: a replay runs no host code, so
  // a graph cannot check data, and the kernels write RefusedValue for what a check refuses.
  template <typename Predicate>
  int64_t FirstWhere(int64_t count, const Predicate& predicate) const {
    if (count <= 0 || capturing_) return -1;
    const thrust::counting_iterator<int64_t> first(0);
    const int64_t found = thrust::find_if(policy(), first, first + count, predicate) - first;
    NoteWait();
    return found < count ? found : -1;
  }

  // The same as a check that waits for nothing: the smallest i in [0, count) with
  // predicate(i), or -1, goes to *first (device memory), for the host to read with what it
  // copies anyway (an output's size: one wait for both). -1 in a capture, as FirstWhere gives.
  // The kernels that run before the host reads it must stay in bounds on the data it refuses.
  template <typename Predicate>
  void FirstWhereInto(int64_t count, const Predicate& predicate, int64_t* first) const;

  // For the counts: a kernel launched by hand (GPU only, or its host twin), and a Thrust
  // algorithm whose result came back to the host.
  void NoteLaunch() const { ++counts_.kernels; }
  void NoteWait() const { ++counts_.waits; }

  // Whether ONNX Runtime is capturing the kernel's stream into a CUDA graph (a session with
  // enable_cuda_graph): its work is then recorded, not run, and replayed later without any host
  // code, so nothing may wait for the stream or copy from host memory. The emulated device
  // plays a capture where ORTOPS_EMULATED_GRAPH_CAPTURE is set (for the tests).
  bool Capturing() const { return capturing_; }
  // Fails, naming `why`, where the kernel is being captured: before a wait it cannot do there.
  void RequireNoCapture(const char* why) const {
    Check(!capturing_, "cannot run in a CUDA graph (enable_cuda_graph): ", why);
  }
  const DeviceCounts& counts() const { return counts_; }

  // Copies `count` elements from device memory to the host. Waits for the stream: for what
  // the host must know before it goes on (the size of a data-dependent output).
  template <typename T>
  void CopyToHost(T* host, const T* device, size_t count) const {
    RequireNoCapture("the host must read what the device computed (an output's size)");
    ++counts_.waits;
    CopyBytesToHost(host, device, count * sizeof(T));
  }
  // Copies `count` elements from the host to device memory, queued on the stream; `host` may
  // be reused as soon as this returns.
  template <typename T>
  void CopyToDevice(T* device, const T* host, size_t count) const {
    RequireNoCapture("it copies a table from host memory, which a replay would read after it is gone");
    ++counts_.copies_to_device;
    CopyBytesToDevice(device, host, count * sizeof(T));
  }
  // Fills `count` bytes of device memory with `byte`, queued on the stream.
  void Fill(void* device, int byte, size_t bytes) const {
    if (bytes == 0) return;
    ++counts_.fills;
    FillBytes(device, byte, bytes);
  }

  Stream stream() const { return stream_; }
  // ONNX Runtime's context of the call, for the provider's resources (device/gemm.cu: its
  // cuBLAS handle).
  OrtKernelContext* context() const { return io_.context(); }

#if defined(__CUDACC__)
  // After a kernel launched by hand (GPU-only code: everything else launches through Thrust,
  // which checks): turns a launch error into an Error naming `what`.
  void CheckLaunch(const char* what) const;
#endif

 private:
  Policy MakePolicy() const;
  void RequireHostMemory(size_t index) const;
  void CopyBytesToHost(void* host, const void* device, size_t bytes) const;
  void CopyBytesToDevice(void* device, const void* host, size_t bytes) const;
  void FillBytes(void* device, int byte, size_t bytes) const;

  KernelIO io_;
  Stream stream_{};
  // Released when the DeviceIO goes, or when a later member's construction throws.
  std::unique_ptr<OrtMemoryInfo, ReleaseMemoryInfo> memory_info_;
  std::unique_ptr<OrtAllocator, ReleaseAllocator> session_allocator_;
  StreamOrderedAllocator stream_allocator_{};  // unused by the emulated device
  OrtAllocator* allocator_ = nullptr;          // Allocate's and Thrust's
  mutable DeviceCounts counts_;
  mutable ThrustAllocator thrust_allocator_{nullptr, &counts_.allocations};
  bool capturing_ = false;
};

// Appends what this run asked of the device, as a line of JSON naming the node's op, to the
// file that ORTOPS_DEVICE_TRACE names (tests/python/ort/test_device_budgets.py reads it);
// nothing without that variable. Called after every successful Compute (core/custom_op.h).
void ReportRun(const OpDef& def, const DeviceIO& io);

// *first = i where i is below it, compared as unsigned (so that -1, all bits set, is above
// every index): from many threads at once on a GPU, one after another on the host.
ORTOPS_HD inline void LowerIndex(int64_t* first, int64_t i) {
#if defined(__CUDA_ARCH__)
  atomicMin(reinterpret_cast<unsigned long long*>(first), static_cast<unsigned long long>(i));
#else
  if (static_cast<uint64_t>(i) < static_cast<uint64_t>(*first)) *first = i;
#endif
}

template <typename Predicate>
struct LowestWhere {
  Predicate predicate;
  int64_t* first;
  ORTOPS_HD void operator()(int64_t i) const {
    if (predicate(i)) LowerIndex(first, i);
  }
};

template <typename Predicate>
void DeviceIO::FirstWhereInto(int64_t count, const Predicate& predicate, int64_t* first) const {
  Fill(first, 0xff, sizeof(int64_t));  // -1
  if (count > 0 && !capturing_) ForEach(count, LowestWhere<Predicate>{predicate, first});
}

// What a kernel writes for an item whose data a check refuses, where the check could not run
// (a CUDA graph: see FirstWhere): NaN, or 0 for an integer type. Outside a graph the host
// raises the check's error, and the output is not seen.
template <typename T>
ORTOPS_HD T RefusedValue() {
  if constexpr (std::numeric_limits<T>::is_integer) {
    return T(0);
  } else {
    return T(std::numeric_limits<float>::quiet_NaN());  // float16 too, which has no numeric_limits
  }
}

// Predicates of the data checks: value i is NaN; value i is NaN or infinite.
template <typename T>
struct IsNaN {
  const T* values;
  ORTOPS_HD bool operator()(int64_t i) const { return values[i] != values[i]; }
};
template <typename T>
struct IsNotFinite {
  const T* values;
  ORTOPS_HD bool operator()(int64_t i) const { return !std::isfinite(values[i]); }
};

// Two data checks at the cost of one wait: item i < first_count is `first`'s item i, the rest
// are `second`'s (FirstWhere's predicate over both tensors).
template <typename First, typename Second>
struct EitherFails {
  First first;
  Second second;
  int64_t first_count;
  ORTOPS_HD bool operator()(int64_t i) const { return i < first_count ? first(i) : second(i - first_count); }
};

// Validates data on the device with the CPU kernel's own check, so that both give the same
// error: `fails(i)` (run on the device) tells whether item i would fail, and for the first
// that does, `check(i, host_copy)` runs on the host, on a copy of that item's `width`
// elements starting at `data + i * width`, and throws the CPU kernel's message.
template <typename T, typename Fails, typename HostCheck>
void CheckEach(const DeviceIO& io, const T* data, int64_t count, int64_t width, const Fails& fails,
               const HostCheck& check) {
  const int64_t bad = io.FirstWhere(count, fails);
  if (bad < 0) return;
  std::vector<T> item(static_cast<size_t>(width));
  io.CopyToHost(item.data(), data + bad * width, item.size());
  check(bad, item.data());
  Fail("internal error: item ", bad, " failed its check on the device but not on the host");
}

}  // namespace ortops::device
