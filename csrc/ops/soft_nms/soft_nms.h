#pragma once

#include <cmath>
#include <cstdint>

#include "core/custom_op.h"
#include "core/host_device.h"
#include "math/libm_exp.h"

namespace ortops::soft_nms {
extern const OpSchema kSchema;
KernelFactory Make, MakeDevice;

// The attributes of a soft-NMS node, read and checked once, as its CPU and device kernels
// take them.
struct SoftNmsAttributes {
  explicit SoftNmsAttributes(const Attributes& attrs)
      : iou_threshold(attrs.Float("iou_threshold")),
        sigma(attrs.Float("sigma")),
        min_score(attrs.Float("min_score")),
        method(attrs.Int("method")),
        offset(attrs.Int("offset")) {
    Check(method >= 0 && method <= 2, "attribute 'method' must be 0 (naive), 1 (linear) or 2 (gaussian), got ", method);
    Check(offset == 0 || offset == 1, "attribute 'offset' must be 0 or 1, got ", offset);
    Check(method != 2 || sigma > 0, "attribute 'sigma' must be > 0 for the gaussian method, got ", sigma);
    Check(!std::isnan(iou_threshold) && !std::isnan(min_score),
          "attributes 'iou_threshold' and 'min_score' must not be NaN");
  }
  float iou_threshold, sigma, min_score;
  int64_t method, offset;
};

// The weight a box's score is multiplied by, given its IoU with the selected box, in T as
// the original computes it.
template <typename T>
struct Decay {
  int64_t method;
  T threshold, sigma;

  explicit Decay(const SoftNmsAttributes& attributes)
      : method(attributes.method),
        threshold(static_cast<T>(attributes.iou_threshold)),
        sigma(static_cast<T>(attributes.sigma)) {}

  ORTOPS_HD T Weight(T iou) const {
    switch (method) {
      case 0: return iou >= threshold ? T(0) : T(1);
      case 1: return iou >= threshold ? T(1) - iou : T(1);
      default: return LibmExp(-(iou * iou) / sigma);
    }
  }
};

}  // namespace ortops::soft_nms
