// Adapts a kernel class to ONNX Runtime's OrtCustomOp.
//
// A kernel class K derives from KernelBase and declares
//   using Element = T;                          // its element type (float, double)
//   static constexpr const OpSchema& kSchema;   // inputs, outputs, attributes, docs
//   K(const Attributes&, const OpDef&);         // parses and validates attributes
//   void Compute(const KernelIO&) const;        // validates inputs, computes (IO: see KernelBase)
// and may throw ortops::Error from either. CustomOp<K> reports K's schema to the runtime,
// sets every version-gated field for the oldest supported runtime, and turns every
// exception into an OrtStatus whose message starts with "domain.OpName: " (at kernel creation,
// "domain.OpName node 'name': ").
#pragma once

#include <onnxruntime_c_api.h>

#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/kernel_io.h"
#include "core/ort_api.h"
#include "core/schema.h"

namespace ortops {

struct OpDef;
// OrtCustomOp is a C struct without a virtual destructor, so each op carries the deleter of
// its own CustomOp<K> type.
struct OpDeleter {
  void (*destroy)(OrtCustomOp*) = nullptr;
  void operator()(OrtCustomOp* op) const { destroy(op); }
};
using OpPtr = std::unique_ptr<OrtCustomOp, OpDeleter>;
// What makes a node's kernels, one OrtCustomOp per element type; as a function type so that
// an op's header declares its factories in one line (`KernelFactory Make, MakeDevice;`).
using KernelFactory = std::vector<OpPtr>(const OpDef&);
using OpFactory = KernelFactory*;

// The op table's provider column. Every node runs on the CPU; a node with a device path
// also runs on CUDA. `make` is its device kernels' factory in the builds that carry device
// code (the CUDA build, and the emulated device that CI tests), null in the CPU-only build.
struct DevicePath {
  bool exists = false;
  OpFactory make = nullptr;
};

// One row of the op table (op_table.cc).
struct OpDef {
  std::string_view domain;
  std::string_view name;
  int since_version;
  DevicePath device;
  const OpSchema* schema;
  OpFactory make;  // its CPU kernels: one OrtCustomOp per element type
  // Kernels registered under more than one domain read this to keep a domain's quirks
  // (the compat domains reproduce the originals; ortops may fix them).
  bool compat = false;
};

// Builds the message "domain.Name: what" from the exception in flight; given the kernel info
// of a kernel being created, "domain.Name node 'node name': what" (attribute errors).
OrtStatus* StatusFromCurrentException(const OpDef& def, const OrtKernelInfo* info = nullptr);

// Says in the session's log, at INFO and once per process, which instruction-set level the
// hot loops run at (core/isa.h).
void LogIsaOnce(const OrtKernelInfo* info);

// Gives ONNX Runtime's shape inference the shape of each output documented "same shape"
// (input 0's): ONNX Runtime's own fusions after a node (a MatMul and an Add into a Gemm) need
// its output's shape. Its element type is input 0's where both are the type parameter T (ONNX
// Runtime asks one of an op's registrations, whatever the node's type), else the output's
// own. Where input 0's rank is not known, or a call fails, the outputs stay unknown, as
// without this function.
OrtStatus* InferSameShapeOutputs(OrtShapeInferContext* context, const OpSchema& schema);

// Whether an op gets InferSameShapeOutputs: it has a "same shape" output, and no optional
// input (ONNX Runtime 1.17 builds the shape-inference context from every input's type, and
// crashes on a node that leaves an optional input out).
bool InfersSameShapeOutputs(const OpSchema& schema);

template <typename Kernel>
class CustomOp : public OrtCustomOp {
 public:
  explicit CustomOp(const OpDef& def) : OrtCustomOp{}, def_(def), name_(def.name) {
    // Every field below exists in OrtCustomOp version kMinOrtApiVersion; a runtime reads
    // none of the newer ones from an op that reports this version.
    version = kMinOrtApiVersion;
    GetName = [](const OrtCustomOp* op) { return Self(op).name_.c_str(); };
    GetExecutionProviderType = [](const OrtCustomOp*) { return Kernel::kExecutionProvider; };
    GetInputTypeCount = [](const OrtCustomOp*) { return Kernel::kSchema.inputs.size(); };
    GetInputType = [](const OrtCustomOp*, size_t i) {
      return Resolve<typename Kernel::Element>(Kernel::kSchema.inputs[i].type);
    };
    GetOutputTypeCount = [](const OrtCustomOp*) { return Kernel::kSchema.outputs.size(); };
    GetOutputType = [](const OrtCustomOp*, size_t i) {
      return Resolve<typename Kernel::Element>(Kernel::kSchema.outputs[i].type);
    };
    GetInputCharacteristic = [](const OrtCustomOp*, size_t i) { return Characteristic(Kernel::kSchema.inputs[i]); };
    GetOutputCharacteristic = [](const OrtCustomOp*, size_t i) { return Characteristic(Kernel::kSchema.outputs[i]); };
    GetInputMemoryType = [](const OrtCustomOp*, size_t i) { return Kernel::InputMemoryType(i); };
    GetVariadicInputMinArity = [](const OrtCustomOp*) { return 1; };
    GetVariadicInputHomogeneity = [](const OrtCustomOp*) { return 1; };
    GetVariadicOutputMinArity = [](const OrtCustomOp*) { return 1; };
    GetVariadicOutputHomogeneity = [](const OrtCustomOp*) { return 1; };
    GetStartVersion = [](const OrtCustomOp* op) { return Self(op).def_.since_version; };
    GetEndVersion = [](const OrtCustomOp*) { return 2147483647; };
    CreateKernelV2 = [](const OrtCustomOp* op, const OrtApi*, const OrtKernelInfo* info, void** kernel) -> OrtStatus* {
      const CustomOp& self = Self(op);
      try {
        LogIsaOnce(info);
        const Attributes attributes(info, Kernel::kSchema.attributes);
        attributes.CheckTypes();
        *kernel = new Kernel(attributes, self.def_);
        return nullptr;
      } catch (...) {
        return StatusFromCurrentException(self.def_, info);
      }
    };
    KernelComputeV2 = [](void* kernel, OrtKernelContext* context) -> OrtStatus* {
      const auto* self = static_cast<const Kernel*>(kernel);
      try {
        const typename Kernel::IO io(context, Kernel::kSchema.inputs);
        // An OpKernel's Compute may take the attributes it parsed at session creation.
        if constexpr (requires { self->Compute(io, self->attributes()); }) {
          self->Compute(io, self->attributes());
        } else {
          self->Compute(io);
        }
        ReportRun(self->def(), io);
        return nullptr;
      } catch (...) {
        return StatusFromCurrentException(self->def());
      }
    };
    KernelDestroy = [](void* kernel) { delete static_cast<Kernel*>(kernel); };
    if (InfersSameShapeOutputs(Kernel::kSchema)) {
      InferOutputShapeFn = [](const OrtCustomOp*, OrtShapeInferContext* context) -> OrtStatus* {
        // Inference only helps ONNX Runtime plan: when it cannot be done (out of memory), the
        // outputs stay unknown, as they were before, and the kernels still check every shape.
        try {
          return InferSameShapeOutputs(context, Kernel::kSchema);
        } catch (...) {
          return nullptr;
        }
      };
    }
  }

 private:
  static const CustomOp& Self(const OrtCustomOp* op) { return *static_cast<const CustomOp*>(op); }
  // A variadic input takes one or more values (GetVariadicInputMinArity), all of its element
  // type (GetVariadicInputHomogeneity).
  static OrtCustomOpInputOutputCharacteristic Characteristic(const IoSpec& spec) {
    if (spec.variadic) return INPUT_OUTPUT_VARIADIC;
    return spec.optional ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
  }

  const OpDef& def_;
  std::string name_;
};

// The factory for an op whose kernel is the class template K over the listed types.
template <template <typename> class K, typename... Ts>
std::vector<OpPtr> MakeOps(const OpDef& def) {
  std::vector<OpPtr> ops;
  (ops.push_back(
       OpPtr(new CustomOp<K<Ts>>(def), OpDeleter{[](OrtCustomOp* op) { delete static_cast<CustomOp<K<Ts>>*>(op); }})),
   ...);
  return ops;
}

// Kernels keep the OpDef they were made from, for error messages and domain quirks. A CPU
// kernel computes through a KernelIO; device kernels (csrc/device/device_kernel.h) replace IO,
// the execution provider and where their inputs live.
class KernelBase {
 public:
  using IO = KernelIO;
  static constexpr const char* kExecutionProvider = nullptr;  // the CPU's
  static OrtMemType InputMemoryType(size_t) { return OrtMemTypeDefault; }

  explicit KernelBase(const OpDef& def) : def_(def) {}
  const OpDef& def() const { return def_; }

 private:
  const OpDef& def_;
};

}  // namespace ortops
