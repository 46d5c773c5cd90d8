#pragma once

#include "core/custom_op.h"

namespace ortops::matrix_inverse {
extern const OpSchema kSchema;
std::vector<OpPtr> Make(const OpDef& def);
std::vector<OpPtr> MakeDevice(const OpDef& def);
}  // namespace ortops::matrix_inverse
