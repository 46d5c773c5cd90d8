#pragma once

#include "core/custom_op.h"

namespace ortops::grid_priors {
extern const OpSchema kSchema;  // mmdeploy GridPriorsTRT
std::vector<OpPtr> Make(const OpDef& def);
}  // namespace ortops::grid_priors
