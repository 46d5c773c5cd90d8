// The CPU kernels' pieces shared by the RoIAlign family (axis-aligned and rotated, one level
// or several): each roi's bilinear taps (from its geometry, roi_geometry.h), and pooling
// those taps.
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
#include "ops/roi_align/roi_geometry.h"

namespace ortops::roi_pooling {

// The taps of one roi at a time, for a ParallelFor task: every bin of the roi's geometry
// (AlignedRoi or RotatedRoi) on a height x width map, bin by bin (row-major), each bin's
// grid_h x grid_w samples row by row (bins * grid_h * grid_w of them). The frame coordinates of
// the samples' rows and columns are computed first, each once per roi rather than once per
// sample (the same values: a division per sample saved).
template <typename A>
class RoiTaps {
 public:
  explicit RoiTaps(const KernelIO& io) : taps_(io.Allocator<BilinearTap<A>>()), frame_(io.Allocator<A>()) {}

  template <typename Geometry>
  const BilinearTap<A>* Of(const Geometry& g, const PoolingAttributes& pooling, int64_t height, int64_t width) {
    taps_.resize(static_cast<size_t>(pooling.bins() * g.grid_h * g.grid_w));
    frame_.resize(static_cast<size_t>(pooling.output_width * g.grid_w + pooling.output_height * g.grid_h));
    A* const xs = frame_.data();
    A* const ys = xs + pooling.output_width * g.grid_w;
    for (int64_t pw = 0; pw < pooling.output_width; ++pw) {
      for (int64_t ix = 0; ix < g.grid_w; ++ix) xs[pw * g.grid_w + ix] = g.FrameX(pw, ix);
    }
    for (int64_t ph = 0; ph < pooling.output_height; ++ph) {
      for (int64_t iy = 0; iy < g.grid_h; ++iy) ys[ph * g.grid_h + iy] = g.FrameY(ph, iy);
    }
    BilinearTap<A>* tap = taps_.data();
    for (int64_t ph = 0; ph < pooling.output_height; ++ph) {
      for (int64_t pw = 0; pw < pooling.output_width; ++pw) {
        for (int64_t iy = 0; iy < g.grid_h; ++iy) {
          const A yy = ys[ph * g.grid_h + iy];
          for (int64_t ix = 0; ix < g.grid_w; ++ix) {
            A y, x;
            g.FromFrame(yy, xs[pw * g.grid_w + ix], y, x);
            *tap++ = RoiAlignTap(y, x, height, width);
          }
        }
      }
    }
    return taps_.data();
  }

 private:
  ScratchVector<BilinearTap<A>> taps_;
  ScratchVector<A> frame_;  // the samples' columns (x), then rows (y)
};

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
                                 .of_corners = mode.of_corners,
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
      A best = mode.of_corners ? std::numeric_limits<A>::quiet_NaN() : mode.max_start;
      for (int64_t s = 0; s < per_bin; ++s, ++tap) {
        if (mode.of_corners) {
          best = MaxSkippingNaN(best, map ? tap->ReadMaxOfCorners(map) : A(0));
          continue;
        }
        const A v = map ? tap->Read(map) : A(0);
        if (v > best) best = v;
      }
      out[c * bins + bin] = static_cast<T>(per_bin == 0 ? mode.empty_bin : best);
    }
  }
}

}  // namespace ortops::roi_pooling
