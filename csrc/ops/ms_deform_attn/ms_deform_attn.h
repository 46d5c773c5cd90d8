#pragma once

#include "core/op_kernel.h"

namespace ortops::ms_deform_attn {
extern const OpSchema kSchema;          // ortops::MultiScaleDeformableAttention
extern const OpSchema kMmdeploySchema;  // mmdeploy::MMCVMultiScaleDeformableAttention
KernelFactory Make, MakeMmdeploy;
// The device kernels of the same nodes (ms_deform_attn.cu).
KernelFactory MakeDevice, MakeMmdeployDevice;

template <bool kMmdeploy>
constexpr const OpSchema& kSchemaOf = kMmdeploy ? kMmdeploySchema : kSchema;
}  // namespace ortops::ms_deform_attn
