// The rotated IoU of mmdeploy's two rotated NMS kernels where it departs from the exact one
// (math/rotated_box.h): for boxes of zero, negative or tiny area, which real two-stage
// exports feed to their second NMS (zero-padded first-stage rows become zero-size rois).
//
// - ONNX Runtime's NMSRotated (backend_ops/onnxruntime/nms_rotated) computes every IoU in
//   float32 by collecting edge crossings and the corners of each box inside the other, then
//   a Graham-scan hull. For a zero-size box its inside test passes for every point and the
//   union w1 h1 + w2 h2 - inter comes out 0 (or a rounding either side of it), so the IoU of
//   a point with a box anywhere is +-inf or huge, and of two points 0 / 0; boxes below a
//   square unit meet its fixed tolerances (IsProper). OrtRotatedIoU repeats that arithmetic
//   operation by operation (order, float32 roundings, the double steps the original takes),
//   as the original evaluates (kept box, candidate).
// - TensorRT's batched rotated NMS (tensorrt/common_impl/nms/allClassRotatedNMS.cu) returns
//   IoU 1 when the w * h of either box is below 1e-14: TrtRotatedTiny.
//
// Everything is templated on the element type T: float is the originals' arithmetic; double
// inputs (which ortops also takes) run the same steps in double. Includers must be compiled
// without contracting multiply-adds (CMakeLists.txt sets -ffp-contract=off on them), or the
// roundings are not the original's.
#pragma once

#include <cmath>
#include <limits>
#include <utility>

#include "core/host_device.h"

namespace ortops::mmdeploy_rotated {

// Whether the exact IoU of rotated_box.h stands for the ONNX Runtime original's: a box of
// positive sides and w * h (in T) of at least 1. The original's fixed tolerances (squared
// distances of 1e-8, cross products of 1e-6, in the units of the coordinates) move its IoU by
// about 1e-6 / area: a rounding for boxes of a square pixel and more, but not for smaller
// ones, and its inside test passes every point for a box with an edge of zero length. Pairs
// with any other box take OrtRotatedIoU.
template <typename T>
ORTOPS_HD inline bool IsProper(const T* box) {
  return box[2] > T(0) && box[3] > T(0) && box[2] * box[3] >= T(1);
}

// TensorRT's plugin: IoU 1 with every box (a NaN area is not tiny).
template <typename T>
ORTOPS_HD inline bool TrtRotatedTiny(const T* box) {
  return box[2] * box[3] < 1e-14;
}

template <typename T>
struct Point {
  T x, y;
};

template <typename T>
ORTOPS_HD inline Point<T> operator-(Point<T> a, Point<T> b) {
  return {a.x - b.x, a.y - b.y};
}

template <typename T>
ORTOPS_HD inline T Cross(Point<T> a, Point<T> b) {
  return a.x * b.y - b.x * a.y;
}

template <typename T>
ORTOPS_HD inline T Dot(Point<T> a, Point<T> b) {
  return a.x * b.x + a.y * b.y;
}

// A box as the original holds it before a pair is formed: its centre, sizes and half the
// cosine and sine of its angle, each rounded to T as the original rounds them.
template <typename T>
struct RawBox {
  T cx, cy, w, h, half_cos, half_sin;
};

template <typename T>
ORTOPS_HD inline RawBox<T> MakeRawBox(const T* box) {
  const double theta = static_cast<double>(box[4]);
  return {box[0],
          box[1],
          box[2],
          box[3],
          static_cast<T>(std::cos(theta)) * T(0.5),
          static_cast<T>(std::sin(theta)) * T(0.5)};
}

// The corners of `box` centred at (x, y), in the original's order and roundings.
template <typename T>
ORTOPS_HD inline void Corners(const RawBox<T>& box, T x, T y, Point<T> out[4]) {
  const T c = box.half_cos, s = box.half_sin;
  out[0] = {x - s * box.h - c * box.w, y + c * box.h - s * box.w};
  out[1] = {x + s * box.h - c * box.w, y - c * box.h - s * box.w};
  out[2] = {T(2) * x - out[0].x, T(2) * y - out[0].y};
  out[3] = {T(2) * x - out[1].x, T(2) * y - out[1].y};
}

// The order the original's hull sorts its points in: by turn, nearly collinear ones by
// distance (not a strict weak order, so the sorting algorithm matters).
template <typename T>
ORTOPS_HD inline bool HullBefore(Point<T> a, Point<T> b) {
  const T turn = Cross(a, b);
  if (std::abs(static_cast<double>(turn)) < 1e-6) return Dot(a, a) < Dot(b, b);
  return turn > T(0);
}

// std::sort of libstdc++ (GCC), which the original was built with, step by step: ranges of
// more than 16 elements are partitioned around a median of three (recursing on the right
// part), then the whole is insertion-sorted. With an order that is not strict weak, other
// sorts would leave other permutations. n <= 24, so the depth limit is never reached.
// libstdc++'s scans are unguarded: they stop at an element that a strict weak order puts
// there, and with this order can run past the range (on an H200, whose cosf rounds some
// degenerate boxes' corners otherwise than glibc, they did: an illegal address). Here each
// scan stops at the range's end as well; where libstdc++ stays inside, nothing changes.
template <typename T>
ORTOPS_HD inline void PartitionAsLibstdcxx(Point<T>* first, Point<T>* last) {
  while (last - first > 16) {
    Point<T>* a = first + 1;
    Point<T>* b = first + (last - first) / 2;
    Point<T>* c = last - 1;
    Point<T>* median = HullBefore(*a, *b)   ? (HullBefore(*b, *c)   ? b
                                               : HullBefore(*a, *c) ? c
                                                                    : a)
                       : HullBefore(*a, *c) ? a
                       : HullBefore(*b, *c) ? c
                                            : b;
    std::swap(*first, *median);
    Point<T>* left = first + 1;
    Point<T>* right = last;
    while (true) {
      while (left < last && HullBefore(*left, *first)) ++left;
      --right;
      while (right > first && HullBefore(*first, *right)) --right;
      if (!(left < right)) break;
      std::swap(*left, *right);
      ++left;
    }
    if (left == last) return;  // every element before the pivot: the insertion sort finishes
    // libstdc++ recurses on the right part, then loops on the left. With n <= 24 at most one
    // of the two has more than 16 elements, and they are disjoint, so going on with that one
    // does the same without recursion (a recursive device function gets CUDA's default
    // 1 KiB stack, which this call chain overflowed on an H200: an illegal address).
    if (last - left > 16) {
      first = left;
    } else {
      last = left;
    }
  }
}

template <typename T>
ORTOPS_HD inline void SortAsLibstdcxx(Point<T>* first, Point<T>* last) {
  if (first == last) return;
  PartitionAsLibstdcxx(first, last);
  // Insertion sort: guarded (a new minimum moves to the front) over the first 16, unguarded
  // after them (the partitions put a smaller element before each).
  for (Point<T>* i = first + 1; i < last; ++i) {
    const Point<T> value = *i;
    Point<T>* hole = i;
    if (i - first < 16 && HullBefore(value, *first)) {
      for (; hole > first; --hole) *hole = *(hole - 1);
    } else {
      for (; hole > first && HullBefore(value, *(hole - 1)); --hole) *hole = *(hole - 1);
    }
    *hole = value;
  }
}

// The original's area of the convex hull of p[0..n), n >= 3 (p is reordered).
template <typename T>
ORTOPS_HD inline T HullArea(Point<T>* p, int n) {
  int lowest = 0;
  for (int i = 1; i < n; ++i) {
    if (p[i].y < p[lowest].y || (p[i].y == p[lowest].y && p[i].x < p[lowest].x)) lowest = i;
  }
  const Point<T> start = p[lowest];
  for (int i = 0; i < n; ++i) p[i] = p[i] - start;
  std::swap(p[0], p[lowest]);
  SortAsLibstdcxx(p + 1, p + n);
  int second = 1;
  while (second < n && !(Dot(p[second], p[second]) > 1e-8)) ++second;
  if (second == n) return T(0);  // every point at the start: a hull of one point
  p[1] = p[second];
  int m = 2;
  for (int i = second + 1; i < n; ++i) {
    while (m > 1 && Cross(p[i] - p[m - 2], p[m - 1] - p[m - 2]) >= T(0)) --m;
    p[m++] = p[i];
  }
  if (m <= 2) return T(0);
  // The original's accumulator is T, but the absolute value it adds is a double (fabs).
  T twice = T(0);
  for (int i = 1; i < m - 1; ++i) {
    twice =
        static_cast<T>(static_cast<double>(twice) + std::abs(static_cast<double>(Cross(p[i] - p[0], p[i + 1] - p[0]))));
  }
  return static_cast<T>(static_cast<double>(twice) / 2.0);
}

// The original's intersection area of two rectangles given by their corners.
template <typename T>
ORTOPS_HD inline T IntersectionArea(const Point<T> (&a)[4], const Point<T> (&b)[4]) {
  Point<T> edge_a[4], edge_b[4];
  for (int i = 0; i < 4; ++i) {
    edge_a[i] = a[(i + 1) % 4] - a[i];
    edge_b[i] = b[(i + 1) % 4] - b[i];
  }
  Point<T> points[24];
  int n = 0;
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      const T det = Cross(edge_b[j], edge_a[i]);
      if (std::abs(static_cast<double>(det)) <= 1e-14) continue;  // parallel
      const Point<T> between = b[j] - a[i];
      const T t_a = Cross(edge_b[j], between) / det;
      const T t_b = Cross(edge_a[i], between) / det;
      if (t_a >= T(0) && t_a <= T(1) && t_b >= T(0) && t_b <= T(1)) {
        points[n++] = {a[i].x + edge_a[i].x * t_a, a[i].y + edge_a[i].y * t_a};
      }
    }
  }
  // Corners of one rectangle within the other: projections onto its edges from corner 0
  // within those edges' lengths (a rectangle with a zero-length edge passes every point).
  const auto add_inside = [&](const Point<T>(&corners)[4], const Point<T>(&rect)[4], const Point<T>(&edges)[4]) {
    const T along_sq = Dot(edges[0], edges[0]), across_sq = Dot(edges[3], edges[3]);
    for (int i = 0; i < 4; ++i) {
      const Point<T> offset = corners[i] - rect[0];
      const T along = Dot(offset, edges[0]), across = -Dot(offset, edges[3]);
      if (along >= T(0) && across >= T(0) && along <= along_sq && across <= across_sq) points[n++] = corners[i];
    }
  };
  add_inside(a, b, edge_b);
  add_inside(b, a, edge_a);
  if (n <= 2) return T(0);
  return HullArea(points, n);
}

// mmdeploy's ONNX Runtime NMSRotated: the IoU of `kept` with `candidate`, both centred about
// their mean centre first, as the original does (in double, rounded back to T).
template <typename T>
ORTOPS_HD inline T OrtRotatedIoU(const RawBox<T>& kept, const RawBox<T>& candidate) {
  // Two boxes of zero sides: every corner is its centre, every edge of length 0, so no edges
  // cross, all eight corners pass the inside tests, the hull of two points has area 0 and
  // the IoU is 0 / 0, wherever they are (a shortcut of the steps below, not a departure).
  if (kept.w == T(0) && kept.h == T(0) && candidate.w == T(0) && candidate.h == T(0)) {
    return std::numeric_limits<T>::quiet_NaN();
  }
  const double shift_x = static_cast<double>(kept.cx + candidate.cx) / 2.0;
  const double shift_y = static_cast<double>(kept.cy + candidate.cy) / 2.0;
  Point<T> a[4], b[4];
  Corners(kept, static_cast<T>(kept.cx - shift_x), static_cast<T>(kept.cy - shift_y), a);
  Corners(candidate, static_cast<T>(candidate.cx - shift_x), static_cast<T>(candidate.cy - shift_y), b);
  const T inter = IntersectionArea(a, b);
  const T union_area = kept.w * kept.h + candidate.w * candidate.h - inter;
  return inter / union_area;
}

}  // namespace ortops::mmdeploy_rotated
