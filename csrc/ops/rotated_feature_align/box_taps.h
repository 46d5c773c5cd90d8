// Where rotated feature alignment samples for one pixel, shared by the CPU kernel and the
// device path (ORTOPS_HD), which therefore compute the same taps.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"
#include "math/bilinear.h"

namespace ortops::rotated_feature_align {

// The bilinear taps (RoIAlign's rule) of one pixel's box on a height x width map, in mmcv's
// order and arithmetic: the box's centre, then with 5 points its corners. `box` is
// (x, y, w, h, angle), or (y, x, w, h, angle) when `y_first`; `taps` holds `points` taps.
template <typename T>
ORTOPS_HD void BoxTaps(const T* box, T scale, bool y_first, int64_t points, int64_t height, int64_t width,
                       BilinearTap<T>* taps) {
  const T roi_y = (y_first ? box[0] : box[1]) * scale;
  const T roi_x = (y_first ? box[1] : box[0]) * scale;
  taps[0] = RoiAlignTap(roi_y, roi_x, height, width);
  if (points == 1) return;
  const T roi_w = box[2] * scale, roi_h = box[3] * scale, angle = box[4];
  const T half_w = roi_w / 2, half_h = roi_h / 2;
  const T cos_a = std::cos(angle), sin_a = std::sin(angle);
  const T wx = cos_a * half_w, wy = sin_a * half_w;
  const T hx = -sin_a * half_h, hy = cos_a * half_h;
  taps[1] = RoiAlignTap(roi_y + wy + hy, roi_x + wx + hx, height, width);
  taps[2] = RoiAlignTap(roi_y - wy + hy, roi_x - wx + hx, height, width);
  taps[3] = RoiAlignTap(roi_y - wy - hy, roi_x - wx - hx, height, width);
  taps[4] = RoiAlignTap(roi_y + wy - hy, roi_x + wx - hx, height, width);
}

}  // namespace ortops::rotated_feature_align
