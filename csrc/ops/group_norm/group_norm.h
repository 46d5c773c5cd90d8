#pragma once

#include "core/custom_op.h"

namespace ortops::group_norm {
extern const OpSchema kSchema;              // ortops GroupNorm
extern const OpSchema kInstanceNormSchema;  // mmdeploy TRTInstanceNormalization
std::vector<OpPtr> Make(const OpDef& def);
std::vector<OpPtr> MakeInstanceNorm(const OpDef& def);
}  // namespace ortops::group_norm
