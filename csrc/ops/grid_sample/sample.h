// The loops grid sampling spends its time in, compiled per instruction-set level
// (core/isa.h) in sample_simd.cc: bilinear sampling with zeros padding from blocks of a few
// channels, channels-last, and bilinear and nearest sampling from a channels-last copy of
// the whole input otherwise.
#pragma once

#include <cstdint>

#include "core/isa.h"

namespace ortops::grid_sample {

// Where the points of a bilinear pass with zeros padding read, a structure of arrays that
// every block of channels streams through: per point the offset of its top-left pixel
// (iy * width + ix, which may lie outside the map), east = x - floor(x) and
// south = y - floor(y) as the kernel computes them, and flags. The arrays hold whole
// vectors of points: TapArraysSize(count) elements.
struct TapArrays {
  int32_t* corner;
  float* east;
  float* south;
  uint8_t* flags;
};
// Flags: which of the four taps lie inside the map (PyTorch's order), and NaN points.
inline constexpr int kTopLeft = 1, kTopRight = 2, kBottomLeft = 4, kBottomRight = 8, kNanPoint = 16;

// The widest vector of points a level locates, to which TapArrays are padded.
inline constexpr int64_t kTapLanes = 16;
inline int64_t TapArraysSize(int64_t count) { return (count + kTapLanes - 1) / kTapLanes * kTapLanes; }

// The taps of `count` points (xy: their (x, y) grid coordinates) on a width x height map
// (each below 2^24), PyTorch's arithmetic lane by lane; taps of the padding up to a whole
// vector lie outside.
ORTOPS_ISA_DECLARE(void LocateTaps(const float* xy, int64_t count, int64_t width, int64_t height, bool align_corners,
                                   const TapArrays& taps))

// How many channels a block holds at this level.
ORTOPS_ISA_DECLARE(int64_t BlockChannels())

// out[c * out_stride + i] = ((((0 + v0 w0) + v1 w1) + v2 w2) + v3 w3) for channels
// c < `channels` (at most BlockChannels()) and the points first + i, i in [0, count), of taps
// (first a multiple of kTapLanes): PyTorch's sum in its order, over the taps inside the map,
// and NaN for a NaN point. `block` holds those channels' planes of the given width,
// channels-last, followed by BlockChannels() floats of padding. Weights are rebuilt from east
// and south (sample_simd.cc says why their bits are the kernel's).
ORTOPS_ISA_DECLARE(void SampleBlock(const float* block, int64_t channels, int64_t width, const TapArrays& taps,
                                    int64_t first, int64_t count, float* out, int64_t out_stride))

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
