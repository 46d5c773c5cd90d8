// Pieces shared by the RoIAlign family (axis-aligned and rotated): roi validation, the
// adaptive sampling grid with its bounds, and pooling precomputed bilinear taps.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/channels_last.h"
#include "core/error.h"
#include "core/kernel_io.h"
#include "math/bilinear.h"

namespace ortops::roi_pooling {

// Bounds on the bilinear taps precomputed per roi: beyond them a roi (or sampling_ratio) is
// so large that the op would run for minutes; that is reported instead of attempted.
inline constexpr int64_t kMaxSamplesPerAxis = 1 << 16;
inline constexpr int64_t kMaxTapsPerRoi = 1 << 24;

// The attributes every RoIAlign variant has, read and checked once.
struct PoolingAttributes {
  explicit PoolingAttributes(const Attributes& attrs)
      : output_height(attrs.Int("output_height")),
        output_width(attrs.Int("output_width")),
        spatial_scale(attrs.Float("spatial_scale")),
        sampling_ratio(attrs.Int("sampling_ratio")),
        aligned(attrs.Int("aligned")) {
    Check(output_height >= 1 && output_width >= 1,
          "attributes 'output_height' and 'output_width' must be at least 1, got ", output_height, " and ",
          output_width);
    // Divided, not multiplied: the product of two huge sizes would overflow and pass.
    Check(output_height <= kMaxTapsPerRoi / output_width, "output size ", output_height, " x ", output_width,
          " is too large: more than ", kMaxTapsPerRoi, " bins per roi");
    Check(std::isfinite(spatial_scale), "attribute 'spatial_scale' must be finite, got ", spatial_scale);
    Check(aligned == 0 || aligned == 1, "attribute 'aligned' must be 0 or 1, got ", aligned);
    Check(sampling_ratio <= kMaxSamplesPerAxis, "attribute 'sampling_ratio' must be at most ", kMaxSamplesPerAxis,
          ", got ", sampling_ratio);
  }
  int64_t bins() const { return output_height * output_width; }

  int64_t output_height, output_width;
  float spatial_scale;
  int64_t sampling_ratio, aligned;
};

// Checks rois [R, columns] whose first column is a batch index into `images` images:
// finite values, and an index that names an image after truncation toward zero (as mmcv).
template <typename T>
void CheckRois(const ConstTensor<T>& rois, int64_t columns, const char* layout, const Shape& input_shape) {
  Check(rois.dim(1) == columns, "input 'rois' must have shape [R, ", columns, "] ", layout, ", got ",
        ShapeText{rois.shape});
  const int64_t images = input_shape[0];
  for (int64_t r = 0; r < rois.dim(0); ++r) {
    const T* roi = rois.data + columns * r;
    for (int64_t k = 0; k < columns; ++k) Check(std::isfinite(roi[k]), "roi ", r, " in input 'rois' is not finite");
    const auto index = static_cast<int64_t>(roi[0]);
    Check(index >= 0 && index < images, "roi ", r, " has batch index ", roi[0], ", but input 'input' has ", images,
          " images (shape ", ShapeText{input_shape}, ")");
  }
}

// Samples per bin along one axis: sampling_ratio if positive, else ceil(roi size / bins)
// (0 for an empty or negative size).
template <typename T>
int64_t GridSize(int64_t sampling_ratio, T roi_size, int64_t bins) {
  if (sampling_ratio > 0) return sampling_ratio;
  const T grid = std::ceil(roi_size / static_cast<T>(bins));
  if (!(grid > 0)) return 0;
  Check(grid <= static_cast<T>(kMaxSamplesPerAxis), "a roi needs ", grid,
        " samples per bin along one axis (adaptive sampling), more than this op allows; check the rois");
  return static_cast<int64_t>(grid);
}

inline void CheckTapCount(int64_t grid_h, int64_t grid_w, int64_t bins) {
  Check(grid_h * grid_w <= kMaxTapsPerRoi / bins, "a roi needs ", grid_h, " x ", grid_w,
        " samples per bin, more than this op allows; lower 'sampling_ratio' or check the rois");
}

// out[bin] = mean of the bin's `per_bin` consecutive taps on `map` (0 for a bin without
// taps; an empty map reads 0). A is the compute type; map and out hold T (float16 for A =
// float), read as A and rounded once on store.
template <typename T, typename A>
void AveragePool(const T* map, const BilinearTap<A>* taps, int64_t bins, int64_t per_bin, T* out) {
  const A count = static_cast<A>(per_bin > 1 ? per_bin : 1);
  for (int64_t bin = 0; bin < bins; ++bin) {
    A sum = 0;
    for (int64_t s = 0; s < per_bin; ++s, ++taps) sum += map ? taps->Read(map) : A(0);
    out[bin] = static_cast<T>(sum / count);
  }
}

// [N, C, H, W] -> [N, H, W, C] in scratch memory, as A (float16 converted to float).
template <typename A, typename T>
Scratch<A> ToChannelsLast(const KernelIO& io, const ConstTensor<T>& input) {
  const int64_t batch = input.dim(0), channels = input.dim(1), pixels = input.dim(2) * input.dim(3);
  Scratch<A> out = io.Allocate<A>(static_cast<size_t>(input.size()));
  for (int64_t n = 0; n < batch; ++n) {
    ortops::ToChannelsLast(io, input.data + n * channels * pixels, channels, pixels,
                           out.data() + n * pixels * channels);
  }
  return out;
}

// Whether pooling from a channels-last copy pays for making it: the taps' reads (vectorised
// over channels there) against one pass over the whole input. Estimated in double, since
// rois x bins x sampling_ratio^2 can exceed int64 before the per-roi tap bound rejects it.
inline bool ChannelsLastPays(int64_t rois, int64_t bins, int64_t sampling_ratio, int64_t channels,
                             const Shape& input_shape) {
  const double ratio = static_cast<double>(sampling_ratio);
  const double reads = static_cast<double>(rois) * static_cast<double>(bins) * (ratio > 0 ? ratio * ratio : 4.0) * 2.0;
  return channels >= 8 && reads > static_cast<double>(input_shape[0] * input_shape[2] * input_shape[3]);
}

// Pools one roi from a channels-last image ([H * W, C]) for every channel at once, with the
// same per-channel arithmetic, in the same order, as the per-channel path: each sample is
// w0 v0 + w1 v1 + w2 v2 + w3 v3, summed (or maxed) over the bin's samples in order.
// out[c * bins + bin], rounded to Out (float16) if that is not T; `value` and `acc` are
// scratch of `channels` elements.
template <typename T, bool kMax, typename Out>
void PoolChannelsLast(const T* image, int64_t channels, const BilinearTap<T>* taps, int64_t bins, int64_t per_bin,
                      T max_start, T empty_bin, Out* out, T* value, T* acc) {
  const T count = static_cast<T>(per_bin > 1 ? per_bin : 1);
  for (int64_t bin = 0; bin < bins; ++bin) {
    std::fill(acc, acc + channels, kMax ? max_start : T(0));
    for (int64_t s = 0; s < per_bin; ++s, ++taps) {
      const T* p0 = image + taps->offset[0] * channels;
      const T* p1 = image + taps->offset[1] * channels;
      const T* p2 = image + taps->offset[2] * channels;
      const T* p3 = image + taps->offset[3] * channels;
      const T w0 = taps->weight[0], w1 = taps->weight[1], w2 = taps->weight[2], w3 = taps->weight[3];
      for (int64_t c = 0; c < channels; ++c) value[c] = w0 * p0[c] + w1 * p1[c] + w2 * p2[c] + w3 * p3[c];
      if constexpr (kMax) {
        for (int64_t c = 0; c < channels; ++c) acc[c] = value[c] > acc[c] ? value[c] : acc[c];
      } else {
        for (int64_t c = 0; c < channels; ++c) acc[c] += value[c];
      }
    }
    for (int64_t c = 0; c < channels; ++c) {
      out[c * bins + bin] = static_cast<Out>(kMax ? (per_bin == 0 ? empty_bin : acc[c]) : acc[c] / count);
    }
  }
}

}  // namespace ortops::roi_pooling
