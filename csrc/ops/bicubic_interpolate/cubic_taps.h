// Where a bicubic resize reads, with PyTorch's arithmetic (area_pixel_compute_source_index,
// unclamped for cubic, and get_cubic_upsample_coefficients), shared by the CPU kernel and the
// device path (ORTOPS_HD), which therefore give the same bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/host_device.h"
#include "math/cubic.h"

namespace ortops::bicubic_interpolate {

// Where output index i of one axis reads: four clamped source indices and their weights.
template <typename A>
struct AxisTaps {
  int64_t index[4];
  A weight[4];
};

// One axis of the resize, from `in_size` to `out_size` elements.
template <typename A>
struct ResizeAxis {
  ResizeAxis(int64_t in, int64_t out_size, float scale, bool align) : in_size(in), align_corners(align) {
    if (align_corners) {
      ratio = out_size > 1 ? static_cast<A>(in_size - 1) / static_cast<A>(out_size - 1) : A(0);
    } else {
      ratio = static_cast<A>(1.0 / static_cast<double>(scale));
    }
  }

  ORTOPS_HD AxisTaps<A> TapsAt(int64_t i) const {
    AxisTaps<A> taps;
    const A source = align_corners ? ratio * static_cast<A>(i) : ratio * (static_cast<A>(i) + A(0.5)) - A(0.5);
    const A floor = std::floor(source);
    CubicCoefficients<A>(source - floor, taps.weight);
    const auto first = static_cast<int64_t>(floor) - 1;
    for (int64_t k = 0; k < 4; ++k) taps.index[k] = std::clamp<int64_t>(first + k, 0, in_size - 1);
    return taps;
  }

  int64_t in_size;
  bool align_corners;
  A ratio;
};

// One input row interpolated at the output column whose taps are `tx`.
template <typename A, typename T>
ORTOPS_HD A InterpolateAlong(const T* row, const AxisTaps<A>& tx) {
  return row[tx.index[0]] * tx.weight[0] + row[tx.index[1]] * tx.weight[1] + row[tx.index[2]] * tx.weight[2] +
         row[tx.index[3]] * tx.weight[3];
}

// The four interpolated rows of an output pixel summed along y with the weights of `ty`, in
// PyTorch's order.
template <typename A>
ORTOPS_HD A SumRows(A l0, A l1, A l2, A l3, const AxisTaps<A>& ty) {
  return ((l0 * ty.weight[0] + l1 * ty.weight[1]) + l2 * ty.weight[2]) + l3 * ty.weight[3];
}

}  // namespace ortops::bicubic_interpolate
