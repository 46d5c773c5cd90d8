#pragma once

#include "core/custom_op.h"

namespace ortops::nms_rotated {
extern const OpSchema kSchema;
std::vector<OpPtr> Make(const OpDef& def);
}  // namespace ortops::nms_rotated
