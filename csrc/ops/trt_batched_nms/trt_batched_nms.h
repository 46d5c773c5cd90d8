#pragma once

#include "core/custom_op.h"

namespace ortops::trt_batched_nms {
// BatchedNMSDynamic_TRT: num_detections [B, 1].
extern const OpSchema kSchema;
// BatchedNMS_TRT (TensorRT's implicit-batch plugin): num_detections [B].
extern const OpSchema kStaticSchema;
std::vector<OpPtr> Make(const OpDef& def);
std::vector<OpPtr> MakeStatic(const OpDef& def);
}  // namespace ortops::trt_batched_nms
