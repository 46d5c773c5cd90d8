// Compiled once per instruction-set level (core/isa.h).
#include <cmath>
#include <cstdint>

#include "ops/group_norm/normalize.h"

namespace ortops::group_norm::ORTOPS_ISA_NS {
namespace {

// The sum of term(in[i]) in float64: element i goes into partial sum i % kLanes, and the
// partial sums are added as a tree at the end. A fixed order (the same result at every level
// and thread count), whose independent chains the compiler turns into vector adds: a single
// running sum waits on each add's latency, which held the op to a quarter of memory speed.
// 32 lanes are four chains of 8 doubles at AVX-512, enough to cover the add's latency.
using stats::kLanes;

template <typename T, typename Term>
double LaneSum(const T* in, int64_t count, Term term) {
  double partial[kLanes] = {};
  const int64_t whole = count / kLanes * kLanes;
  for (int64_t i = 0; i < whole; i += kLanes) {
    for (int64_t lane = 0; lane < kLanes; ++lane) partial[lane] += term(static_cast<double>(in[i + lane]));
  }
  for (int64_t i = whole; i < count; ++i) partial[i - whole] += term(static_cast<double>(in[i]));
  return stats::AddLanes(partial, kLanes);
}

// The mean and 1 / the standard deviation of `size` contiguous elements (two passes).
struct Statistics {
  double mean, inv_std;
};
template <typename T>
Statistics StatisticsOf(const T* in, int64_t size, double epsilon) {
  const auto count = static_cast<double>(size);
  const double mean = LaneSum(in, size, [](double v) { return v; }) / count;
  const double squares = LaneSum(in, size, [mean](double v) { return stats::SquaredDeviation(v, mean); });
  return {mean, stats::InverseStd(squares, count, epsilon)};
}

template <typename T>
void Normalize(const Group<T>& g) {
  const auto [mean, inv_std] = StatisticsOf(g.in, g.channels * g.spatial, g.epsilon);
  for (int64_t c = 0; c < g.channels; ++c) {
    const double factor = inv_std * static_cast<double>(g.scale[c]), beta = static_cast<double>(g.bias[c]);
    const T* __restrict src = g.in + c * g.spatial;
    T* __restrict dst = g.out + c * g.spatial;
    for (int64_t i = 0; i < g.spatial; ++i) dst[i] = stats::Normalized(src[i], mean, factor, beta);
  }
}

// The sum goes to `out` first, and each row is normalized there in place: the row's three
// passes then read one array (A row of a transformer, 256 to 1024 elements, stays in L1).
template <typename T>
void NormalizeSums(const SumRows<T>& r) {
  const int64_t channels = r.channels;
  for (int64_t row = r.first; row < r.first + r.count; ++row) {
    const T* __restrict a = r.a + row * channels;
    const T* __restrict b = r.b + r.b_first[row - r.first];
    T* __restrict out = r.out + row * channels;
    if (r.b_step == 1) {
      for (int64_t k = 0; k < channels; ++k) out[k] = stats::RoundedSum(a[k], b[k]);
    } else {
      for (int64_t k = 0; k < channels; ++k) out[k] = stats::RoundedSum(a[k], b[0]);
    }
    const auto [mean, inv_std] = StatisticsOf(out, channels, r.epsilon);
    for (int64_t k = 0; k < channels; ++k) {
      out[k] =
          stats::Normalized(out[k], mean, inv_std * static_cast<double>(r.scale[k]), static_cast<double>(r.bias[k]));
    }
  }
}

}  // namespace

void NormalizeSumRows(const SumRows<float>& rows) { NormalizeSums(rows); }
void NormalizeSumRows(const SumRows<double>& rows) { NormalizeSums(rows); }
void NormalizeSumRows(const SumRows<Half>& rows) { NormalizeSums(rows); }

void NormalizeGroup(const Group<float>& group) { Normalize(group); }
void NormalizeGroup(const Group<double>& group) { Normalize(group); }
void NormalizeGroup(const Group<Half>& group) { Normalize(group); }

}  // namespace ortops::group_norm::ORTOPS_ISA_NS
