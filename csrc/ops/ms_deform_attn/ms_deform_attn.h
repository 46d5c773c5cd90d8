#pragma once

#include "core/op_kernel.h"

namespace ortops::ms_deform_attn {
extern const OpSchema kSchema;          // ortops::MultiScaleDeformableAttention
extern const OpSchema kMmdeploySchema;  // mmdeploy::MMCVMultiScaleDeformableAttention
std::vector<OpPtr> Make(const OpDef& def);
std::vector<OpPtr> MakeMmdeploy(const OpDef& def);
// The device kernels of the same nodes (ms_deform_attn.cu).
std::vector<OpPtr> MakeDevice(const OpDef& def);
std::vector<OpPtr> MakeMmdeployDevice(const OpDef& def);

template <bool kMmdeploy>
constexpr const OpSchema& kSchemaOf = kMmdeploy ? kMmdeploySchema : kSchema;
}  // namespace ortops::ms_deform_attn
