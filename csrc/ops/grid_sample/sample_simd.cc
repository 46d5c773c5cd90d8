// Compiled once per instruction-set level (core/isa.h).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/transpose.h"
#include "core/vector_lanes.h"
#include "ops/grid_sample/sample.h"

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

// Where a vector of points reads (bilinear, zeros padding).
template <typename A>
struct LaneLocation {
  using V = typename Lanes<A>::Vector;
  using I = typename IntLanes<A>::Vector;
  using U = typename IntLanes<A>::Unsigned;
  I number;    // the point is not NaN
  I valid[4];  // its taps lie inside the map, in PyTorch's order
  U corner;    // iy * width + ix (wrapping for points far outside, whose taps are never read)
  V east, west, south, north;
};

// The kernel's scalar location (grid_sample.cc: Axis::Unnormalize, floor, the four taps in
// PyTorch's order and weights), one vector of points at a time. floor is the truncation
// stepped down where it went up: exact below 2^24, and points beyond that are outside a map
// smaller than 2^24 whatever their floor (as the scalar code finds too).
template <typename A>
LaneLocation<A> LocateLanes(const A* xy, int64_t width, int64_t height, bool align_corners) {
  using Location = LaneLocation<A>;
  using V = typename Location::V;
  using I = typename Location::I;
  using U = typename Location::U;
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
  Location at;
  at.number = (x == x) & (y == y);
  const I near = (x < kLimit) & (x > -kLimit) & (y < kLimit) & (y > -kLimit);  // false for NaN
  const V xs = near ? x : V{}, ys = near ? y : V{};
  const V xt = __builtin_convertvector(__builtin_convertvector(xs, I), V);
  const V yt = __builtin_convertvector(__builtin_convertvector(ys, I), V);
  const V x0 = xt > xs ? xt - 1 : xt, y0 = yt > ys ? yt - 1 : yt;
  const I ix = __builtin_convertvector(x0, I), iy = __builtin_convertvector(y0, I);
  at.east = xs - x0;
  at.west = (x0 + 1) - xs;
  at.south = ys - y0;
  at.north = (y0 + 1) - ys;
  using S = typename IntLanes<A>::Scalar;
  const auto columns = static_cast<S>(width), rows = static_cast<S>(height);
  const I left = near & (ix >= 0) & (ix < columns), right = near & (ix + 1 >= 0) & (ix + 1 < columns);
  const I top = (iy >= 0) & (iy < rows), bottom = (iy + 1 >= 0) & (iy + 1 < rows);
  at.valid[0] = top & left;
  at.valid[1] = top & right;
  at.valid[2] = bottom & left;
  at.valid[3] = bottom & right;
  // Unsigned, so that the offsets of taps far outside (never read) wrap instead of overflowing.
  at.corner =
      reinterpret_cast<const U&>(iy) * static_cast<std::make_unsigned_t<S>>(columns) + reinterpret_cast<const U&>(ix);
  return at;
}

template <typename A>
void LocateVector(const A* xy, int64_t width, int64_t height, bool align_corners, int64_t zero_pixel, int64_t nan_pixel,
                  PointTap<A>* taps) {
  using S = typename IntLanes<A>::Scalar;
  const LaneLocation<A> at = LocateLanes(xy, width, height, align_corners);
  const auto stride = static_cast<std::make_unsigned_t<S>>(width);
  const typename LaneLocation<A>::U offset[4] = {at.corner, at.corner + 1, at.corner + stride, at.corner + stride + 1};
  const typename LaneLocation<A>::V weight[4] = {at.west * at.north, at.east * at.north, at.west * at.south,
                                                 at.east * at.south};
  for (int64_t i = 0; i < Lanes<A>::kCount; ++i) {
    PointTap<A>& tap = taps[i];
    for (int k = 0; k < 4; ++k) {
      tap.pixel[k] = at.valid[k][i] ? static_cast<int64_t>(static_cast<S>(offset[k][i])) : zero_pixel;
      tap.weight[k] = at.valid[k][i] ? weight[k][i] : A(0);
    }
    if (!at.number[i]) {
      tap.pixel[0] = nan_pixel;
      tap.weight[0] = A(1);
    }
  }
}

// Runs locate(xy, first) for the vectors of points in [0, count), the last one padded with
// (0, 0) points.
template <typename A, typename LocateOne>
void ForEachVectorOfPoints(const A* xy, int64_t count, LocateOne&& locate) {
  constexpr int64_t kLanes = Lanes<A>::kCount;
  int64_t p = 0;
  for (; p + kLanes <= count; p += kLanes) locate(xy + 2 * p, p);
  if (p == count) return;
  A tail[2 * kLanes] = {};
  std::copy(xy + 2 * p, xy + 2 * count, tail);
  locate(tail, p);
}

template <typename A>
void Locate(const A* xy, int64_t count, int64_t width, int64_t height, bool align_corners, int64_t zero_pixel,
            int64_t nan_pixel, PointTap<A>* taps) {
  ForEachVectorOfPoints(xy, count, [&](const A* points, int64_t first) {
    if (first + Lanes<A>::kCount <= count) {
      LocateVector(points, width, height, align_corners, zero_pixel, nan_pixel, taps + first);
      return;
    }
    PointTap<A> tail[Lanes<A>::kCount];
    LocateVector(points, width, height, align_corners, zero_pixel, nan_pixel, tail);
    std::copy(tail, tail + (count - first), taps + first);
  });
}

void LocateTapArrays(const float* xy, int64_t count, int64_t width, int64_t height, bool align_corners,
                     const TapArrays& taps) {
  using I = IntLanes<float>::Vector;
  constexpr int64_t kLanes = Lanes<float>::kCount;
  typedef uint8_t Bytes __attribute__((vector_size(kLanes)));
  ForEachVectorOfPoints(xy, count, [&](const float* points, int64_t first) {
    const LaneLocation<float> at = LocateLanes(points, width, height, align_corners);
    const I flags = (at.valid[0] & kTopLeft) | (at.valid[1] & kTopRight) | (at.valid[2] & kBottomLeft) |
                    (at.valid[3] & kBottomRight) | (~at.number & kNanPoint);
    const Bytes bytes = __builtin_convertvector(flags, Bytes);
    std::memcpy(taps.corner + first, &at.corner, sizeof(at.corner));
    std::memcpy(taps.east + first, &at.east, sizeof(at.east));
    std::memcpy(taps.south + first, &at.south, sizeof(at.south));
    std::memcpy(taps.flags + first, &bytes, sizeof(bytes));
  });
  // Points past count (the last vector's padding, and up to a whole vector of the widest
  // level) read nothing.
  for (int64_t p = count; p < TapArraysSize(count); ++p) {
    taps.corner[p] = 0;
    taps.east[p] = taps.south[p] = 0;
    taps.flags[p] = 0;
  }
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

// Blocks of 8 channels (32-byte pixels) where the level has 256-bit vectors, 4 otherwise.
// Not 16 at AVX-512: on Zen 5, 64 channels of 256 x 256 (the benchmark's) took 3.5 ms in
// 16-channel blocks against 2.5 ms in 8-channel ones, whose 2 MB block stays closer to
// the core (the 16-channel one only wins while the whole input is in cache).
constexpr int64_t kBlockLanes = kVectorBytes >= 32 ? 8 : 4;

// A block holds the planes of up to kBlockLanes channels channels-last, `channels` floats a
// pixel, read kBlockLanes at a time: the lanes past `channels` belong to the next pixel, or to
// the block's padding after its last one, and are dropped. A point reads its four pixels as
// four vectors (two or three cache lines for up to 8 channels, where reading planes takes
// two lines per channel), and a tile of points is transposed into the output planes.
//
// Weights: rebuilding west as 1 - east (and north as 1 - south) gives the kernel's bits
// wherever a weight is used: for x >= 0, east = x - floor(x) is exact, so 1 - east and
// (floor(x) + 1) - x round the same real number; for x < 0 the left taps lie outside
// (ix <= -1) and are not read. Skipping a tap outside leaves the sum PyTorch's: PyTorch adds
// nothing for it either.
void SampleBlockOfChannels(const float* block, int64_t channels, int64_t width, const TapArrays& taps, int64_t first,
                           int64_t count, float* out, int64_t out_stride) {
  typedef float V __attribute__((vector_size(4 * kBlockLanes)));
  const auto read = [&](int64_t pixel) {
    V v;
    std::memcpy(&v, block + pixel * channels, sizeof(V));
    return v;
  };
  constexpr int64_t kTile = kTapLanes;
  alignas(64) float rows[kTile * kBlockLanes];
  for (int64_t done = 0; done < count; done += kTile) {
    const int64_t points = std::min(kTile, count - done);
    for (int64_t i = 0; i < points; ++i) {
      const int64_t p = first + done + i;
      const int flags = taps.flags[p];
      V sum = V{};
      if (flags & kNanPoint) {
        sum += std::numeric_limits<float>::quiet_NaN();
      } else {
        const float east = taps.east[p], south = taps.south[p], west = 1 - east, north = 1 - south;
        const int64_t corner = taps.corner[p];
        if (flags & kTopLeft) sum += read(corner) * (west * north);
        if (flags & kTopRight) sum += read(corner + 1) * (east * north);
        if (flags & kBottomLeft) sum += read(corner + width) * (west * south);
        if (flags & kBottomRight) sum += read(corner + width + 1) * (east * south);
      }
      std::memcpy(rows + i * kBlockLanes, &sum, sizeof(V));
    }
    Transpose(rows, points, channels, kBlockLanes, out + done, out_stride);
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

int64_t BlockChannels() { return kBlockLanes; }

void LocateTaps(const float* xy, int64_t count, int64_t width, int64_t height, bool align_corners,
                const TapArrays& taps) {
  LocateTapArrays(xy, count, width, height, align_corners, taps);
}

void SampleBlock(const float* block, int64_t channels, int64_t width, const TapArrays& taps, int64_t first,
                 int64_t count, float* out, int64_t out_stride) {
  SampleBlockOfChannels(block, channels, width, taps, first, count, out, out_stride);
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
