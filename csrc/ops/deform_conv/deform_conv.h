#pragma once

#include "core/op_kernel.h"

namespace ortops::deform_conv {
extern const OpSchema kModulatedSchema;  // mmcv / mmdeploy MMCVModulatedDeformConv2d
extern const OpSchema kV1Schema;         // mmcv MMCVDeformConv2d
extern const OpSchema kMmdeploySchema;   // mmdeploy MMCVDeformConv2d (four padding values)
extern const OpSchema kSchema;           // ortops DeformConv2d
KernelFactory MakeModulated, MakeV1, MakeMmdeployV1, Make;
// The device kernels of the same nodes (deform_conv.cu).
KernelFactory MakeModulatedDevice, MakeV1Device, MakeMmdeployV1Device, MakeDevice;
}  // namespace ortops::deform_conv
