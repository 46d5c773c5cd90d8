// Pieces shared by the RoIAlign family (axis-aligned and rotated, one level or several): roi
// validation, each roi's geometry with its adaptive sampling grid and bounds, its bilinear
// taps, and pooling those taps.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/channels_last.h"
#include "core/error.h"
#include "core/half_convert.h"
#include "core/kernel_io.h"
#include "math/bilinear.h"
#include "ops/roi_align/pool_channels_last.h"

namespace ortops::roi_pooling {

// Bounds on the bilinear taps precomputed per roi: beyond them a roi (or sampling_ratio) is
// so large that the op would run for minutes; that is reported instead of attempted.
inline constexpr int64_t kMaxSamplesPerAxis = 1 << 16;
inline constexpr int64_t kMaxTapsPerRoi = 1 << 24;

// The attributes every RoIAlign variant has, read and checked once. The multi-level ops,
// whose spatial scale comes per level from 'featmap_strides', pass nullptr as
// `scale_attribute` (spatial_scale is then 1).
struct PoolingAttributes {
  explicit PoolingAttributes(const Attributes& attrs, const char* scale_attribute = "spatial_scale")
      : PoolingAttributes(attrs.Int("output_height"), attrs.Int("output_width"),
                          scale_attribute ? attrs.Float(scale_attribute) : 1.0f, attrs.Int("sampling_ratio"),
                          attrs.Int("aligned")) {}
  // For ops whose attributes carry these under other names or encodings (TensorRT's
  // ROIAlign_TRT: `aligned` is its coordinate_transformation_mode).
  PoolingAttributes(int64_t height, int64_t width, float scale, int64_t samples, int64_t shift_half_pixel)
      : output_height(height),
        output_width(width),
        spatial_scale(scale),
        sampling_ratio(samples),
        aligned(shift_half_pixel) {
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
// `input_name` is the input whose first dimension counts the images.
template <typename T>
void CheckRois(const ConstTensor<T>& rois, int64_t columns, const char* layout, const Shape& input_shape,
               const char* input_name = "input") {
  Check(rois.dim(1) == columns, "input 'rois' must have shape [R, ", columns, "] ", layout, ", got ",
        ShapeText{rois.shape});
  const int64_t images = input_shape[0];
  for (int64_t r = 0; r < rois.dim(0); ++r) {
    const T* roi = rois.data + columns * r;
    for (int64_t k = 0; k < columns; ++k) Check(std::isfinite(roi[k]), "roi ", r, " in input 'rois' is not finite");
    const auto index = static_cast<int64_t>(roi[0]);
    Check(index >= 0 && index < images, "roi ", r, " has batch index ", roi[0], ", but input '", input_name, "' has ",
          images, " images (shape ", ShapeText{input_shape}, ")");
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

// No lower bound on a roi's sides (RoIAlign with aligned = 1).
template <typename A>
constexpr A kNoMinSide = -std::numeric_limits<A>::infinity();

// An axis-aligned roi on its feature map: the corner its bins start from, their size, and the
// samples per bin along each axis.
template <typename A>
struct AlignedRoi {
  A start_h, start_w, bin_h, bin_w;
  int64_t grid_h, grid_w;
};

// RoIAlign's geometry (mmcv, torchvision) for the box (x1, y1, x2, y2): corners times `scale`,
// shifted by -0.5 when aligned; sides below `min_side` raised to it (RoIAlign: 1 when not
// aligned, kNoMinSide when aligned). Fails for a roi that needs too many samples.
template <typename A>
AlignedRoi<A> AlignedRoiGeometry(const A* box, A scale, A min_side, const PoolingAttributes& pooling) {
  const A shift = pooling.aligned ? A(0.5) : A(0);
  AlignedRoi<A> g;
  g.start_w = box[0] * scale - shift;
  g.start_h = box[1] * scale - shift;
  const A roi_width = std::max(box[2] * scale - shift - g.start_w, min_side);
  const A roi_height = std::max(box[3] * scale - shift - g.start_h, min_side);
  g.bin_h = roi_height / static_cast<A>(pooling.output_height);
  g.bin_w = roi_width / static_cast<A>(pooling.output_width);
  g.grid_h = GridSize(pooling.sampling_ratio, roi_height, pooling.output_height);
  g.grid_w = GridSize(pooling.sampling_ratio, roi_width, pooling.output_width);
  CheckTapCount(g.grid_h, g.grid_w, pooling.bins());
  return g;
}

// The taps of every bin of `g` on a height x width map, bin by bin (row-major), each bin's
// grid_h x grid_w samples row by row: bins * grid_h * grid_w of them.
template <typename A>
void AlignedRoiTaps(const AlignedRoi<A>& g, const PoolingAttributes& pooling, int64_t height, int64_t width,
                    BilinearTap<A>* taps) {
  for (int64_t ph = 0; ph < pooling.output_height; ++ph) {
    for (int64_t pw = 0; pw < pooling.output_width; ++pw) {
      for (int64_t iy = 0; iy < g.grid_h; ++iy) {
        const A y = g.start_h + static_cast<A>(ph) * g.bin_h +
                    static_cast<A>(static_cast<A>(iy) + A(0.5)) * g.bin_h / static_cast<A>(g.grid_h);
        for (int64_t ix = 0; ix < g.grid_w; ++ix) {
          const A x = g.start_w + static_cast<A>(pw) * g.bin_w +
                      static_cast<A>(static_cast<A>(ix) + A(0.5)) * g.bin_w / static_cast<A>(g.grid_w);
          *taps++ = RoiAlignTap(y, x, height, width);
        }
      }
    }
  }
}

// A rotated roi on its feature map: its centre, the corner of its own frame the bins start
// from (-w/2, -h/2), their size, the rotation and the samples per bin along each axis.
template <typename A>
struct RotatedRoi {
  A center_h, center_w, start_h, start_w, bin_h, bin_w, cos_theta, sin_theta;
  int64_t grid_h, grid_w;
};

// RoIAlignRotated's geometry (mmcv, Detectron2) for the box (cx, cy, w, h, theta): the centre
// times `scale`, shifted by -0.5 when aligned; the sides times `scale`, raised to `min_side`
// (mmcv: 1 when not aligned, kNoMinSide when aligned); theta negated when clockwise.
template <typename A>
RotatedRoi<A> RotatedRoiGeometry(const A* box, A scale, A min_side, bool clockwise, const PoolingAttributes& pooling) {
  const A shift = pooling.aligned ? A(0.5) : A(0);
  RotatedRoi<A> g;
  g.center_w = box[0] * scale - shift;
  g.center_h = box[1] * scale - shift;
  const A roi_width = std::max(box[2] * scale, min_side);
  const A roi_height = std::max(box[3] * scale, min_side);
  const A theta = clockwise ? -box[4] : box[4];
  g.cos_theta = std::cos(theta);
  g.sin_theta = std::sin(theta);
  g.bin_h = roi_height / static_cast<A>(pooling.output_height);
  g.bin_w = roi_width / static_cast<A>(pooling.output_width);
  g.grid_h = GridSize(pooling.sampling_ratio, roi_height, pooling.output_height);
  g.grid_w = GridSize(pooling.sampling_ratio, roi_width, pooling.output_width);
  CheckTapCount(g.grid_h, g.grid_w, pooling.bins());
  g.start_h = -roi_height / A(2);
  g.start_w = -roi_width / A(2);
  return g;
}

// As AlignedRoiTaps: a sample at (xx, yy) in the roi's frame is read at
// x = yy sin + xx cos + cx, y = yy cos - xx sin + cy.
template <typename A>
void RotatedRoiTaps(const RotatedRoi<A>& g, const PoolingAttributes& pooling, int64_t height, int64_t width,
                    BilinearTap<A>* taps) {
  for (int64_t ph = 0; ph < pooling.output_height; ++ph) {
    for (int64_t pw = 0; pw < pooling.output_width; ++pw) {
      for (int64_t iy = 0; iy < g.grid_h; ++iy) {
        const A yy = g.start_h + static_cast<A>(ph) * g.bin_h +
                     static_cast<A>(static_cast<A>(iy) + A(0.5)) * g.bin_h / static_cast<A>(g.grid_h);
        for (int64_t ix = 0; ix < g.grid_w; ++ix) {
          const A xx = g.start_w + static_cast<A>(pw) * g.bin_w +
                       static_cast<A>(static_cast<A>(ix) + A(0.5)) * g.bin_w / static_cast<A>(g.grid_w);
          const A y = yy * g.cos_theta - xx * g.sin_theta + g.center_h;
          const A x = yy * g.sin_theta + xx * g.cos_theta + g.center_w;
          *taps++ = RoiAlignTap(y, x, height, width);
        }
      }
    }
  }
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
    const T* image = input.data + n * channels * pixels;
    A* image_out = out.data() + n * pixels * channels;
    ortops::ToChannelsLast(io, image, channels, pixels, image_out);
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

// What a pooling kernel reads: the [N, C, H, W] input as given and, where it paid to make it,
// its channels-last copy [N, H, W, C] in the compute type A (nullptr where not).
template <typename T, typename A>
struct PoolSource {
  const T* planar;
  const A* channels_last;
  int64_t channels, height, width;
  int64_t plane() const { return height * width; }
};

// `input` as a kernel pooling `rois` rois from it reads it: through a channels-last copy,
// made into `copy`, where ChannelsLastPays, else in place.
template <typename T, typename A>
PoolSource<T, A> MakePoolSource(const KernelIO& io, const ConstTensor<T>& input, int64_t rois,
                                const PoolingAttributes& pooling, Scratch<A>& copy) {
  const int64_t channels = input.dim(1), height = input.dim(2), width = input.dim(3);
  const bool channels_last =
      height * width > 0 && ChannelsLastPays(rois, pooling.bins(), pooling.sampling_ratio, channels, input.shape);
  if (channels_last) copy = ToChannelsLast<A>(io, input);
  return {input.data, channels_last ? copy.data() : nullptr, channels, height, width};
}

// Max pooling's running start and the value of a bin without samples (avg pooling: unused).
template <typename A>
struct PoolMode {
  bool max;
  A max_start, empty_bin;
};

// Scratch of one thread for PoolRoi, made once per ParallelFor task: the taps as the
// dispatched loop takes them, its sums of a group of bins, and (float16 output) the pooled
// roi before it is rounded. Empty unless the source has a channels-last copy.
template <typename T, typename A>
struct PoolScratch {
  PoolScratch(const KernelIO& io, bool channels_last, int64_t channels, int64_t bins)
      : taps(io.Allocator<PixelTap<A>>()),
        sums(io.Vector<A>(channels_last ? static_cast<size_t>(kPoolGroupBins * channels) : 0)),
        pooled(io.Vector<A>(channels_last && !std::is_same_v<T, A> ? static_cast<size_t>(channels * bins) : 0)) {}
  ScratchVector<PixelTap<A>> taps;
  ScratchVector<A> sums, pooled;
};

// Pools one roi of image `image` from its taps (`per_bin` consecutive taps per bin) into
// out[c * bins + bin] for every channel. From the channels-last copy, the loop dispatched
// per instruction-set level (pool_channels_last.h) reads every channel of a tap's pixels at
// once, with the same per-channel arithmetic in the same order as the planar loop below.
template <typename T, typename A>
void PoolRoi(const PoolSource<T, A>& source, int64_t image, const BilinearTap<A>* taps, int64_t bins, int64_t per_bin,
             const PoolMode<A>& mode, T* out, PoolScratch<T, A>& scratch) {
  const int64_t channels = source.channels, plane = source.plane();
  if (source.channels_last != nullptr) {
    const int64_t count = bins * per_bin;
    scratch.taps.resize(static_cast<size_t>(count));
    for (int64_t t = 0; t < count; ++t) {
      PixelTap<A>& tap = scratch.taps[static_cast<size_t>(t)];
      for (int k = 0; k < 4; ++k) {
        tap.pixel[k] = taps[t].offset[k];
        tap.weight[k] = taps[t].weight[k];
      }
    }
    A* pooled = nullptr;
    if constexpr (std::is_same_v<T, A>) {
      pooled = out;
    } else {
      pooled = scratch.pooled.data();
    }
    const ChannelsLastRoi<A> roi{.image = source.channels_last + image * plane * channels,
                                 .channels = channels,
                                 .taps = scratch.taps.data(),
                                 .bins = bins,
                                 .per_bin = per_bin,
                                 .max = mode.max,
                                 .max_start = mode.max_start,
                                 .empty_bin = mode.empty_bin,
                                 .out = pooled,
                                 .scratch = scratch.sums.data()};
    ORTOPS_ISA_CALL(PoolChannelsLast, roi);
    if constexpr (!std::is_same_v<T, A>) NarrowToHalves(pooled, channels * bins, out);
    return;
  }
  for (int64_t c = 0; c < channels; ++c) {
    const T* map = plane == 0 ? nullptr : source.planar + (image * channels + c) * plane;
    if (!mode.max) {
      AveragePool(map, taps, bins, per_bin, out + c * bins);
      continue;
    }
    const BilinearTap<A>* tap = taps;
    for (int64_t bin = 0; bin < bins; ++bin) {
      A best = mode.max_start;
      for (int64_t s = 0; s < per_bin; ++s, ++tap) {
        const A v = map ? tap->Read(map) : A(0);
        if (v > best) best = v;
      }
      out[c * bins + bin] = static_cast<T>(per_bin == 0 ? mode.empty_bin : best);
    }
  }
}

}  // namespace ortops::roi_pooling
