#pragma once

#include <cmath>

#include "core/custom_op.h"

namespace ortops::nms {
extern const OpSchema kSchema;
KernelFactory Make, MakeDevice;

// The attributes of an NMS node, read and checked once, as its CPU and device kernels take them.
struct NmsAttributes {
  explicit NmsAttributes(const Attributes& attrs)
      : iou_threshold(attrs.Float("iou_threshold")), offset(attrs.Int("offset")) {
    Check(offset == 0 || offset == 1, "attribute 'offset' must be 0 or 1, got ", offset);
    Check(!std::isnan(iou_threshold), "attribute 'iou_threshold' is NaN");
  }
  float iou_threshold;
  int64_t offset;
};

}  // namespace ortops::nms
