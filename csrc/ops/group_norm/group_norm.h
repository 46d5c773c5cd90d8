#pragma once

#include "core/custom_op.h"

namespace ortops::group_norm {
extern const OpSchema kSchema;
std::vector<OpPtr> Make(const OpDef& def);
}  // namespace ortops::group_norm
