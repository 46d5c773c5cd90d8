#pragma once

#include "core/custom_op.h"

namespace ortops::roi_align_rotated {
extern const OpSchema kSchema;
std::vector<OpPtr> Make(const OpDef& def);
}  // namespace ortops::roi_align_rotated
