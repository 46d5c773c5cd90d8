// Geometry of rotated rectangles (cx, cy, w, h, theta): corners, and the exact area of the
// intersection of two of them by convex polygon clipping, in float64.
//
// Conventions (image coordinates, x right, y down): the corners are
// (cx, cy) + R(theta) (+-w/2, +-h/2) with R(theta) = [[cos, -sin], [sin, cos]].
#pragma once

#include <cmath>
#include <utility>

namespace ortops {

struct Point2 {
  double x, y;
};

inline double Cross(Point2 o, Point2 a, Point2 b) { return (a.x - o.x) * (b.y - o.y) - (a.y - o.y) * (b.x - o.x); }

// The four corners, in order around the rectangle. Callers comparing two nearby boxes far
// from the origin pass centres relative to the pair's midpoint (less cancellation).
inline void RotatedCorners(double cx, double cy, double w, double h, double theta, Point2 out[4]) {
  const double c = std::cos(theta), s = std::sin(theta);
  const double dx[4] = {-w / 2, w / 2, w / 2, -w / 2}, dy[4] = {-h / 2, -h / 2, h / 2, h / 2};
  for (int i = 0; i < 4; ++i) out[i] = {cx + c * dx[i] - s * dy[i], cy + s * dx[i] + c * dy[i]};
}

// Shoelace area, signed (positive when counter-clockwise in a y-up frame).
inline double SignedArea(const Point2* p, int n) {
  double twice = 0;
  for (int i = 0; i < n; ++i) {
    const Point2 a = p[i], b = p[(i + 1) % n];
    twice += a.x * b.y - b.x * a.y;
  }
  return twice / 2;
}

// Area of the intersection of two convex quadrilaterals: `subject` clipped by each edge of
// `clip` in turn (Sutherland-Hodgman). Either orientation is accepted; degenerate
// (zero-area) inputs give 0.
inline double QuadIntersectionArea(const Point2 subject[4], const Point2 clip_in[4]) {
  Point2 clip[4] = {clip_in[0], clip_in[1], clip_in[2], clip_in[3]};
  const double clip_area = SignedArea(clip, 4);
  if (clip_area == 0 || SignedArea(subject, 4) == 0) return 0;
  if (clip_area < 0) std::swap(clip[1], clip[3]);  // make the clipper counter-clockwise
  // Each clipping edge adds at most one vertex: 4 + 4 = 8 at most.
  Point2 buffer[2][16];
  int count = 4;
  for (int i = 0; i < 4; ++i) buffer[0][i] = subject[i];
  int current = 0;
  for (int e = 0; e < 4 && count > 0; ++e) {
    const Point2 a = clip[e], b = clip[(e + 1) % 4];
    const Point2* in = buffer[current];
    Point2* out = buffer[1 - current];
    int kept = 0;
    for (int i = 0; i < count; ++i) {
      const Point2 p = in[i], q = in[(i + 1) % count];
      const double side_p = Cross(a, b, p), side_q = Cross(a, b, q);
      if (side_p >= 0) out[kept++] = p;
      if ((side_p >= 0) != (side_q >= 0)) {
        const double t = side_p / (side_p - side_q);
        out[kept++] = {p.x + t * (q.x - p.x), p.y + t * (q.y - p.y)};
      }
    }
    count = kept;
    current = 1 - current;
  }
  return count < 3 ? 0 : std::abs(SignedArea(buffer[current], count));
}

}  // namespace ortops
