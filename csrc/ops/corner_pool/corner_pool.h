#pragma once

#include "core/custom_op.h"

namespace ortops::corner_pool {
extern const OpSchema kSchema;
std::vector<OpPtr> Make(const OpDef& def);
}  // namespace ortops::corner_pool
