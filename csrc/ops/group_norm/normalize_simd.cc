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

template <typename T>
void Normalize(const Group<T>& g) {
  const int64_t size = g.channels * g.spatial;
  const auto count = static_cast<double>(size);
  const double mean = LaneSum(g.in, size, [](double v) { return v; }) / count;
  const double squares = LaneSum(g.in, size, [mean](double v) { return stats::SquaredDeviation(v, mean); });
  const double inv_std = stats::InverseStd(squares, count, g.epsilon);
  for (int64_t c = 0; c < g.channels; ++c) {
    const double factor = inv_std * static_cast<double>(g.scale[c]), beta = static_cast<double>(g.bias[c]);
    const T* __restrict src = g.in + c * g.spatial;
    T* __restrict dst = g.out + c * g.spatial;
    for (int64_t i = 0; i < g.spatial; ++i) dst[i] = stats::Normalized(src[i], mean, factor, beta);
  }
}

}  // namespace

void NormalizeGroup(const Group<float>& group) { Normalize(group); }
void NormalizeGroup(const Group<double>& group) { Normalize(group); }
void NormalizeGroup(const Group<Half>& group) { Normalize(group); }

}  // namespace ortops::group_norm::ORTOPS_ISA_NS
