// Compiled once per instruction-set level (core/isa.h).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/transpose.h"
#include "ops/grid_sample/sample_channels_last.h"

namespace ortops::grid_sample::ORTOPS_ISA_NS {
namespace {

// The level's vector width in bytes; Lanes<A>::Vector is a generic vector of that many bytes
// of A (a GCC and Clang extension, not intrinsics) that the compiler lowers to the level's
// SIMD (or to narrower vectors or scalars).
#if defined(__AVX512F__)
constexpr int kVectorBytes = 64;
#elif defined(__AVX2__)
constexpr int kVectorBytes = 32;
#else
constexpr int kVectorBytes = 16;
#endif

template <typename A>
struct Lanes {
  typedef A Vector __attribute__((vector_size(kVectorBytes)));
  static constexpr int64_t kCount = kVectorBytes / static_cast<int64_t>(sizeof(A));
};

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

void PlanesToChannelsLast(const float* image, int64_t channels, int64_t pixels, int64_t first, int64_t last,
                          float* out) {
  PlanesToChannelsLastRange(image, channels, pixels, first, last, out);
}
void PlanesToChannelsLast(const double* image, int64_t channels, int64_t pixels, int64_t first, int64_t last,
                          double* out) {
  PlanesToChannelsLastRange(image, channels, pixels, first, last, out);
}

}  // namespace ortops::grid_sample::ORTOPS_ISA_NS
