// RoIAlign's pooling from a channels-last copy of the feature map, the loop every RoIAlign
// variant that has such a copy spends its time in: compiled per instruction-set level
// (core/isa.h) in pool_channels_last_simd.cc.
#pragma once

#include <cstdint>

#include "core/isa.h"

namespace ortops::roi_pooling {

// One bilinear sample (math/bilinear.h's BilinearTap, as a plain struct that every level
// shares): its four corners as pixel indices into the [H * W, C] image, and their weights.
template <typename A>
struct PixelTap {
  int64_t pixel[4];
  A weight[4];
};

// Bins pooled together: their sums stay in one block of scratch (kPoolGroupBins * C
// elements) and are written to the [C, bins] output in runs of this many bins per channel.
enum : int64_t { kPoolGroupBins = 8 };

// One roi to pool from a channels-last image.
template <typename A>
struct ChannelsLastRoi {
  const A* image;  // [H * W, C]
  int64_t channels;
  const PixelTap<A>* taps;  // bins * per_bin of them, bin by bin
  int64_t bins, per_bin;
  bool max;         // max pooling (the largest sample), else the mean of the samples
  bool of_corners;  // max pooling of each sample's largest weighted corner (ONNX's max mode)
  A max_start;      // max pooling's running start (not of corners)
  A empty_bin;      // max pooling's value for a bin without samples
  A* out;           // [C, bins]
  A* scratch;       // kPoolGroupBins * C elements
};

// out[c * bins + bin] for every channel and bin: each sample is w0 v0 + w1 v1 + w2 v2 + w3 v3
// (in that order), summed over the bin's samples in order and divided by their count (at
// least 1), or maxed from max_start (a NaN sample never replaces the running value); or, of
// corners, each sample is the NaN-skipping largest of w0 v0 ... w3 v3 and the bin the
// NaN-skipping largest of its samples — the per-channel path's arithmetic, so both give the
// same bits.
ORTOPS_ISA_DECLARE(void PoolChannelsLast(const ChannelsLastRoi<float>& roi);
                   void PoolChannelsLast(const ChannelsLastRoi<double>& roi))

}  // namespace ortops::roi_pooling
