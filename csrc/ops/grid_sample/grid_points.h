// Where one grid point reads, with PyTorch's arithmetic (its scalar grid_sampler_2d): the
// point's coordinates unnormalized and padded per axis, then its bilinear or nearest taps
// inside the map, or its 4 x 4 bicubic taps. Shared by the CPU kernel's planar loops and the
// device path (ORTOPS_HD), which therefore give the same bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/host_device.h"
#include "math/cubic.h"

namespace ortops::grid_sample {

enum class Interpolation { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum class Padding { kZeros = 0, kBorder = 1, kReflection = 2 };

// Farther than this from the map, a coordinate is outside whatever the map's size; keeps
// float-to-integer conversions defined for huge finite coordinates.
inline constexpr double kFarOutside = 1e15;

template <typename T>
struct Axis {
  int64_t size;
  bool align_corners;
  Padding padding;

  ORTOPS_HD T Unnormalize(T coord) const {
    const T n = static_cast<T>(size);
    return align_corners ? ((coord + 1) / 2) * (n - 1) : ((coord + 1) * n - 1) / 2;
  }
  ORTOPS_HD T Clip(T coord) const { return std::min(static_cast<T>(size - 1), std::max(coord, T(0))); }
  // Mirrors coord into [twice_low / 2, twice_high / 2].
  ORTOPS_HD static T Reflect(T coord, int64_t twice_low, int64_t twice_high) {
    if (twice_low == twice_high) return T(0);
    const T low = static_cast<T>(twice_low) / 2, span = static_cast<T>(twice_high - twice_low) / 2;
    coord = std::abs(coord - low);
    const T extra = std::fmod(coord, span);
    const auto flips = static_cast<int64_t>(std::floor(coord / span));
    return flips % 2 == 0 ? extra + low : span - extra + low;
  }
  // PyTorch's compute_coordinates: padding applied to an unnormalized coordinate.
  ORTOPS_HD T Pad(T coord) const {
    if (padding == Padding::kBorder) return Clip(coord);
    if (padding == Padding::kReflection) {
      if (!std::isfinite(coord)) return std::numeric_limits<T>::quiet_NaN();
      coord = align_corners ? Reflect(coord, 0, 2 * (size - 1)) : Reflect(coord, -1, 2 * size - 1);
      return Clip(coord);
    }
    return coord;
  }
  ORTOPS_HD bool Inside(int64_t i) const { return i >= 0 && i < size; }
};

// Bilinear and nearest: calls tap(offset, weight) for each tap of the point (gx, gy) that lies
// inside the map, in PyTorch's summation order; false for a point whose value is NaN. A
// callback rather than a returned struct, so that the caller stores (or reads) each tap where
// it is used next, with no copy through memory in between.
template <typename A, typename Tap>
ORTOPS_HD bool LocateLinear(Interpolation mode, A gx, A gy, const Axis<A>& x_axis, const Axis<A>& y_axis, Tap&& tap) {
  if (std::isnan(gx) || std::isnan(gy)) return false;
  const A x = x_axis.Pad(x_axis.Unnormalize(gx)), y = y_axis.Pad(y_axis.Unnormalize(gy));
  if (std::isnan(x) || std::isnan(y)) return false;
  if (!(std::abs(x) < kFarOutside && std::abs(y) < kFarOutside)) return true;  // far outside: reads 0
  if (mode == Interpolation::kNearest) {
    const auto ix = static_cast<int64_t>(std::nearbyint(x)), iy = static_cast<int64_t>(std::nearbyint(y));
    if (x_axis.Inside(ix) && y_axis.Inside(iy)) tap(iy * x_axis.size + ix, A(1));
    return true;
  }
  const A x0 = std::floor(x), y0 = std::floor(y);
  const auto ix = static_cast<int64_t>(x0), iy = static_cast<int64_t>(y0);
  const A east = x - x0, west = (x0 + 1) - x, south = y - y0, north = (y0 + 1) - y;
  const int64_t w = x_axis.size;
  if (x_axis.Inside(ix) && y_axis.Inside(iy)) tap(iy * w + ix, west * north);
  if (x_axis.Inside(ix + 1) && y_axis.Inside(iy)) tap(iy * w + ix + 1, east * north);
  if (x_axis.Inside(ix) && y_axis.Inside(iy + 1)) tap((iy + 1) * w + ix, west * south);
  if (x_axis.Inside(ix + 1) && y_axis.Inside(iy + 1)) tap((iy + 1) * w + ix + 1, east * south);
  return true;
}

// Where one bicubic point reads: 4 x 4 taps read rows row[i], columns column[j]; -1 marks a
// tap that reads 0.
template <typename A>
struct PointTaps {
  bool nan = false;  // the point's value is NaN
  int64_t row[4], column[4];
  A wy[4], wx[4];
};

// PyTorch's get_value_bounded: pad the tap's coordinate, then read it if inside (else -1).
template <typename A>
ORTOPS_HD int64_t BicubicTapIndex(const Axis<A>& axis, A coord) {
  const A padded = axis.Pad(coord);
  if (std::isnan(padded)) return -1;
  const auto i = static_cast<int64_t>(padded);
  return axis.Inside(i) ? i : -1;
}

// The 4 x 4 taps of the bicubic point (gx, gy) (all of them, or NaN).
template <typename A>
ORTOPS_HD PointTaps<A> LocateBicubic(A gx, A gy, const Axis<A>& x_axis, const Axis<A>& y_axis) {
  PointTaps<A> p;
  if (std::isnan(gx) || std::isnan(gy)) {
    p.nan = true;
    return p;
  }
  A x = x_axis.Unnormalize(gx), y = y_axis.Unnormalize(gy);
  if (!(std::abs(x) < kFarOutside && std::abs(y) < kFarOutside)) {
    // So far out that every tap is outside (zeros) or on the edge/mirror (otherwise).
    if (x_axis.padding == Padding::kZeros) {
      for (int i = 0; i < 4; ++i) p.row[i] = p.column[i] = -1, p.wx[i] = p.wy[i] = 0;
      return p;
    }
    if (x_axis.padding == Padding::kReflection) {
      p.nan = true;
      return p;
    }
    x = std::clamp(x, A(-kFarOutside), A(kFarOutside));
    y = std::clamp(y, A(-kFarOutside), A(kFarOutside));
  }
  const A x0 = std::floor(x), y0 = std::floor(y);
  CubicCoefficients(x - x0, p.wx);
  CubicCoefficients(y - y0, p.wy);
  for (int i = 0; i < 4; ++i) {
    p.column[i] = BicubicTapIndex(x_axis, x0 - 1 + static_cast<A>(i));
    p.row[i] = BicubicTapIndex(y_axis, y0 - 1 + static_cast<A>(i));
  }
  return p;
}

// The bicubic sample of one plane (`map`, `width` wide; its elements read as A, pixel p at
// map[p * stride]: 1 for a plane, C for a channel of a channels-last map), rows first as
// PyTorch sums them.
template <typename A, typename Element>
ORTOPS_HD A ReadBicubic(const PointTaps<A>& p, const Element* map, int64_t width, int64_t stride = 1) {
  if (p.nan) return std::numeric_limits<A>::quiet_NaN();
  A rows[4];
  for (int i = 0; i < 4; ++i) {
    A v[4];
    for (int j = 0; j < 4; ++j) {
      v[j] = p.row[i] >= 0 && p.column[j] >= 0 ? static_cast<A>(map[(p.row[i] * width + p.column[j]) * stride]) : A(0);
    }
    rows[i] = v[0] * p.wx[0] + v[1] * p.wx[1] + v[2] * p.wx[2] + v[3] * p.wx[3];
  }
  return rows[0] * p.wy[0] + rows[1] * p.wy[1] + rows[2] * p.wy[2] + rows[3] * p.wy[3];
}

}  // namespace ortops::grid_sample
