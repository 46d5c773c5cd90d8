#pragma once

#include "core/op_kernel.h"

namespace ortops::matrix_inverse {
extern const OpSchema kSchema;
KernelFactory Make, MakeDevice;
}  // namespace ortops::matrix_inverse
