// Geometry of rotated rectangles: corners, area, and the exact area of the intersection of
// two of them, for NMSRotated and the rotated-IoU ops.
//
// Conventions
// - A rotated box is (cx, cy, w, h, theta), theta in radians, in image coordinates (x right,
//   y down). Its corners are (cx, cy) + R(theta) (+-w/2, +-h/2), R(theta) = [[cos, -sin],
//   [sin, cos]] (mmcv / mmdeploy / mmrotate "le90"-style radians; no degree conversion).
// - Everything is computed in double, whatever the input element type.
// - A box with w <= 0 or h <= 0 is empty: area 0, intersection 0, IoU 0 with every box
//   (never NaN), so degenerate detections neither suppress nor get suppressed by overlap.
//
// Usage: build a RotatedRect once per box (corners, area and bounds are precomputed), then
// call RotatedIntersectionArea / RotatedIoU for as many pairs as needed. Corners are stored
// relative to the box's own centre, and a pair is evaluated in the first box's frame, so two
// nearby boxes far from the origin lose no precision to cancellation.
#pragma once

#include <algorithm>
#include <cmath>

#include "core/host_device.h"

namespace ortops {

struct Point2 {
  double x, y;
};

// Twice the signed area of the triangle (o, a, b): positive when o -> a -> b turns
// counter-clockwise in a y-up frame (clockwise on screen, y down).
ORTOPS_HD inline double Cross(Point2 o, Point2 a, Point2 b) {
  return (a.x - o.x) * (b.y - o.y) - (a.y - o.y) * (b.x - o.x);
}

// Signed shoelace area of the polygon p[0..n).
ORTOPS_HD inline double SignedPolygonArea(const Point2* p, int n) {
  double twice = 0;
  for (int i = 0; i < n; ++i) {
    const Point2 a = p[i], b = p[(i + 1) % n];
    twice += a.x * b.y - b.x * a.y;
  }
  return twice / 2;
}

// Offsets of the four corners from the centre, in order around the rectangle:
// R(theta) applied to (-w/2, -h/2), (w/2, -h/2), (w/2, h/2), (-w/2, h/2).
ORTOPS_HD inline void RotatedCornerOffsets(double w, double h, double theta, Point2 out[4]) {
  const double c = std::cos(theta), s = std::sin(theta);
  const double dx[4] = {-w / 2, w / 2, w / 2, -w / 2}, dy[4] = {-h / 2, -h / 2, h / 2, h / 2};
  for (int i = 0; i < 4; ++i) out[i] = {c * dx[i] - s * dy[i], s * dx[i] + c * dy[i]};
}

// A rotated box prepared for many pairwise tests.
struct RotatedRect {
  Point2 center;
  Point2 offsets[4];              // corners minus center, counter-clockwise in a y-up frame; all 0 when empty
  double half_x = 0, half_y = 0;  // half extents of the axis-aligned bounding box
  double area = 0;                // w * h, or 0 when empty
  ORTOPS_HD bool empty() const { return area <= 0; }
};

// `box` points at (cx, cy, w, h, theta) of any arithmetic type.
template <typename T>
ORTOPS_HD inline RotatedRect MakeRotatedRect(const T* box) {
  RotatedRect rect;
  rect.center = {static_cast<double>(box[0]), static_cast<double>(box[1])};
  const double w = static_cast<double>(box[2]), h = static_cast<double>(box[3]);
  if (!(w > 0 && h > 0)) {  // also catches NaN: empty, every offset stays 0
    for (Point2& p : rect.offsets) p = {0, 0};
    return rect;
  }
  const double theta = static_cast<double>(box[4]);
  RotatedCornerOffsets(w, h, theta, rect.offsets);
  // w, h > 0 and R is a rotation, so the order above is counter-clockwise (y-up): no flip needed.
  const double c = std::abs(std::cos(theta)), s = std::abs(std::sin(theta));
  rect.half_x = (c * w + s * h) / 2;
  rect.half_y = (s * w + c * h) / 2;
  rect.area = w * h;
  return rect;
}

// Exact area of the intersection of two rotated rectangles: `a` clipped by the four edge
// half-planes of `b` in turn (Sutherland-Hodgman), in a's frame, then the shoelace formula.
// Robust for identical boxes, shared or touching edges, containment and nearly parallel
// edges: each clip only evaluates which side of a line a point lies on and interpolates
// between a point on each side, so no line-line solve can blow up. The result is clamped to
// [0, min(area_a, area_b)].
ORTOPS_HD inline double RotatedIntersectionArea(const RotatedRect& a, const RotatedRect& b) {
  if (a.empty() || b.empty()) return 0;
  const double dx = b.center.x - a.center.x, dy = b.center.y - a.center.y;
  // Cheap reject: axis-aligned bounding boxes that do not overlap (touching gives area 0).
  if (std::abs(dx) >= a.half_x + b.half_x || std::abs(dy) >= a.half_y + b.half_y) return 0;

  Point2 clip[4];
  for (int i = 0; i < 4; ++i) clip[i] = {dx + b.offsets[i].x, dy + b.offsets[i].y};
  // Every clip emits at most two points per input edge, so 4 * 2^4 bounds the polygon even
  // when rounding makes it slightly non-convex (exactly convex input only grows by one).
  constexpr int kCapacity = 64;
  Point2 buffers[2][kCapacity];
  for (int i = 0; i < 4; ++i) buffers[0][i] = a.offsets[i];
  int count = 4, current = 0;
  for (int edge = 0; edge < 4 && count > 0; ++edge) {
    const Point2 from = clip[edge], to = clip[(edge + 1) % 4];
    const Point2* in = buffers[current];
    Point2* out = buffers[1 - current];
    int kept = 0;
    for (int i = 0; i < count; ++i) {
      const Point2 p = in[i], q = in[(i + 1) % count];
      // b is counter-clockwise (y-up), so its inside is to the left of each edge: Cross >= 0.
      const double side_p = Cross(from, to, p), side_q = Cross(from, to, q);
      if (side_p >= 0) out[kept++] = p;
      if ((side_p >= 0) != (side_q >= 0)) {
        const double t = side_p / (side_p - side_q);  // the sides differ in sign: never 0 / 0
        out[kept++] = {p.x + t * (q.x - p.x), p.y + t * (q.y - p.y)};
      }
    }
    count = kept;
    current = 1 - current;
  }
  if (count < 3) return 0;
  const double area = std::abs(SignedPolygonArea(buffers[current], count));
  return std::min(area, std::min(a.area, b.area));
}

// Intersection over union in [0, 1]; 0 when either box is empty, never NaN (areas that
// overflow double, from float64 sizes near 1e154 and up, also give 0).
ORTOPS_HD inline double RotatedIoU(const RotatedRect& a, const RotatedRect& b) {
  const double inter = RotatedIntersectionArea(a, b);
  if (!(inter > 0)) return 0;
  const double iou = inter / (a.area + b.area - inter);
  return std::isfinite(iou) ? std::min(iou, 1.0) : 0;
}

}  // namespace ortops
