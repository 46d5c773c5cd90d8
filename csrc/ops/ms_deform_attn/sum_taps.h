// The loop multi-scale deformable attention spends its time in, compiled per instruction-set
// level (core/isa.h) in sum_taps_simd.cc: the weighted sum of the samples' neighbour vectors.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/isa.h"

namespace ortops::ms_deform_attn {

// One sample's contribution: four neighbour D-vectors and their bilinear weights times the
// attention weight. A neighbour outside the map points at a vector of zeros, with weight 0,
// so that the sum needs no branches and a NaN or infinity elsewhere in `value` stays out.
template <typename A>
struct Tap {
  const A* corner[4];
  A weight[4];
};

// out[d] = the sum over taps t, in order, of ((w0 c0[d] + w1 c1[d]) + w2 c2[d]) + w3 c3[d], for
// d in [0, dim): the same roundings at every level, which only take more channels at a time.
ORTOPS_ISA_DECLARE(void SumTaps(const Tap<float>* taps, size_t count, int64_t dim, float* out);
                   void SumTaps(const Tap<double>* taps, size_t count, int64_t dim, double* out))

}  // namespace ortops::ms_deform_attn
