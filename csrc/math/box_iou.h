// Intersection over union of axis-aligned boxes, with the arithmetic of mmcv and
// torchvision (same operation order, so float results agree to the last bit), of mmdeploy's
// NMSMatch and of TensorRT's NMS plugins.
#pragma once

#include <algorithm>
#include <cmath>

#include "core/host_device.h"
#include "core/isa.h"

// The functions are in the instruction-set level's inline namespace (core/isa.h): the NMS
// suppression scan (ops/nms/suppress_simd.cc) is compiled per level with them.
namespace ortops {
inline namespace ORTOPS_ISA_NS {

// Box (x1, y1, x2, y2). `offset` is mmcv's legacy +1 pixel convention (0 or 1).
template <typename T>
ORTOPS_HD inline T BoxArea(const T* box, T offset) {
  return (box[2] - box[0] + offset) * (box[3] - box[1] + offset);
}

// Whether a and b overlap with positive width and height, in BoxIoU's arithmetic: when
// not, BoxIoU's intersection is exactly 0.
template <typename T>
ORTOPS_HD inline bool BoxesIntersect(const T* a, const T* b, T offset) {
  return std::min(a[2], b[2]) - std::max(a[0], b[0]) + offset > 0 &&
         std::min(a[3], b[3]) - std::max(a[1], b[1]) + offset > 0;
}

// IoU of a (a_x1, a_y1, a_x2, a_y2) and b given their precomputed areas. 0/0 (two empty
// boxes) gives NaN, which compares false against every threshold, as in the originals.
// Taking coordinates one by one lets a loop over boxes stored one array per coordinate
// vectorise it (the operand order of each min and max is kept, so NaN and -0 pick alike).
template <typename T>
ORTOPS_HD inline T BoxIoU(T a_x1, T a_y1, T a_x2, T a_y2, T area_a, T b_x1, T b_y1, T b_x2, T b_y2, T area_b,
                          T offset) {
  const T left = std::max(a_x1, b_x1);
  const T top = std::max(a_y1, b_y1);
  const T right = std::min(a_x2, b_x2);
  const T bottom = std::min(a_y2, b_y2);
  const T width = std::max(T(0), right - left + offset);
  const T height = std::max(T(0), bottom - top + offset);
  const T inter = width * height;
  return inter / (area_a + area_b - inter);
}

template <typename T>
ORTOPS_HD inline T BoxIoU(const T* a, T area_a, const T* b, T area_b, T offset) {
  return BoxIoU(a[0], a[1], a[2], a[3], area_a, b[0], b[1], b[2], b[3], area_b, offset);
}

// BoxIoU(...) > threshold, the same answer for every input, without the division where the
// boxes do not overlap (most pairs, where a GPU tests them all): an intersection of 0 gives
// 0 / union, which is 0 (compared as such) unless the union is 0 or NaN (then NaN: false).
template <typename T>
ORTOPS_HD inline bool BoxIoUAbove(T a_x1, T a_y1, T a_x2, T a_y2, T area_a, T b_x1, T b_y1, T b_x2, T b_y2, T area_b,
                                  T offset, T threshold) {
  const T width = std::max(T(0), std::min(a_x2, b_x2) - std::max(a_x1, b_x1) + offset);
  const T height = std::max(T(0), std::min(a_y2, b_y2) - std::max(a_y1, b_y1) + offset);
  const T inter = width * height;
  const T union_area = area_a + area_b - inter;
  if (inter == T(0)) return union_area == union_area && union_area != T(0) && T(0) > threshold;
  return inter / union_area > threshold;
}

}  // namespace ORTOPS_ISA_NS
}  // namespace ortops

namespace ortops {
inline namespace ORTOPS_ISA_NS {

// IoU as mmdeploy's NMSMatch computes it: no offset, 1e-10 added to the union in double
// precision (the original adds a double literal to a float expression), and the quotient
// rounded to float (the original's return type), which is what its float threshold is
// compared with: an IoU equal to the threshold, less the 1e-10, still reaches it. Areas are
// (x2 - x1) * (y2 - y1), given (a loop over many pairs computes each once).
template <typename T>
ORTOPS_HD inline float MatchIoU(T a_x1, T a_y1, T a_x2, T a_y2, T area_a, T b_x1, T b_y1, T b_x2, T b_y2, T area_b) {
  const T width = std::max(T(0), std::min(a_x2, b_x2) - std::max(a_x1, b_x1));
  const T height = std::max(T(0), std::min(a_y2, b_y2) - std::max(a_y1, b_y1));
  const T inter = width * height;
  return static_cast<float>(static_cast<double>(inter) / (static_cast<double>(area_a + area_b - inter) + 1e-10));
}

template <typename T>
ORTOPS_HD inline T MatchArea(const T* box) {
  return (box[2] - box[0]) * (box[3] - box[1]);
}

template <typename T>
ORTOPS_HD inline float MatchIoU(const T* a, const T* b) {
  return MatchIoU(a[0], a[1], a[2], a[3], MatchArea(a), b[0], b[1], b[2], b[3], MatchArea(b));
}

}  // namespace ORTOPS_ISA_NS
}  // namespace ortops

namespace ortops {
inline namespace ORTOPS_ISA_NS {

// The IoUs of the TensorRT plugins below are written without branches (each test a select),
// so that a loop over many kept boxes one array per coordinate vectorises them
// (ops/nms/suppress_simd.cc); the pointer and struct forms are for single pairs.

// IoU as the detection-output NMS of TensorRT's batchedNMSPlugin computes it (jaccardOverlap,
// which mmdeploy's TRTBatchedNMS inherits), with its offset 0: 0 unless the boxes overlap with
// positive width and height, and an inverted box (x2 < x1 or y2 < y1) has area 0
// (DetectionOutputArea). `kept` and `candidate` in the original's operand order. A NaN
// coordinate gives 0 or NaN.
template <typename T>
ORTOPS_HD inline T DetectionOutputArea(const T* box) {
  return box[2] < box[0] || box[3] < box[1] ? T(0) : (box[2] - box[0]) * (box[3] - box[1]);
}

template <typename T>
ORTOPS_HD inline T DetectionOutputIoU(T k_x1, T k_y1, T k_x2, T k_y2, T area_k, T c_x1, T c_y1, T c_x2, T c_y2,
                                      T area_c) {
  const T width = std::min(k_x2, c_x2) - std::max(k_x1, c_x1);
  const T height = std::min(k_y2, c_y2) - std::max(k_y1, c_y1);
  const T inter = width * height;
  const T iou = inter / (area_k + area_c - inter);
  return (width > T(0)) & (height > T(0)) ? iou : T(0);
}

template <typename T>
ORTOPS_HD inline T DetectionOutputIoU(const T* kept, const T* candidate) {
  return DetectionOutputIoU(kept[0], kept[1], kept[2], kept[3], DetectionOutputArea(kept), candidate[0], candidate[1],
                            candidate[2], candidate[3], DetectionOutputArea(candidate));
}

// v clamped to [0, 1] as TensorRT's and mmdeploy's CUDA kernels clamp boxes, fmaxf(fminf(v, 1), 0):
// NaN becomes 1. The NaN is handled first and explicitly: nvcc compiles that min and max against
// 1 and 0 into one saturating add (FADD.SAT in the SASS for sm_90), which turns NaN into 0
// (seen on an H200).
template <typename T>
ORTOPS_HD inline T ClampToUnitAsCuda(T value) {
  if (value != value) return T(1);
  return std::fmax(std::fmin(value, T(1)), T(0));
}

// IoU as TensorRT's BatchedNMS_TRT plugin computes it (allClassNMS.cu since TensorRT 7.1,
// Caffe semantics since 8.2), in float. Unlike DetectionOutputIoU above (the older kernel
// mmdeploy's TRTBatchedNMS kept), each box's corners are sorted first and pixel boxes count
// one more pixel per side. Boxes are (x1, y1, x2, y2) with the corners in either order; min
// and max are CUDA's fminf / fmaxf, which ignore a NaN operand (std::fmin / std::fmax do too).

// A box with its corners sorted per axis (xmin, ymin, xmax, ymax) and its size.
struct TrtBatchedBox {
  float corner[4];
  float size;
};

// `pixel_sizes`: not normalized, so a box's width and height each count one more pixel.
// (The original adds this 1 to the sizes whenever the boxes are not normalized; to the
// intersection only with Caffe semantics as well.)
ORTOPS_HD inline TrtBatchedBox SortTrtBatchedBox(const float* box, bool pixel_sizes) {
  TrtBatchedBox s;
  s.corner[0] = std::fmin(box[0], box[2]);
  s.corner[1] = std::fmin(box[1], box[3]);
  s.corner[2] = std::fmax(box[0], box[2]);
  s.corner[3] = std::fmax(box[1], box[3]);
  if (s.corner[2] < s.corner[0] || s.corner[3] < s.corner[1]) {
    s.size = 0.0f;
  } else {
    const float width = s.corner[2] - s.corner[0];
    const float height = s.corner[3] - s.corner[1];
    s.size = pixel_sizes ? (width + 1.0f) * (height + 1.0f) : width * height;
  }
  return s;
}

// `plus`: 1 with Caffe semantics on unnormalized boxes, where the intersection's width and
// height get +1 (even for disjoint boxes, whose intersection is the empty box [0, 0, 0, 0]:
// their IoU is then 1 / (size_a + size_b - 1), not 0); else 0. `kFinite`: the coordinates are
// known not to be NaN, so plain min / max (which vectorise) stand for fmin / fmax.
template <bool kFinite = false, typename T>
ORTOPS_HD inline T TrtBatchedIoU(T a_x1, T a_y1, T a_x2, T a_y2, T size_a, T b_x1, T b_y1, T b_x2, T b_y2, T size_b,
                                 T plus) {
  const auto larger = [](T x, T y) {
    if constexpr (kFinite) {
      return std::max(x, y);
    } else {
      return std::fmax(x, y);
    }
  };
  const auto smaller = [](T x, T y) {
    if constexpr (kFinite) {
      return std::min(x, y);
    } else {
      return std::fmin(x, y);
    }
  };
  const bool disjoint = (b_x1 > a_x2) | (b_x2 < a_x1) | (b_y1 > a_y2) | (b_y2 < a_y1);
  const T left = disjoint ? T(0) : larger(a_x1, b_x1), top = disjoint ? T(0) : larger(a_y1, b_y1);
  const T right = disjoint ? T(0) : smaller(a_x2, b_x2), bottom = disjoint ? T(0) : smaller(a_y2, b_y2);
  const T width = right - left + plus;
  const T height = bottom - top + plus;
  const T intersection = width * height;
  const T iou = intersection / (size_a + size_b - intersection);
  return (width > T(0)) & (height > T(0)) ? iou : T(0);
}

// Whether TrtBatchedIoU(a, b) > threshold, for boxes without NaN of which disjoint ones are
// known not to pass (plus 0, or 1 / (size_a + size_b - 1) <= threshold for every pair): the
// IoU of the others, computed as TrtBatchedIoU computes it, needs no selects.
template <typename T>
ORTOPS_HD inline bool TrtBatchedAbove(T a_x1, T a_y1, T a_x2, T a_y2, T size_a, T b_x1, T b_y1, T b_x2, T b_y2,
                                      T size_b, T plus, T threshold) {
  const bool disjoint = (b_x1 > a_x2) | (b_x2 < a_x1) | (b_y1 > a_y2) | (b_y2 < a_y1);
  const T width = std::min(a_x2, b_x2) - std::max(a_x1, b_x1) + plus;
  const T height = std::min(a_y2, b_y2) - std::max(a_y1, b_y1) + plus;
  const T intersection = width * height;
  const T iou = intersection / (size_a + size_b - intersection);
  return !disjoint & (width > T(0)) & (height > T(0)) & (iou > threshold);
}

ORTOPS_HD inline float TrtBatchedIoU(const TrtBatchedBox& a, const TrtBatchedBox& b, bool intersection_plus_one) {
  return TrtBatchedIoU(a.corner[0], a.corner[1], a.corner[2], a.corner[3], a.size, b.corner[0], b.corner[1],
                       b.corner[2], b.corner[3], b.size, intersection_plus_one ? 1.0f : 0.0f);
}

// IoU as TensorRT's EfficientNMS_TRT plugin computes it (efficientNMSInference.cu/.cuh), in
// float. A box is four corner coordinates (v0, v1, v2, v3): (v0, v2) on one axis, (v1, v3) on
// the other (the plugin calls them y1, x1, y2, x2 but treats x-first boxes alike). Each
// comparison is written as the original's, so NaN takes the same branches.

// Puts each axis's pair in increasing order, by the plugin's arithmetic swap
// (lo = lo - hi; hi = lo + hi; lo = hi - lo), which in float is not always an exact swap.
ORTOPS_HD inline void EfficientReorder(float* box) {
  auto order = [](float& lo, float& hi) {
    if (lo > hi) {
      lo = lo - hi;
      hi = lo + hi;
      lo = hi - lo;
    }
  };
  order(box[0], box[2]);
  order(box[1], box[3]);
}

// 0 for a box without positive extent on both axes.
template <typename T>
ORTOPS_HD inline T EfficientArea(T v0, T v1, T v2, T v3) {
  const T extent_0 = v2 - v0;
  const T extent_1 = v3 - v1;
  return (extent_0 <= T(0)) | (extent_1 <= T(0)) ? T(0) : extent_0 * extent_1;
}

ORTOPS_HD inline float EfficientArea(const float* box) { return EfficientArea(box[0], box[1], box[2], box[3]); }

// IoU of two reordered boxes given their EfficientArea: 0 when the intersection or the union
// is not positive. The plugin passes the lower-ranked box first; with NaN the order matters.
template <typename T>
ORTOPS_HD inline T EfficientIoU(T a_0, T a_1, T a_2, T a_3, T area_a, T b_0, T b_1, T b_2, T b_3, T area_b) {
  const T intersection =
      EfficientArea(a_0 > b_0 ? a_0 : b_0, a_1 > b_1 ? a_1 : b_1, a_2 < b_2 ? a_2 : b_2, a_3 < b_3 ? a_3 : b_3);
  const T union_area = area_a + area_b - intersection;
  const T iou = intersection / union_area;
  return (intersection <= T(0)) | (union_area <= T(0)) ? T(0) : iou;
}

ORTOPS_HD inline float EfficientIoU(const float* a, float area_a, const float* b, float area_b) {
  return EfficientIoU(a[0], a[1], a[2], a[3], area_a, b[0], b[1], b[2], b[3], area_b);
}

}  // namespace ORTOPS_ISA_NS
}  // namespace ortops

namespace ortops {
inline namespace ORTOPS_ISA_NS {

// ONNX NonMaxSuppression as ONNX Runtime's CPU kernel computes it (ORT 1.31, measured against
// it: tests/python/ort/test_non_max_suppression.py), in float32. Each box is first put in one
// form, (lo0, lo1, hi0, hi1) and its area (hi0 - lo0) * (hi1 - lo1):
//   center_point_box 0, (c0, c1, c2, c3) = two opposite corners: each axis's pair sorted by
//     `c_a >= c_b ? (c_b, c_a) : (c_a, c_b)` (so a NaN lands where that test puts it);
//   center_point_box 1, (x, y, w, h): (y - h / 2, x - w / 2, y + h / 2, x + w / 2), not
//     sorted (a negative width or height gives an inverted box, which overlaps nothing), the
//     area again from these corners (not w * h, which rounds differently).
template <typename T>
struct OnnxNmsBox {
  T lo0, lo1, hi0, hi1, area;
};

template <typename T>
ORTOPS_HD inline void OnnxSortedPair(T a, T b, T& lo, T& hi) {
  if (a >= b) {
    lo = b, hi = a;
  } else {
    lo = a, hi = b;
  }
}

template <typename T>
ORTOPS_HD inline OnnxNmsBox<T> MakeOnnxNmsBox(const T* box, bool center_point_box) {
  OnnxNmsBox<T> out;
  if (center_point_box) {
    const T half_width = box[2] / T(2), half_height = box[3] / T(2);
    out.lo0 = box[1] - half_height, out.hi0 = box[1] + half_height;
    out.lo1 = box[0] - half_width, out.hi1 = box[0] + half_width;
  } else {
    OnnxSortedPair(box[0], box[2], out.lo0, out.hi0);
    OnnxSortedPair(box[1], box[3], out.lo1, out.hi1);
  }
  out.area = (out.hi0 - out.lo0) * (out.hi1 - out.lo1);
  return out;
}

// Whether the kept box k suppresses the candidate c: both axes' intersections non-empty
// (written as ONNX Runtime's early exits `hi <= lo`, so NaN passes them as there), a positive
// intersection area, and intersection / (area_c + area_k - intersection) > threshold; max and
// min pick as std::max / std::min with the candidate first. Without branches, so that a loop
// over kept boxes one array per coordinate vectorises it (ops/nms/suppress_simd.cc).
//
// A box whose area is not finite (NaN or an infinite coordinate, or an overflowing product)
// never suppresses and is never suppressed, for every threshold in [0, 1] (the only ones ONNX
// Runtime takes): its union is infinite (IoU 0) or NaN. So the argument order, which only
// matters for NaN, does not change a result.
template <typename T>
ORTOPS_HD inline bool OnnxSuppresses(T c_lo0, T c_lo1, T c_hi0, T c_hi1, T c_area, T k_lo0, T k_lo1, T k_hi0, T k_hi1,
                                     T k_area, T threshold) {
  const T lo1 = c_lo1 < k_lo1 ? k_lo1 : c_lo1, hi1 = k_hi1 < c_hi1 ? k_hi1 : c_hi1;
  const T lo0 = c_lo0 < k_lo0 ? k_lo0 : c_lo0, hi0 = k_hi0 < c_hi0 ? k_hi0 : c_hi0;
  const T intersection = (hi1 - lo1) * (hi0 - lo0);
  const T iou = intersection / (c_area + k_area - intersection);
  return !(hi1 <= lo1) & !(hi0 <= lo0) & !(intersection <= T(0)) & (iou > threshold);
}

template <typename T>
ORTOPS_HD inline bool OnnxSuppresses(const OnnxNmsBox<T>& candidate, const OnnxNmsBox<T>& kept, T threshold) {
  return OnnxSuppresses(candidate.lo0, candidate.lo1, candidate.hi0, candidate.hi1, candidate.area, kept.lo0, kept.lo1,
                        kept.hi0, kept.hi1, kept.area, threshold);
}

}  // namespace ORTOPS_ISA_NS
}  // namespace ortops
