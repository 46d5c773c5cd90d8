// The statistics and normalization of one group of GroupNorm (and of mmdeploy's instance
// norm), in float64: the hot loops, compiled per instruction-set level (core/isa.h) in
// normalize_simd.cc. Every level runs the same operations in the same order, so returns the
// same bits; a wider level only holds more of the loops' independent chains per instruction.
#pragma once

#include <cstdint>

#include "core/half.h"
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

}  // namespace ortops::group_norm
