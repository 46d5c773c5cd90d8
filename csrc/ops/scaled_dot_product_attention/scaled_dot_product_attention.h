#pragma once

#include "core/custom_op.h"

namespace ortops::scaled_dot_product_attention {
extern const OpSchema kSchema;  // mmdeploy ScaledDotProductAttentionTRT
std::vector<OpPtr> Make(const OpDef& def);
}  // namespace ortops::scaled_dot_product_attention
