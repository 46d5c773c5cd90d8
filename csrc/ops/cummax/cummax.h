#pragma once

#include "core/custom_op.h"

namespace ortops::cummax {
extern const OpSchema kSchema;
std::vector<OpPtr> MakeMax(const OpDef& def);
std::vector<OpPtr> MakeMin(const OpDef& def);
}  // namespace ortops::cummax
