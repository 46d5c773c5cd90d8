// Bilinear and nearest grid sampling from a channels-last copy of the input, the loop the
// op spends its time in: compiled per instruction-set level (core/isa.h) in
// sample_channels_last_simd.cc.
#pragma once

#include <cstdint>

#include "core/isa.h"

namespace ortops::grid_sample {

// Where one output point reads: four pixels of the [pixels, C] image and their weights, the
// taps inside the map first in PyTorch's summation order, then (for those outside) a pixel
// of zeros with weight 0. Adding the zero products leaves the sum's bits as they were: it
// starts at +0 and so never becomes -0, and x + 0 is x for every other x, NaN included.
template <typename A>
struct PointTap {
  int64_t pixel[4];
  A weight[4];
};

// Bilinear sampling with zeros padding (the common case), located for `count` points at once
// with PyTorch's arithmetic lane by lane: xy holds the points' (x, y) grid coordinates, the
// map is width x height (each below 2^24), align_corners as the attribute. A tap outside the
// map reads zero_pixel with weight 0 where it stands (adding +0 to the sum changes no bit,
// see PointTap), a NaN point nan_pixel with weight 1.
ORTOPS_ISA_DECLARE(void LocateBilinearZeros(const float* xy, int64_t count, int64_t width, int64_t height,
                                            bool align_corners, int64_t zero_pixel, int64_t nan_pixel,
                                            PointTap<float>* taps);
                   void LocateBilinearZeros(const double* xy, int64_t count, int64_t width, int64_t height,
                                            bool align_corners, int64_t zero_pixel, int64_t nan_pixel,
                                            PointTap<double>* taps))

// rows[p * channels + c] = ((((0 + v0 w0) + v1 w1) + v2 w2) + v3 w3) for points [0, count),
// vk being channel c of taps[p].pixel[k]: PyTorch's sum, in its order.
ORTOPS_ISA_DECLARE(void SampleRows(const float* image, int64_t channels, const PointTap<float>* taps, int64_t count,
                                   float* rows);
                   void SampleRows(const double* image, int64_t channels, const PointTap<double>* taps, int64_t count,
                                   double* rows))

// out[c * out_stride + p] = rows[p * channels + c] for points [0, count) (moves only).
ORTOPS_ISA_DECLARE(void RowsToPlanes(const float* rows, int64_t count, int64_t channels, float* out,
                                     int64_t out_stride);
                   void RowsToPlanes(const double* rows, int64_t count, int64_t channels, double* out,
                                     int64_t out_stride))

}  // namespace ortops::grid_sample
