#pragma once

#include "core/custom_op.h"

namespace ortops::bicubic_interpolate {
extern const OpSchema kSchema;  // mmdeploy TRTBicubicInterpolate
std::vector<OpPtr> Make(const OpDef& def);
}  // namespace ortops::bicubic_interpolate
