// Compiled once per instruction-set level (core/isa.h).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

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

void LocatePlanarTaps(const float* xy, int64_t count, int64_t width, int64_t height, bool align_corners,
                      const PlanarTaps& taps) {
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
  for (int64_t p = count; p < PlanarTapsSize(count); ++p) {
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

// v[k][i] = tap k of point i inside the map ? plane[corner[i] + (0, 1, width, width + 1)[k]] : 0
// for a vector of points, and nan_point[i] = all ones for a NaN point. The two taps of a row are neighbours, so where
// both lie inside they are read together as one 64-bit element: half the gathered elements.
inline void GatherTaps(const float* plane, int64_t width, const int32_t* corner, const uint8_t* flags,
                       Lanes<float>::Vector (&v)[4], IntLanes<float>::Vector& nan_point) {
#if defined(__AVX512F__)
  const __m128i f = _mm_loadu_si128(reinterpret_cast<const __m128i*>(flags));
  const __mmask16 inside[4] = {
      _mm_test_epi8_mask(f, _mm_set1_epi8(kTopLeft)), _mm_test_epi8_mask(f, _mm_set1_epi8(kTopRight)),
      _mm_test_epi8_mask(f, _mm_set1_epi8(kBottomLeft)), _mm_test_epi8_mask(f, _mm_set1_epi8(kBottomRight))};
  const __m512i nan_lanes = _mm512_movm_epi32(_mm_test_epi8_mask(f, _mm_set1_epi8(kNanPoint)));
  nan_point = std::bit_cast<IntLanes<float>::Vector>(nan_lanes);
  const __m512i top = _mm512_loadu_si512(corner);
  const __m512i offsets[2] = {top, _mm512_add_epi32(top, _mm512_set1_epi32(static_cast<int32_t>(width)))};
  // The halves of the offsets index the 64-bit gathers (loaded again rather than extracted,
  // which GCC 12 warns about).
  const __m256i row_step = _mm256_set1_epi32(static_cast<int32_t>(width));
  const __m256i top_low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(corner));
  const __m256i top_high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(corner + 8));
  const __m256i halves[2][2] = {{top_low, top_high},
                                {_mm256_add_epi32(top_low, row_step), _mm256_add_epi32(top_high, row_step)}};
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const auto* pairs = reinterpret_cast<const double*>(plane);
  for (int row = 0; row < 2; ++row) {
    const __mmask16 both = inside[2 * row] & inside[2 * row + 1];
    const __m512d low =
        _mm512_mask_i32gather_pd(_mm512_setzero_pd(), static_cast<__mmask8>(both), halves[row][0], pairs, 4);
    const __m512d high =
        _mm512_mask_i32gather_pd(_mm512_setzero_pd(), static_cast<__mmask8>(both >> 8), halves[row][1], pairs, 4);
    __m512 left = _mm512_permutex2var_ps(_mm512_castpd_ps(low), even, _mm512_castpd_ps(high));
    __m512 right = _mm512_permutex2var_ps(_mm512_castpd_ps(low), odd, _mm512_castpd_ps(high));
    // A row with one tap inside (at the map's left or right edge) reads it alone.
    const __mmask16 left_alone = inside[2 * row] & ~both, right_alone = inside[2 * row + 1] & ~both;
    if ((left_alone | right_alone) != 0) {
      left = _mm512_mask_i32gather_ps(left, left_alone, offsets[row], plane, 4);
      right =
          _mm512_mask_i32gather_ps(right, right_alone, _mm512_add_epi32(offsets[row], _mm512_set1_epi32(1)), plane, 4);
    }
    v[2 * row] = std::bit_cast<Lanes<float>::Vector>(left);
    v[2 * row + 1] = std::bit_cast<Lanes<float>::Vector>(right);
  }
#elif defined(__AVX2__)
  const __m256i f = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(flags)));
  const auto lanes_with = [&](int flag) {
    const __m256i bit = _mm256_set1_epi32(flag);
    return _mm256_cmpeq_epi32(_mm256_and_si256(f, bit), bit);
  };
  const __m256i inside[4] = {lanes_with(kTopLeft), lanes_with(kTopRight), lanes_with(kBottomLeft),
                             lanes_with(kBottomRight)};
  const __m256i nan_lanes = lanes_with(kNanPoint);
  nan_point = std::bit_cast<IntLanes<float>::Vector>(nan_lanes);
  const __m256i top = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(corner));
  const __m256i offsets[2] = {top, _mm256_add_epi32(top, _mm256_set1_epi32(static_cast<int32_t>(width)))};
  const auto* pairs = reinterpret_cast<const double*>(plane);
  for (int row = 0; row < 2; ++row) {
    const __m256i both = _mm256_and_si256(inside[2 * row], inside[2 * row + 1]);
    const auto gather_half = [&](int half) {
      const __m128i index =
          half == 0 ? _mm256_castsi256_si128(offsets[row]) : _mm256_extracti128_si256(offsets[row], 1);
      const __m128i mask = half == 0 ? _mm256_castsi256_si128(both) : _mm256_extracti128_si256(both, 1);
      return _mm256_castpd_ps(_mm256_mask_i32gather_pd(_mm256_setzero_pd(), pairs, index,
                                                       _mm256_castsi256_pd(_mm256_cvtepi32_epi64(mask)), 4));
    };
    const __m256 low = gather_half(0), high = gather_half(1);  // points 0-3 and 4-7, (left, right) each
    // Per 128-bit lane the shuffles give points (0, 1, 4, 5) and (2, 3, 6, 7); the permute
    // puts the 64-bit pairs back in order.
    const auto in_order = [](__m256 x) {
      return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(x), _MM_SHUFFLE(3, 1, 2, 0)));
    };
    __m256 left = in_order(_mm256_shuffle_ps(low, high, _MM_SHUFFLE(2, 0, 2, 0)));
    __m256 right = in_order(_mm256_shuffle_ps(low, high, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m256i left_alone = _mm256_andnot_si256(both, inside[2 * row]);
    const __m256i right_alone = _mm256_andnot_si256(both, inside[2 * row + 1]);
    if (!_mm256_testz_si256(_mm256_or_si256(left_alone, right_alone), _mm256_or_si256(left_alone, right_alone))) {
      left = _mm256_mask_i32gather_ps(left, plane, offsets[row], _mm256_castsi256_ps(left_alone), 4);
      right = _mm256_mask_i32gather_ps(right, plane, _mm256_add_epi32(offsets[row], _mm256_set1_epi32(1)),
                                       _mm256_castsi256_ps(right_alone), 4);
    }
    v[2 * row] = std::bit_cast<Lanes<float>::Vector>(left);
    v[2 * row + 1] = std::bit_cast<Lanes<float>::Vector>(right);
  }
#else
  const int64_t delta[4] = {0, 1, width, width + 1};
  for (int k = 0; k < 4; ++k) {
    float values[Lanes<float>::kCount];
    for (int64_t i = 0; i < Lanes<float>::kCount; ++i) {
      values[i] = (flags[i] >> k) & 1 ? plane[static_cast<int64_t>(corner[i]) + delta[k]] : 0.0f;
    }
    std::memcpy(&v[k], values, sizeof(values));
  }
  for (int64_t i = 0; i < Lanes<float>::kCount; ++i) nan_point[i] = flags[i] & kNanPoint ? -1 : 0;
#endif
}

// Rebuilding west as 1 - east (and north as 1 - south) gives the kernel's bits wherever a
// weight is used: for x >= 0, east = x - floor(x) is exact, so 1 - east and
// (floor(x) + 1) - x round the same real number; for x < 0 the left taps lie outside
// (ix <= -1) and read 0, and 0 times any finite weight adds +0, which changes no sum (it
// starts at +0 and never becomes -0).
void SampleOnePlane(const float* plane, int64_t width, const PlanarTaps& taps, int64_t first, int64_t count,
                    float* out) {
  using V = Lanes<float>::Vector;
  using I = IntLanes<float>::Vector;
  constexpr int64_t kLanes = Lanes<float>::kCount;
  for (int64_t done = 0; done < count; done += kLanes) {
    const int64_t p = first + done;
    V v[4], east, south;
    I nan_point;
    GatherTaps(plane, width, taps.corner + p, taps.flags + p, v, nan_point);
    std::memcpy(&east, taps.east + p, sizeof(V));
    std::memcpy(&south, taps.south + p, sizeof(V));
    const V west = 1 - east, north = 1 - south;
    V sum = V{};
    sum += v[0] * (west * north);
    sum += v[1] * (east * north);
    sum += v[2] * (west * south);
    sum += v[3] * (east * south);
    sum = nan_point ? V{} + std::numeric_limits<float>::quiet_NaN() : sum;
    if (count - done >= kLanes) {
      std::memcpy(out + done, &sum, sizeof(V));
    } else {
      for (int64_t i = 0; i < count - done; ++i) out[done + i] = sum[i];
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

bool HasGathers() {
#if defined(__AVX2__)
  return true;
#else
  return false;
#endif
}

void LocatePlanar(const float* xy, int64_t count, int64_t width, int64_t height, bool align_corners,
                  const PlanarTaps& taps) {
  LocatePlanarTaps(xy, count, width, height, align_corners, taps);
}

void SamplePlane(const float* plane, int64_t width, const PlanarTaps& taps, int64_t first, int64_t count, float* out) {
  SampleOnePlane(plane, width, taps, first, count, out);
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
