#pragma once

#include "core/op_kernel.h"

namespace ortops::multi_level_roi_align {
// ortops::MultiLevelRoIAlign: mmdet's SingleRoIExtractor over RoIAlign as one node.
extern const OpSchema kSchema;
std::vector<OpPtr> Make(const OpDef& def);
std::vector<OpPtr> MakeDevice(const OpDef& def);
// mmdeploy::MMCVMultiLevelRoiAlign: mmdeploy's TensorRT plugin of the same.
extern const OpSchema kMmdeploySchema;
std::vector<OpPtr> MakeMmdeploy(const OpDef& def);
std::vector<OpPtr> MakeMmdeployDevice(const OpDef& def);
// mmdeploy::MMCVMultiLevelRotatedRoiAlign: mmdeploy's TensorRT plugin for mmrotate's
// RotatedSingleRoIExtractor over RoIAlignRotated.
extern const OpSchema kMmdeployRotatedSchema;
std::vector<OpPtr> MakeMmdeployRotated(const OpDef& def);
std::vector<OpPtr> MakeMmdeployRotatedDevice(const OpDef& def);
}  // namespace ortops::multi_level_roi_align
