#pragma once

#include "core/custom_op.h"

namespace ortops::trt_roi_align {
extern const OpSchema kSchema;
std::vector<OpPtr> Make(const OpDef& def);
}  // namespace ortops::trt_roi_align
