// Boxes of a batched NMS: [B, N, 4] shared by every class, or [B, N, L, size] with L = 1
// (shared) or L = C (one box per class), read per (image, box, class).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace ortops::batched_nms {

template <typename T>
struct BoxLayout {
  const T* data = nullptr;
  int64_t num_boxes = 0;
  int64_t per_class = 0;  // 1: one box per box index; C: one per (box index, class)
  int64_t size = 4;       // values per box

  ORTOPS_HD const T* At(int64_t b, int64_t n, int64_t c) const {
    return data + ((b * num_boxes + n) * per_class + (per_class == 1 ? 0 : c)) * size;
  }
};

}  // namespace ortops::batched_nms
