#pragma once

#include "core/custom_op.h"

namespace ortops::trt_efficient_nms {
extern const OpSchema kSchema;
std::vector<OpPtr> Make(const OpDef& def);
}  // namespace ortops::trt_efficient_nms
