#pragma once

#include "core/custom_op.h"

namespace ortops::nms_match {
extern const OpSchema kSchema;
std::vector<OpPtr> Make(const OpDef& def);
}  // namespace ortops::nms_match
