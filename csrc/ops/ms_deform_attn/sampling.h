// The loops multi-scale deformable attention spends its time in, compiled per instruction-set
// level (core/isa.h) in sampling_simd.cc: where a query and head's samples read, and the
// weighted sum of their neighbour vectors.
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

// Where float32 samples read, a structure of arrays of LocateSize(count) entries: whether the
// sample is inside its level's map ((-1, W) x (-1, H) in pixels; NaN is not), and for one that
// is, the floor (x0, y0) of its pixel coordinate and the fractions east = x - x0,
// south = y - y0, as ZeroPaddedBilinear (math/bilinear.h) computes them.
struct SampleFloors {
  int32_t* inside;  // 0 or -1
  int32_t* x0;
  int32_t* y0;
  float* east;
  float* south;
};
inline constexpr int64_t kLocateLanes = 16;  // the widest vector of floats, to which arrays are padded
inline int64_t LocateSize(int64_t count) { return (count + kLocateLanes - 1) / kLocateLanes * kLocateLanes; }

// The floors of `count` samples: sample s at (x, y) = location[2s, 2s + 1] normalised to its
// level, or, with `reference`, at reference[2s, 2s + 1] + location[2s, 2s + 1] / (W, H) (the
// FromOffsets node's offsets), of a level of width[s] x height[s] (as floats, each below 2^31;
// both arrays of LocateSize(count) entries): pixel (x W - 0.5, y H - 0.5), the scalar SampleAt's
// arithmetic (attention_inputs.h) lane by lane.
ORTOPS_ISA_DECLARE(void LocateSamples(const float* location, const float* reference, const float* width,
                                      const float* height, int64_t count, const SampleFloors& floors))

// out[d] = the sum over taps t, in order, of ((w0 c0[d] + w1 c1[d]) + w2 c2[d]) + w3 c3[d], for
// d in [0, dim): the same roundings at every level, which only take more channels at a time.
ORTOPS_ISA_DECLARE(void SumTaps(const Tap<float>* taps, size_t count, int64_t dim, float* out);
                   void SumTaps(const Tap<double>* taps, size_t count, int64_t dim, double* out))

}  // namespace ortops::ms_deform_attn
