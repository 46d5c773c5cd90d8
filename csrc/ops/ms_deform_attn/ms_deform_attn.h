#pragma once

#include "core/custom_op.h"

namespace ortops::ms_deform_attn {
extern const OpSchema kSchema;          // ortops::MultiScaleDeformableAttention
extern const OpSchema kMmdeploySchema;  // mmdeploy::MMCVMultiScaleDeformableAttention
std::vector<OpPtr> Make(const OpDef& def);
std::vector<OpPtr> MakeMmdeploy(const OpDef& def);
}  // namespace ortops::ms_deform_attn
