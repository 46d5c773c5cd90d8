// What the deformable convolutions' CPU kernel and device path share: the four node
// layouts, the attributes (read and checked once), and the input checks.
#pragma once

#include <array>
#include <cstdint>

#include "core/op_kernel.h"
#include "ops/deform_conv/deform_conv.h"

namespace ortops::deform_conv {

// kMmdeployV1 is kV1 with mmdeploy's attribute encoding (four padding values).
enum class Layout { kModulated, kV1, kMmdeployV1, kOrtops };

constexpr const OpSchema& SchemaOf(Layout layout) {
  return layout == Layout::kModulated    ? kModulatedSchema
         : layout == Layout::kV1         ? kV1Schema
         : layout == Layout::kMmdeployV1 ? kMmdeploySchema
                                         : kSchema;
}
constexpr bool HasMask(Layout layout) { return layout == Layout::kModulated || layout == Layout::kOrtops; }
constexpr size_t WeightIndex(Layout layout) { return layout == Layout::kModulated ? 3 : 2; }  // after the mask there

// The convolution's attributes, checked (every value below 2^31, which keeps every later
// product of an attribute and a tensor dim inside int64).
struct ConvAttributes {
  ConvAttributes(const Attributes& attrs, Layout layout);
  std::array<int64_t, 2> stride, padding, dilation;
  int64_t groups, deform_groups;
};

struct Geometry {
  int64_t batch, channels, height, width, out_channels, kernel_h, kernel_w, out_h, out_w;
};

// The sizes of input, offset and weight, checked against each other and the attributes.
Geometry CheckShapes(const ConvAttributes& conv, const Shape& input, const Shape& offset, const Shape& weight);

// The mask of a layout with one (of a KernelIO or a device::DeviceIO), checked, or null.
template <Layout kLayout, typename T, typename IO>
const T* MaskInput(const IO& io, const Geometry& g, const ConvAttributes& conv) {
  if constexpr (!HasMask(kLayout)) {
    return nullptr;
  } else {
    constexpr size_t kIndex = kLayout == Layout::kOrtops ? 4 : 2;
    const ConstTensor<T> m = io.template Input<T>(kIndex);
    if (kLayout == Layout::kOrtops && m.shape == Shape{0}) return nullptr;
    const Shape expected{g.batch, conv.deform_groups * g.kernel_h * g.kernel_w, g.out_h, g.out_w};
    Check(m.shape == expected, "input 'mask' must have shape ", ShapeText{expected},
          kLayout == Layout::kOrtops ? " ([N, deform_groups * kh * kw, H_out, W_out]) or [0], got "
                                     : " ([N, deform_groups * kh * kw, H_out, W_out]), got ",
          ShapeText{m.shape});
    return m.data;
  }
}

// The bias of a layout with one, checked, or null (none given, or the empty form).
template <Layout kLayout, typename T, typename IO>
const T* BiasInput(const IO& io, const Geometry& g) {
  if constexpr (!HasMask(kLayout)) {
    return nullptr;
  } else {
    constexpr size_t kIndex = kLayout == Layout::kOrtops ? 3 : 4;
    if (kLayout == Layout::kModulated && !io.Has(kIndex)) return nullptr;
    const ConstTensor<T> b = io.template Input<T>(kIndex);
    if (kLayout == Layout::kOrtops && b.shape == Shape{0}) return nullptr;
    Check(b.shape == Shape{g.out_channels}, "input 'bias' must have shape [", g.out_channels,
          kLayout == Layout::kOrtops ? "] (C_out) or [0], got " : "] (C_out), got ", ShapeText{b.shape});
    return b.data;
  }
}

// A node's inputs (of a KernelIO or a device::DeviceIO), their shapes checked: what the CPU
// kernel and the device kernel both start from.
template <typename T>
struct ConvInputs {
  ConstTensor<T> input, offset, weight;
  Geometry g;
  const T* mask;  // null: none
  const T* bias;  // null: none
};

template <Layout kLayout, typename T, typename IO>
ConvInputs<T> ReadConvInputs(const IO& io, const ConvAttributes& conv) {
  const ConstTensor<T> input = io.template Input<T>(0, 4);
  const ConstTensor<T> offset = io.template Input<T>(1, 4);
  const ConstTensor<T> weight = io.template Input<T>(WeightIndex(kLayout), 4);
  const Geometry g = CheckShapes(conv, input.shape, offset.shape, weight.shape);
  const T* mask = MaskInput<kLayout, T>(io, g, conv);
  return {input, offset, weight, g, mask, BiasInput<kLayout, T>(io, g)};
}

}  // namespace ortops::deform_conv
