// Typed access to a kernel's attributes, inputs and outputs over the C API, with checks
// whose messages name the input and show the actual shape. Kernels never touch OrtApi.
#pragma once

#include <onnxruntime_c_api.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <new>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/ort_api.h"
#include "core/schema.h"

namespace ortops {

using Shape = std::vector<int64_t>;

// Prints a shape as [2, 3, 4] in error messages.
struct ShapeText {
  const Shape& shape;
};
std::ostream& operator<<(std::ostream& out, ShapeText shape);

int64_t NumElements(const Shape& shape);

template <typename T>
struct ConstTensor {
  const T* data = nullptr;
  Shape shape;

  size_t rank() const { return shape.size(); }
  int64_t dim(size_t axis) const { return shape[axis]; }
  int64_t size() const { return NumElements(shape); }
};

// Attributes of one node, read once when the kernel is created. Names must appear in the
// op's schema: a missing attribute takes the schema's default, or is an error if it has none;
// one stored with another ONNX type is an error. (ONNX Runtime gives a custom op no way to
// list a node's attribute names, so names the op does not know are left to check_model.)
class Attributes {
 public:
  Attributes(const OrtKernelInfo* info, std::span<const AttrSpec> specs) : info_(info), specs_(specs) {}

  // Fails if an attribute of the schema is stored with another ONNX type. The adapter calls
  // this before the kernel reads anything, so unread (ignored) attributes are checked too.
  void CheckTypes() const;

  int64_t Int(std::string_view name) const;
  float Float(std::string_view name) const;
  std::string String(std::string_view name) const;
  std::vector<int64_t> Ints(std::string_view name) const;
  std::vector<float> Floats(std::string_view name) const;

  // For kernels that create ONNX Runtime ops of their own (OrtApi::CreateOp).
  const OrtKernelInfo* info() const { return info_; }

  // Input `index` when the graph holds it as a constant initializer of element type T, so
  // that a kernel can prepare it once (the data lives as long as the session); else empty.
  template <typename T>
  std::optional<ConstTensor<T>> ConstantInput(size_t index) const {
    ConstTensor<T> tensor;
    const void* data = RawConstantInput(index, OnnxType<T>(), tensor.shape);
    if (data == nullptr) return std::nullopt;
    tensor.data = static_cast<const T*>(data);
    return tensor;
  }

 private:
  const AttrSpec& Spec(std::string_view name, AttrType type) const;
  const void* RawConstantInput(size_t index, ONNXTensorElementDataType type, Shape& shape) const;
  void RequireDefault(const AttrSpec& spec) const;
  template <typename T, typename Getter>
  std::vector<T> Array(std::string_view name, AttrType type, Getter get) const;
  const OrtKernelInfo* info_;
  std::span<const AttrSpec> specs_;
};

// Uninitialised scratch memory from the session's CPU allocator (whose arena reuses it
// from run to run), returned to it when this goes out of scope. The allocator handle
// belongs to the KernelIO that hands the buffer out.
class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  ScratchBuffer(OrtAllocator* allocator, size_t bytes);
  ~ScratchBuffer();
  ScratchBuffer(ScratchBuffer&& other) noexcept { *this = std::move(other); }
  ScratchBuffer& operator=(ScratchBuffer&& other) noexcept;
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  void* data() const { return data_; }

 private:
  OrtAllocator* allocator_ = nullptr;
  void* data_ = nullptr;
};

template <typename T>
class Scratch {
 public:
  Scratch() = default;
  Scratch(OrtAllocator* allocator, size_t count) : buffer_(allocator, count * sizeof(T)), size_(count) {}
  T* data() const { return static_cast<T*>(buffer_.data()); }
  size_t size() const { return size_; }
  T& operator[](size_t i) const { return data()[i]; }

 private:
  ScratchBuffer buffer_;
  size_t size_ = 0;
};

// A std allocator over the session's CPU allocator (whose arena reuses memory from run to
// run), for containers that live within one Compute: KernelIO::Allocator hands them out
// and owns the handle they share.
template <typename T>
class SessionAllocator {
 public:
  using value_type = T;
  explicit SessionAllocator(OrtAllocator* allocator) noexcept : allocator_(allocator) {}
  template <typename U>
  SessionAllocator(const SessionAllocator<U>& other) noexcept : allocator_(other.allocator_) {}

  T* allocate(size_t count) {
    void* data = allocator_->Alloc(allocator_, count * sizeof(T));  // std::vector bounds count
    if (data == nullptr) throw std::bad_alloc();
    return static_cast<T*>(data);
  }
  void deallocate(T* data, size_t) noexcept { allocator_->Free(allocator_, data); }

  template <typename U>
  bool operator==(const SessionAllocator<U>& other) const noexcept {
    return allocator_ == other.allocator_;
  }

 private:
  template <typename>
  friend class SessionAllocator;
  OrtAllocator* allocator_;
};

// A vector of per-call scratch from the session's allocator.
template <typename T>
using ScratchVector = std::vector<T, SessionAllocator<T>>;

class KernelIO {
 public:
  KernelIO(OrtKernelContext* context, std::span<const IoSpec> inputs) : context_(context), input_specs_(inputs) {}
  ~KernelIO();
  KernelIO(const KernelIO&) = delete;
  KernelIO& operator=(const KernelIO&) = delete;

  // False for an optional input the node leaves out.
  bool Has(size_t index) const;

  // The number of outputs the node has: fewer than the schema's when it leaves out
  // optional trailing outputs.
  size_t OutputCount() const;

  // The number of inputs the node has: with a variadic last input, the schema's count - 1
  // plus however many the node gives it.
  size_t InputCount() const;

  // Input `index`, checked to hold element type T and to have rank `rank` (-1: any rank).
  template <typename T>
  ConstTensor<T> Input(size_t index, int rank = -1) const {
    ConstTensor<T> tensor;
    const OrtValue* value = RawInput(index, OnnxType<T>(), rank, tensor.shape);
    tensor.data = static_cast<const T*>(Data(const_cast<OrtValue*>(value)));
    return tensor;
  }
  // Input, for code shared with device kernels (device::DeviceIO::HostInput), which read some
  // inputs on the host: on the CPU every input is in host memory.
  template <typename T>
  ConstTensor<T> HostInput(size_t index, int rank = -1) const {
    return Input<T>(index, rank);
  }

  template <typename T>
  T* Output(size_t index, const Shape& shape) const {
    return static_cast<T*>(RawOutput(index, shape));
  }

  // Splits [0, total) into at most `max_chunks` contiguous ranges and runs body(begin, end)
  // for each in parallel: for many small items, so per-chunk set-up (a scratch buffer) is
  // paid once per range rather than per item.
  template <typename Body>
  void ParallelForRanges(size_t total, size_t max_chunks, Body&& body) const {
    const size_t chunks = std::min(total, std::max<size_t>(max_chunks, 1));
    if (chunks == 0) return;
    const size_t base = total / chunks, extra = total % chunks;
    ParallelFor(chunks, [&](size_t c) {
      const size_t begin = c * base + std::min(c, extra);
      body(begin, begin + base + (c < extra ? 1 : 0));
    });
  }

  // `count` uninitialised elements of scratch from the session's allocator.
  template <typename T>
  Scratch<T> Allocate(size_t count) const {
    return Scratch<T>(count == 0 ? nullptr : SessionCpuAllocator(), count);
  }

  // The session's allocator for containers of this call (ScratchVector); they must not
  // outlive this KernelIO. Safe to call from ParallelFor tasks.
  template <typename T = std::byte>
  SessionAllocator<T> Allocator() const {
    return SessionAllocator<T>(SessionCpuAllocator());
  }

  // `count` value-initialised elements of scratch from the session's allocator.
  template <typename T>
  ScratchVector<T> Vector(size_t count, const T& value = T()) const {
    return ScratchVector<T>(count, value, Allocator<T>());
  }

  // For kernels that invoke ONNX Runtime ops of their own (OrtApi::InvokeOp).
  OrtKernelContext* context() const { return context_; }

  // The CPU's hardware threads (at least 1, core/platform.h), counted once: glibc reads them
  // from /sys at every call. Not std::thread::hardware_concurrency, which links libstdc++'s
  // thread support and with it glibc 2.34's pthread_create, breaking the wheel's manylinux tag.
  static int64_t HardwareThreads();

  // Runs body(i) for i in [0, total) on the session's intra-op thread pool. body must be
  // cheap to call: give it a chunk of work (a roi, a row of channels), not one element.
  // An exception in body is rethrown here after every task has finished.
  template <typename Body>
  void ParallelFor(size_t total, Body&& body) const {
    if (total == 0) return;
    if (total == 1) {
      body(size_t{0});
      return;
    }
    struct Task {
      explicit Task(std::remove_reference_t<Body>* b) : body(b) {}
      std::remove_reference_t<Body>* body;
      std::atomic<bool> failed{false};
      std::exception_ptr error;
      std::mutex error_mutex;
    } task(&body);
    auto run = [](void* data, size_t i) {
      auto* t = static_cast<Task*>(data);
      if (t->failed.load(std::memory_order_relaxed)) return;
      try {
        (*t->body)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(t->error_mutex);
        if (!t->error) t->error = std::current_exception();
        t->failed.store(true, std::memory_order_relaxed);
      }
    };
    RunParallel(run, total, &task);
    if (task.error) std::rethrow_exception(task.error);
  }

 private:
  const OrtValue* RawInput(size_t index, ONNXTensorElementDataType type, int rank, Shape& shape) const;
  void* RawOutput(size_t index, const Shape& shape) const;
  static void* Data(OrtValue* value);
  void RunParallel(void (*fn)(void*, size_t), size_t total, void* data) const;
  std::string InputName(size_t index) const;
  OrtAllocator* SessionCpuAllocator() const;

  OrtKernelContext* context_;
  std::span<const IoSpec> input_specs_;
  // Obtained on first use, which may come from several ParallelFor tasks at once.
  mutable std::once_flag allocator_once_;
  mutable OrtAllocator* allocator_ = nullptr;
};

// After a CPU kernel's run: nothing to report (device kernels report what they asked of the
// device: device/device_io.h).
struct OpDef;
inline void ReportRun(const OpDef&, const KernelIO&) {}

}  // namespace ortops
