#pragma once

#include "core/custom_op.h"

namespace ortops::rotated_feature_align {
extern const OpSchema kSchema;
std::vector<OpPtr> Make(const OpDef& def);
}  // namespace ortops::rotated_feature_align
