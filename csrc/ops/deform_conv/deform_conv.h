#pragma once

#include "core/op_kernel.h"

namespace ortops::deform_conv {
extern const OpSchema kModulatedSchema;  // mmcv / mmdeploy MMCVModulatedDeformConv2d
extern const OpSchema kV1Schema;         // mmcv MMCVDeformConv2d
extern const OpSchema kMmdeploySchema;   // mmdeploy MMCVDeformConv2d (four padding values)
extern const OpSchema kSchema;           // ortops DeformConv2d
std::vector<OpPtr> MakeModulated(const OpDef& def);
std::vector<OpPtr> MakeV1(const OpDef& def);
std::vector<OpPtr> MakeMmdeployV1(const OpDef& def);
std::vector<OpPtr> Make(const OpDef& def);
// The device kernels of the same nodes (deform_conv.cu).
std::vector<OpPtr> MakeModulatedDevice(const OpDef& def);
std::vector<OpPtr> MakeV1Device(const OpDef& def);
std::vector<OpPtr> MakeMmdeployV1Device(const OpDef& def);
std::vector<OpPtr> MakeDevice(const OpDef& def);
}  // namespace ortops::deform_conv
