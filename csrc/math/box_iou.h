// Intersection over union of axis-aligned boxes, with the arithmetic of mmcv and
// torchvision (same operation order, so float results agree to the last bit).
#pragma once

#include <algorithm>

namespace ortops {

// Box (x1, y1, x2, y2). `offset` is mmcv's legacy +1 pixel convention (0 or 1).
template <typename T>
inline T BoxArea(const T* box, T offset) {
  return (box[2] - box[0] + offset) * (box[3] - box[1] + offset);
}

// Whether a and b overlap with positive width and height, in BoxIoU's arithmetic: when
// not, BoxIoU's intersection is exactly 0.
template <typename T>
inline bool BoxesIntersect(const T* a, const T* b, T offset) {
  return std::min(a[2], b[2]) - std::max(a[0], b[0]) + offset > 0 &&
         std::min(a[3], b[3]) - std::max(a[1], b[1]) + offset > 0;
}

// IoU of a and b given their precomputed areas. 0/0 (two empty boxes) gives NaN, which
// compares false against every threshold, as in the originals.
template <typename T>
inline T BoxIoU(const T* a, T area_a, const T* b, T area_b, T offset) {
  const T left = std::max(a[0], b[0]);
  const T top = std::max(a[1], b[1]);
  const T right = std::min(a[2], b[2]);
  const T bottom = std::min(a[3], b[3]);
  const T width = std::max(T(0), right - left + offset);
  const T height = std::max(T(0), bottom - top + offset);
  const T inter = width * height;
  return inter / (area_a + area_b - inter);
}

}  // namespace ortops

namespace ortops {

// IoU as mmdeploy's NMSMatch computes it: no offset, 1e-10 added to the union in double
// precision (the original adds a double literal to a float expression), and the quotient
// rounded to float (the original's return type), which is what its float threshold is
// compared with: an IoU equal to the threshold, less the 1e-10, still reaches it.
template <typename T>
inline float MatchIoU(const T* a, const T* b) {
  const T width = std::max(T(0), std::min(a[2], b[2]) - std::max(a[0], b[0]));
  const T height = std::max(T(0), std::min(a[3], b[3]) - std::max(a[1], b[1]));
  const T area_a = (a[2] - a[0]) * (a[3] - a[1]);
  const T area_b = (b[2] - b[0]) * (b[3] - b[1]);
  const T inter = width * height;
  return static_cast<float>(static_cast<double>(inter) / (static_cast<double>(area_a + area_b - inter) + 1e-10));
}

}  // namespace ortops

namespace ortops {

// IoU as the detection-output NMS of TensorRT's batchedNMSPlugin computes it (jaccardOverlap,
// which mmdeploy's TRTBatchedNMS inherits), with its offset 0: 0 unless the boxes overlap with
// positive width and height, and an inverted box (x2 < x1 or y2 < y1) has area 0. `kept` and
// `candidate` in the original's operand order. A NaN coordinate gives 0 or NaN.
template <typename T>
inline T DetectionOutputIoU(const T* kept, const T* candidate) {
  const T width = std::min(kept[2], candidate[2]) - std::max(kept[0], candidate[0]);
  const T height = std::min(kept[3], candidate[3]) - std::max(kept[1], candidate[1]);
  if (!(width > 0 && height > 0)) return T(0);
  const auto area = [](const T* box) {
    return box[2] < box[0] || box[3] < box[1] ? T(0) : (box[2] - box[0]) * (box[3] - box[1]);
  };
  const T inter = width * height;
  return inter / (area(kept) + area(candidate) - inter);
}

}  // namespace ortops
