// Compiled once per instruction-set level (core/isa.h).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/transpose.h"
#include "core/vector_lanes.h"
#include "ops/grid_sample/sample_channels_last.h"

namespace ortops::grid_sample::ORTOPS_ISA_NS {
namespace {

// Integer lanes as wide as A's (int32 for float, int64 for double).
template <typename A>
struct IntLanes;
template <>
struct IntLanes<float> {
  using Scalar = int32_t;
  typedef int32_t Vector __attribute__((vector_size(kVectorBytes)));
  typedef uint32_t Unsigned __attribute__((vector_size(kVectorBytes)));
};
template <>
struct IntLanes<double> {
  using Scalar = int64_t;
  typedef int64_t Vector __attribute__((vector_size(kVectorBytes)));
  typedef uint64_t Unsigned __attribute__((vector_size(kVectorBytes)));
};

// The kernel's scalar location (grid_sample.cc: Axis::Unnormalize, floor, the four taps in
// PyTorch's order and weights), one vector of points at a time. floor is the truncation
// stepped down where it went up: exact below 2^24, and points beyond that are outside a map
// smaller than 2^24 whatever their floor (as the scalar code finds too).
template <typename A>
void LocateVector(const A* xy, int64_t width, int64_t height, bool align_corners, int64_t zero_pixel, int64_t nan_pixel,
                  PointTap<A>* taps) {
  using V = typename Lanes<A>::Vector;
  using I = typename IntLanes<A>::Vector;
  constexpr int64_t kLanes = Lanes<A>::kCount;
  V gx, gy;
  for (int64_t i = 0; i < kLanes; ++i) {
    gx[i] = xy[2 * i];
    gy[i] = xy[2 * i + 1];
  }
  const A w = static_cast<A>(width), h = static_cast<A>(height);
  const V x = align_corners ? ((gx + 1) / 2) * (w - 1) : ((gx + 1) * w - 1) / 2;
  const V y = align_corners ? ((gy + 1) / 2) * (h - 1) : ((gy + 1) * h - 1) / 2;
  constexpr A kLimit = A(1 << 24);
  const I number = (x == x) & (y == y);
  const I near = (x < kLimit) & (x > -kLimit) & (y < kLimit) & (y > -kLimit);  // false for NaN
  const V xs = near ? x : V{}, ys = near ? y : V{};
  const V xt = __builtin_convertvector(__builtin_convertvector(xs, I), V);
  const V yt = __builtin_convertvector(__builtin_convertvector(ys, I), V);
  const V x0 = xt > xs ? xt - 1 : xt, y0 = yt > ys ? yt - 1 : yt;
  const I ix = __builtin_convertvector(x0, I), iy = __builtin_convertvector(y0, I);
  const V east = xs - x0, west = (x0 + 1) - xs, south = ys - y0, north = (y0 + 1) - ys;
  using S = typename IntLanes<A>::Scalar;
  using U = typename IntLanes<A>::Unsigned;
  const auto columns = static_cast<S>(width), rows = static_cast<S>(height);
  const I left = near & (ix >= 0) & (ix < columns), right = near & (ix + 1 >= 0) & (ix + 1 < columns);
  const I top = (iy >= 0) & (iy < rows), bottom = (iy + 1 >= 0) & (iy + 1 < rows);
  const I valid[4] = {top & left, top & right, bottom & left, bottom & right};
  // Unsigned, so that the offsets of taps far outside (never read) wrap instead of overflowing.
  const auto stride = static_cast<std::make_unsigned_t<S>>(columns);
  const U top_left = reinterpret_cast<const U&>(iy) * stride + reinterpret_cast<const U&>(ix);
  const U offset[4] = {top_left, top_left + 1, top_left + stride, top_left + stride + 1};
  const V weight[4] = {west * north, east * north, west * south, east * south};
  for (int64_t i = 0; i < kLanes; ++i) {
    PointTap<A>& tap = taps[i];
    for (int k = 0; k < 4; ++k) {
      tap.pixel[k] = valid[k][i] ? static_cast<int64_t>(static_cast<S>(offset[k][i])) : zero_pixel;
      tap.weight[k] = valid[k][i] ? weight[k][i] : A(0);
    }
    if (!number[i]) {
      tap.pixel[0] = nan_pixel;
      tap.weight[0] = A(1);
    }
  }
}

template <typename A>
void Locate(const A* xy, int64_t count, int64_t width, int64_t height, bool align_corners, int64_t zero_pixel,
            int64_t nan_pixel, PointTap<A>* taps) {
  constexpr int64_t kLanes = Lanes<A>::kCount;
  int64_t p = 0;
  for (; p + kLanes <= count; p += kLanes) {
    LocateVector(xy + 2 * p, width, height, align_corners, zero_pixel, nan_pixel, taps + p);
  }
  if (p == count) return;
  // The last points, padded to a vector with (0, 0) and located with it.
  A tail[2 * kLanes] = {};
  PointTap<A> tail_taps[kLanes];
  std::copy(xy + 2 * p, xy + 2 * count, tail);
  LocateVector(tail, width, height, align_corners, zero_pixel, nan_pixel, tail_taps);
  std::copy(tail_taps, tail_taps + (count - p), taps + p);
}

template <typename A>
void Sample(const A* image, int64_t channels, const PointTap<A>* taps, int64_t count, A* rows) {
  using V = typename Lanes<A>::Vector;
  constexpr int64_t kLanes = Lanes<A>::kCount;
  for (int64_t p = 0; p < count; ++p) {
    const PointTap<A>& tap = taps[p];
    const A* p0 = image + tap.pixel[0] * channels;
    const A* p1 = image + tap.pixel[1] * channels;
    const A* p2 = image + tap.pixel[2] * channels;
    const A* p3 = image + tap.pixel[3] * channels;
    const A w0 = tap.weight[0], w1 = tap.weight[1], w2 = tap.weight[2], w3 = tap.weight[3];
    A* row = rows + p * channels;
    int64_t c = 0;
    for (; c + kLanes <= channels; c += kLanes) {
      V v0, v1, v2, v3;
      std::memcpy(&v0, p0 + c, sizeof(V));
      std::memcpy(&v1, p1 + c, sizeof(V));
      std::memcpy(&v2, p2 + c, sizeof(V));
      std::memcpy(&v3, p3 + c, sizeof(V));
      V sum = V{};
      sum += v0 * w0;
      sum += v1 * w1;
      sum += v2 * w2;
      sum += v3 * w3;
      std::memcpy(row + c, &sum, sizeof(V));
    }
    for (; c < channels; ++c) {
      A sum = 0;
      sum += p0[c] * w0;
      sum += p1[c] * w1;
      sum += p2[c] * w2;
      sum += p3[c] * w3;
      row[c] = sum;
    }
  }
}

}  // namespace

void LocateBilinearZeros(const float* xy, int64_t count, int64_t width, int64_t height, bool align_corners,
                         int64_t zero_pixel, int64_t nan_pixel, PointTap<float>* taps) {
  Locate(xy, count, width, height, align_corners, zero_pixel, nan_pixel, taps);
}
void LocateBilinearZeros(const double* xy, int64_t count, int64_t width, int64_t height, bool align_corners,
                         int64_t zero_pixel, int64_t nan_pixel, PointTap<double>* taps) {
  Locate(xy, count, width, height, align_corners, zero_pixel, nan_pixel, taps);
}

void SampleRows(const float* image, int64_t channels, const PointTap<float>* taps, int64_t count, float* rows) {
  Sample(image, channels, taps, count, rows);
}
void SampleRows(const double* image, int64_t channels, const PointTap<double>* taps, int64_t count, double* rows) {
  Sample(image, channels, taps, count, rows);
}

void RowsToPlanes(const float* rows, int64_t count, int64_t channels, float* out, int64_t out_stride) {
  Transpose(rows, count, channels, channels, out, out_stride);
}
void RowsToPlanes(const double* rows, int64_t count, int64_t channels, double* out, int64_t out_stride) {
  Transpose(rows, count, channels, channels, out, out_stride);
}

}  // namespace ortops::grid_sample::ORTOPS_ISA_NS
