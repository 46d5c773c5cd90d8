#pragma once

#include "core/op_kernel.h"

namespace ortops::multi_level_roi_align {
// ortops::MultiLevelRoIAlign: mmdet's SingleRoIExtractor over RoIAlign as one node.
extern const OpSchema kSchema;
KernelFactory Make, MakeDevice;
// ortops::RoIAlignByLevel: the same pooling with each roi's level given (torchvision's
// MultiScaleRoIAlign after its LevelMapper).
extern const OpSchema kByLevelSchema;
KernelFactory MakeByLevel, MakeByLevelDevice;
// mmdeploy::MMCVMultiLevelRoiAlign: mmdeploy's TensorRT plugin of the same.
extern const OpSchema kMmdeploySchema;
KernelFactory MakeMmdeploy, MakeMmdeployDevice;
// mmdeploy::MMCVMultiLevelRotatedRoiAlign: mmdeploy's TensorRT plugin for mmrotate's
// RotatedSingleRoIExtractor over RoIAlignRotated.
extern const OpSchema kMmdeployRotatedSchema;
KernelFactory MakeMmdeployRotated, MakeMmdeployRotatedDevice;
}  // namespace ortops::multi_level_roi_align
