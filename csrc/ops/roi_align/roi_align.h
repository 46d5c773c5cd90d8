#pragma once

#include <limits>
#include <string>

#include "core/op_kernel.h"
#include "ops/roi_align/roi_geometry.h"

namespace ortops::roi_align {
extern const OpSchema kSchema;
KernelFactory Make, MakeDevice;

// The attribute 'mode' of a RoIAlign node, read and checked as every kernel of it does.
template <typename A>
roi_pooling::PoolMode<A> ReadMode(const Attributes& attrs, const OpDef& def) {
  const std::string mode = attrs.String("mode");
  Check(mode == "avg" || mode == "max", "attribute 'mode' must be \"avg\" or \"max\", got \"", mode, "\"");
  // mmcv's kernel started its running max at -10000; ortops' own op starts at -infinity.
  return {.max = mode == "max",
          .max_start = def.compat ? A(-10000) : -std::numeric_limits<A>::infinity(),
          .empty_bin = def.compat ? A(-10000) : A(0)};
}

// The attributes of a RoIAlign node, as its CPU and device kernels take them.
template <typename A>
struct RoiAlignAttributes {
  RoiAlignAttributes(const Attributes& attrs, const OpDef& def) : pooling(attrs), mode(ReadMode<A>(attrs, def)) {}
  roi_pooling::PoolingAttributes pooling;
  roi_pooling::PoolMode<A> mode;
};

}  // namespace ortops::roi_align
