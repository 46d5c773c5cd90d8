// Pieces shared by the RoIAlign family (axis-aligned and rotated): roi validation, the
// adaptive sampling grid with its bounds, and pooling precomputed bilinear taps.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/kernel_io.h"
#include "math/bilinear.h"

namespace ortops::roi_pooling {

// Bounds on the bilinear taps precomputed per roi: beyond them a roi (or sampling_ratio) is
// so large that the op would run for minutes; that is reported instead of attempted.
inline constexpr int64_t kMaxSamplesPerAxis = 1 << 16;
inline constexpr int64_t kMaxTapsPerRoi = 1 << 24;

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
// taps; an empty map reads 0).
template <typename T>
void AveragePool(const T* map, const BilinearTap<T>* taps, int64_t bins, int64_t per_bin, T* out) {
  const T count = static_cast<T>(per_bin > 1 ? per_bin : 1);
  for (int64_t bin = 0; bin < bins; ++bin) {
    T sum = 0;
    for (int64_t s = 0; s < per_bin; ++s, ++taps) sum += map ? taps->Read(map) : T(0);
    out[bin] = sum / count;
  }
}

}  // namespace ortops::roi_pooling
