#pragma once

#include "core/op_kernel.h"

namespace ortops::gather_topk {
extern const OpSchema kSchema;  // mmdeploy GatherTopk
std::vector<OpPtr> Make(const OpDef& def);
}  // namespace ortops::gather_topk
