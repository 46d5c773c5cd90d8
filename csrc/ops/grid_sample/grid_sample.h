#pragma once

#include "core/custom_op.h"

namespace ortops::grid_sample {
extern const OpSchema kSchema;
std::vector<OpPtr> Make(const OpDef& def);
}  // namespace ortops::grid_sample
