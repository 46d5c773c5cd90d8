#pragma once

#include "core/op_kernel.h"

namespace ortops::scaled_dot_product_attention {
extern const OpSchema kSchema;  // mmdeploy ScaledDotProductAttentionTRT
KernelFactory Make;
std::vector<OpPtr> MakeDevice(const OpDef& def);  // its device kernel (scaled_dot_product_attention.cu)
}  // namespace ortops::scaled_dot_product_attention
