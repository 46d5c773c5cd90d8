#pragma once

#include "core/custom_op.h"

namespace ortops::gather_topk {
extern const OpSchema kSchema;  // mmdeploy GatherTopk
std::vector<OpPtr> Make(const OpDef& def);
}  // namespace ortops::gather_topk
