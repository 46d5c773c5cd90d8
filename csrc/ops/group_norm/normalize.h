// The statistics and normalization of one group of GroupNorm (and of mmdeploy's instance
// norm), in float64: the hot loops, compiled per instruction-set level (core/isa.h) in
// normalize_simd.cc. Every level runs the same operations in the same order, so returns the
// same bits; a wider level only holds more of the loops' independent chains per instruction.
// The device path (group_norm.cu) computes with the same functions (namespace stats).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/half.h"
#include "core/host_device.h"
#include "core/isa.h"

namespace ortops::group_norm {

// One group: `channels` contiguous planes of `spatial` elements; scale and bias point at the
// group's first channel.
template <typename T>
struct Group {
  const T* in;
  T* out;
  const T* scale;
  const T* bias;
  int64_t channels, spatial;
  double epsilon;
};

// out = (in - mean) * (1 / sqrt(var + epsilon) * scale[c]) + bias[c], with the group's mean
// and biased variance (two passes, float64), rounded once to T.
ORTOPS_ISA_DECLARE(void NormalizeGroup(const Group<float>& group); void NormalizeGroup(const Group<double>& group);
                   void NormalizeGroup(const Group<Half>& group))

// AddLayerNorm's rows [first, first + count): row r of `channels` elements of a and out, whose
// element k adds b[b_first[r - first] + k * b_step] (b broadcast to a's shape).
template <typename T>
struct SumRows {
  const T* a;
  const T* b;
  const int64_t* b_first;
  int64_t b_step;
  const T* scale;
  const T* bias;
  T* out;
  int64_t first, count, channels;
  double epsilon;
};

// Each row's s = a + b rounded to T, then out = (s - mean) * (1 / sqrt(var + epsilon) *
// scale[k]) + bias[k] with the row's statistics as NormalizeGroup computes a group's.
ORTOPS_ISA_DECLARE(void NormalizeSumRows(const SumRows<float>& rows);
                   void NormalizeSumRows(const SumRows<double>& rows); void NormalizeSumRows(const SumRows<Half>& rows))

// The arithmetic both kernels share. (In a namespace of its own: the level namespaces of
// ortops::group_norm are declared above, not inline.)
namespace stats {
inline namespace ORTOPS_ISA_NS {  // compiled per instruction-set level (core/isa.h)

// The CPU kernel sums a group in kLanes partial sums: element i goes into partial sum
// i % kLanes.
inline constexpr int64_t kLanes = 32;

// The sum of `lanes` partial sums (a power of two), added as a tree, half onto the other
// half, in place.
ORTOPS_HD inline double AddLanes(double* partial, int64_t lanes) {
  for (int64_t width = lanes / 2; width > 0; width /= 2) {
    for (int64_t lane = 0; lane < width; ++lane) partial[lane] += partial[lane + width];
  }
  return partial[0];
}

// One element's term of the sum of squared deviations.
ORTOPS_HD inline double SquaredDeviation(double v, double mean) { return (v - mean) * (v - mean); }

// 1 / the standard deviation, from the sum of squared deviations of `count` elements.
ORTOPS_HD inline double InverseStd(double squares, double count, double epsilon) {
  return 1.0 / std::sqrt(squares / count + epsilon);
}

// One output: (x - mean) * (inv_std * scale) + bias, rounded once to T. (x - mean) in
// float64: the fused float form x * a + b that PyTorch uses cancels catastrophically when
// the mean is large against the spread.
template <typename T>
ORTOPS_HD inline T Normalized(T x, double mean, double factor, double beta) {
  return static_cast<T>((static_cast<double>(x) - mean) * factor + beta);
}

// a + b rounded to T once, as ONNX's Add rounds it (float16 added in float).
template <typename T>
ORTOPS_HD inline T RoundedSum(T a, T b) {
  using Compute = typename ComputeTypeOf<T>::type;
  return static_cast<T>(static_cast<Compute>(a) + static_cast<Compute>(b));
}

}  // namespace ORTOPS_ISA_NS
}  // namespace stats

}  // namespace ortops::group_norm
