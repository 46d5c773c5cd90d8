// Multi-class batched NMS with fixed-size outputs: ortops' BatchedNMS, and mmdeploy's
// TensorRT nodes TRTBatchedNMS and TRTBatchedRotatedNMS. All run the selection of
// math/multiclass_nms.h; they differ in their score test, IoU and output encoding.
#pragma once

#include <cstdint>

#include "core/custom_op.h"

namespace ortops::batched_nms {

// Fails unless `attribute` is 0 or 1.
inline void CheckFlag(int64_t value, const char* attribute) {
  Check(value == 0 || value == 1, "attribute '", attribute, "' must be 0 or 1, got ", value);
}

extern const OpSchema kSchema;  // ortops::BatchedNMS
KernelFactory Make, MakeDevice;

extern const OpSchema kTrtSchema;  // mmdeploy::TRTBatchedNMS
KernelFactory MakeTrt, MakeTrtDevice;

extern const OpSchema kTrtRotatedSchema;  // mmdeploy::TRTBatchedRotatedNMS
KernelFactory MakeTrtRotated, MakeTrtRotatedDevice;

}  // namespace ortops::batched_nms
