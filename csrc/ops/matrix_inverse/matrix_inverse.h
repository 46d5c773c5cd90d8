#pragma once

#include "core/op_kernel.h"

namespace ortops::matrix_inverse {
extern const OpSchema kSchema;
std::vector<OpPtr> Make(const OpDef& def);
std::vector<OpPtr> MakeDevice(const OpDef& def);
}  // namespace ortops::matrix_inverse
