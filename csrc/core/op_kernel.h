// The skeleton every kernel class shares (core/custom_op.h describes what CustomOp reads from
// a kernel), written once:
//
//   template <typename T>
//   struct CornerPoolKernel : OpKernel<T, kSchema, Direction> {
//     using OpKernel<T, kSchema, Direction>::OpKernel;
//     void Compute(const KernelIO& io, const Direction& direction) const { ... }
//   };
//
// Compute gets the attributes parsed when the session was created (or reads
// this->attributes(), as helpers do).
//
// A device kernel names device::DeviceKernelBase as Base; its CPU twin and it then share the
// schema and the attribute parsing by construction.
#pragma once

#include <type_traits>

#include "core/custom_op.h"

namespace ortops {

// For an op without attributes.
struct NoAttributes {
  explicit NoAttributes(const Attributes&) {}
};

// Attributes parsed as Parsed(attrs, kArg), for kernel templates whose compile-time argument
// (a layout, a grouping) picks the node and so what its attributes mean.
template <typename Parsed, auto kArg>
struct ParsedWith : Parsed {
  explicit ParsedWith(const Attributes& attrs) : Parsed(attrs, kArg) {}
};

// A kernel computing elements of type T for the op that Schema describes. Parsed holds the
// op's attributes, read and checked once when the session is created: it is constructed from
// the Attributes, or from the Attributes and the OpDef where a domain's quirks matter.
template <typename T, const OpSchema& Schema, typename Parsed = NoAttributes, typename Base = KernelBase>
class OpKernel : public Base {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = Schema;

  OpKernel(const Attributes& attrs, const OpDef& def) : Base(def), attributes_(Parse(attrs, def)) {}

  const Parsed& attributes() const { return attributes_; }

 private:
  static Parsed Parse(const Attributes& attrs, const OpDef& def) {
    if constexpr (std::is_constructible_v<Parsed, const Attributes&, const OpDef&>) {
      return Parsed(attrs, def);
    } else {
      return Parsed(attrs);
    }
  }

  const Parsed attributes_;
};

// Kernel templates shared by several nodes take the node as a second argument: a value (a
// layout, a grouping, a flag) or a type. Their factories name that argument, MakeOps<K, arg,
// element types...>, in place of an alias per node: GCC names MakeOps<Alias, ...> after the
// alias, so like-named aliases of two files' kernels once made the linker keep one file's
// instantiation for both.
template <template <typename, auto> class K, auto kNode>
struct KernelOfNode {
  template <typename T>
  using Kernel = K<T, kNode>;
};
template <template <typename, typename> class K, typename Node>
struct KernelOfNodeType {
  template <typename T>
  using Kernel = K<T, Node>;
};

template <template <typename, auto> class K, auto kNode, typename... Ts>
std::vector<OpPtr> MakeOps(const OpDef& def) {
  return MakeOps<KernelOfNode<K, kNode>::template Kernel, Ts...>(def);
}
template <template <typename, typename> class K, typename Node, typename... Ts>
std::vector<OpPtr> MakeOps(const OpDef& def) {
  return MakeOps<KernelOfNodeType<K, Node>::template Kernel, Ts...>(def);
}

}  // namespace ortops
