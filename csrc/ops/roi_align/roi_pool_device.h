// The device path of the whole RoIAlign family (RoIAlign, RoIAlignRotated, the multi-level
// ops, TensorRT's ROIAlign_TRT): a thread per pooled value (or per bin and four channels),
// which finds its roi on its map, samples its bin with the CPU kernels' geometry and bilinear
// rule (roi_geometry.h, math/bilinear.h) and pools the samples in the CPU kernels' order, so
// that both return the same bits. Where the rois sample much of the maps, the maps are first
// copied channels last, so that a warp's threads read one sample's consecutive channels
// (device/channel_tiles.h); else the threads read the planes as they are (PoolBin). The ops
// differ only in a Rois type each (the layout of a roi, its image, level and geometry) and in
// how a bin's samples are pooled (MeanOrMax, MaxOfCorners). Included by the family's .cu files
// only.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/half.h"
#include "core/host_device.h"
#include "device/channel_tiles.h"
#include "device/device_io.h"
#include "device/transpose.h"
#include "math/bilinear.h"
#include "ops/roi_align/roi_geometry.h"

namespace ortops::roi_pooling {

// Where a roi pools from: its geometry (AlignedRoi, RotatedRoi) on a height x width map, and
// the [C, H, W] planes of its image on that map.
template <typename T, typename Geometry>
struct RoiOnMap {
  Geometry g;
  const T* image;
  int64_t height, width;
};

// A Rois type (one per op) tells the functors below about roi r:
//   ORTOPS_HD bool Valid(int64_t r) const: whether its values pass the CPU kernel's checks
//     (finite, naming an image that exists);
//   ORTOPS_HD RoiOnMap<T, Geometry> Locate(int64_t r) const: where it pools from (for a
//     valid roi only).

// Whether roi r fails the CPU kernel's checks: its values, or (where `grids`) a grid that
// PoolingAttributes' bounds refuse. The CPU kernels make a roi's grid only when they pool it,
// so not when the output is empty (C = 0). The device's half of device::CheckEach.
template <typename Rois>
struct RoiFails {
  Rois rois;
  int64_t bins;
  bool grids;
  ORTOPS_HD bool operator()(int64_t r) const {
    if (!rois.Valid(r)) return true;
    if (!grids) return false;
    const auto g = rois.Locate(r).g;
    return !GridIsValid(g.grid_h, g.grid_w, bins);
  }
};

// RoIAlign's pooling of a bin's samples, as the CPU kernels' PoolRoi: their mean (over at
// least one sample), or the largest, starting from mode.max_start (mode.empty_bin for a bin
// without samples).
template <typename A>
struct MeanOrMax {
  PoolMode<A> mode;

  struct State {
    A sum, best;
  };
  ORTOPS_HD State Start() const { return {A(0), mode.max_start}; }
  template <typename T>
  ORTOPS_HD A Read(const BilinearTap<A>& tap, const T* map) const {
    return tap.Read(map);
  }
  ORTOPS_HD void Add(State& state, A value) const {
    state.sum += value;
    if (value > state.best) state.best = value;
  }
  ORTOPS_HD A Finish(const State& state, int64_t samples) const {
    if (!mode.max) return state.sum / static_cast<A>(samples > 1 ? samples : 1);
    return samples == 0 ? mode.empty_bin : state.best;
  }
};

// TensorRT's max mode (ROIAlign_TRT), as its CPU kernel's MaxPool: the largest of a bin's
// samples, each the largest of its four weighted corners, NaN skipped as fmax does; 0 for a
// bin without samples. The running max starts at NaN, so that the first sample starts it.
template <typename A>
struct MaxOfCorners {
  struct State {
    A best;
  };
  ORTOPS_HD State Start() const { return {std::numeric_limits<A>::quiet_NaN()}; }
  template <typename T>
  ORTOPS_HD A Read(const BilinearTap<A>& tap, const T* map) const {
    return tap.ReadMaxOfCorners(map);
  }
  ORTOPS_HD void Add(State& state, A value) const { state.best = MaxSkippingNaN(state.best, value); }
  ORTOPS_HD A Finish(const State& state, int64_t samples) const { return samples == 0 ? A(0) : state.best; }
};

// Roi r as `rois` locates it, into `roi`; false for a roi that the data check refuses (its
// values, or a grid too large): met only where the check could not run (a CUDA graph), since
// the host raises its error otherwise. Nothing is to be read for such a roi.
template <typename Rois, typename Located>
ORTOPS_HD bool LocateChecked(const Rois& rois, int64_t r, int64_t bins, Located& roi) {
  if (!rois.Valid(r)) return false;
  roi = rois.Locate(r);
  return GridIsValid(roi.g.grid_h, roi.g.grid_w, bins);
}

// tap(BilinearTap) for each sample of bin `bin` of a located roi, in the CPU kernels' order
// (the order every channel's sum follows, so that both give the same bits).
template <typename A, typename Located, typename Tap>
ORTOPS_HD void ForEachSampleTap(const Located& roi, int64_t bin, int64_t output_width, Tap&& tap) {
  const int64_t pw = bin % output_width, ph = bin / output_width;
  for (int64_t iy = 0; iy < roi.g.grid_h; ++iy) {
    for (int64_t ix = 0; ix < roi.g.grid_w; ++ix) {
      A y, x;
      roi.g.Sample(ph, pw, iy, ix, y, x);
      tap(RoiAlignTap(y, x, roi.height, roi.width));
    }
  }
}

// The pooled values of bin i % bins of roi r = i / (groups * bins), channels kChannels g to
// kChannels g + kChannels - 1 (g = i / bins % groups), in the [R, C, output_height,
// output_width] output, from the roi as `rois` locates it. A map with H or W = 0 reads 0.
// One thread takes several channels: the bin's sample positions and bilinear taps are worked
// out once for them all, and the channels' loads are independent (in flight together on a
// GPU). Each value is still summed over its samples in the CPU kernels' order.
template <typename T, typename Rois, typename Pooling>
struct PoolBin {
  using A = ComputeType<T>;
  static constexpr int64_t kChannels = 4;
  Rois rois;
  Pooling pool;
  T* output;
  int64_t channels;
  PoolingAttributes pooling;

  ORTOPS_HD static int64_t Groups(int64_t channels) { return (channels + kChannels - 1) / kChannels; }
  ORTOPS_HD void operator()(int64_t i) const {
    const int64_t bins = pooling.bins(), groups = Groups(channels), bin = i % bins;
    const int64_t first = i / bins % groups * kChannels, r = i / (bins * groups);
    const int64_t here = channels - first < kChannels ? channels - first : kChannels;
    T* out = output + (r * channels + first) * bins + bin;
    decltype(rois.Locate(r)) roi{};
    if (!LocateChecked(rois, r, bins, roi)) {
      ORTOPS_UNROLL
      for (int64_t k = 0; k < kChannels; ++k) {
        if (k < here) out[k * bins] = device::RefusedValue<T>();
      }
      return;
    }
    const int64_t plane = roi.height * roi.width;
    const T* map = roi.image + first * plane;
    typename Pooling::State state[kChannels];
    ORTOPS_UNROLL
    for (int64_t k = 0; k < kChannels; ++k) state[k] = pool.Start();
    ForEachSampleTap<A>(roi, bin, pooling.output_width, [&](const BilinearTap<A>& tap) {
      ORTOPS_UNROLL
      for (int64_t k = 0; k < kChannels; ++k) {
        if (k < here) pool.Add(state[k], plane == 0 ? A(0) : pool.Read(tap, map + k * plane));
      }
    });
    ORTOPS_UNROLL
    for (int64_t k = 0; k < kChannels; ++k) {
      if (k < here) out[k * bins] = static_cast<T>(pool.Finish(state[k], roi.g.grid_h * roi.g.grid_w));
    }
  }
};

// Pools every bin of `count` rois into output [count, C, output_height, output_width].
template <typename T, typename Rois, typename Pooling>
void PoolEveryBin(const device::DeviceIO& io, const Rois& rois, const Pooling& pool, T* output, int64_t count,
                  int64_t channels, const PoolingAttributes& pooling) {
  using Bin = PoolBin<T, Rois, Pooling>;
  io.ForEach(count * Bin::Groups(channels) * pooling.bins(), Bin{rois, pool, output, channels, pooling});
}

// The value PoolBin pools for channel c in bin `bin` of roi r, from maps copied channels last:
// `rois` locates every roi on those copies (RoiOnMap::image is then [H W, C]), so a tap's pixel
// p reads element p C + c. The same samples, taps and order as PoolBin: the same bits.
template <typename T, typename Rois, typename Pooling>
struct ChannelsLastBin {
  using A = ComputeType<T>;
  Rois rois;
  Pooling pool;
  int64_t channels;
  PoolingAttributes pooling;

  ORTOPS_HD T operator()(int64_t r, int64_t bin, int64_t c) const {
    decltype(rois.Locate(r)) roi{};
    if (!LocateChecked(rois, r, pooling.bins(), roi)) return device::RefusedValue<T>();
    const bool empty = roi.height * roi.width == 0;
    const T* map = roi.image + c;
    typename Pooling::State state = pool.Start();
    ForEachSampleTap<A>(roi, bin, pooling.output_width, [&](BilinearTap<A> tap) {
      ORTOPS_UNROLL
      for (int k = 0; k < 4; ++k) tap.offset[k] *= channels;
      pool.Add(state, empty ? A(0) : pool.Read(tap, map));
    });
    return static_cast<T>(pool.Finish(state, roi.g.grid_h * roi.g.grid_w));
  }
};

// Pools every bin of `count` rois into output [count, C, output_height, output_width] from
// maps copied channels last, which `rois` locates the rois on.
template <typename T, typename Rois, typename Pooling>
void PoolEveryBinChannelsLast(const device::DeviceIO& io, const Rois& rois, const Pooling& pool, T* output,
                              int64_t count, int64_t channels, const PoolingAttributes& pooling) {
  const int64_t bins = pooling.bins();
  if (count <= 0 || channels <= 0 || bins <= 0) return;
  device::WriteChannelTiles(io, ChannelsLastBin<T, Rois, Pooling>{rois, pool, channels, pooling}, output, count,
                            channels, bins);
}

// Pools every bin of `count` rois from input [N, C, H, W], which `rois` locates them on (its
// member `input`): from a channels-last copy of it where device::ReadsChannelsLast (each bin
// counted as one sample, the fewest it has), else from its planes.
template <typename T, typename Rois, typename Pooling>
void PoolEveryBinOf(const device::DeviceIO& io, const ConstTensor<T>& input, Rois rois, const Pooling& pool, T* output,
                    int64_t count, const PoolingAttributes& pooling) {
  const int64_t images = input.dim(0), channels = input.dim(1), pixels = input.dim(2) * input.dim(3);
  if (!device::ReadsChannelsLast(count * pooling.bins(), images * pixels, channels,
                                 input.size() * static_cast<int64_t>(sizeof(T)))) {
    PoolEveryBin(io, rois, pool, output, count, channels, pooling);
    return;
  }
  Scratch<T> copy = io.Allocate<T>(static_cast<size_t>(input.size()));
  device::TransposeLastTwo(io, input.data, copy.data(), images, channels, pixels);
  rois.input = copy.data();  // image n at n C H W, as in input
  PoolEveryBinChannelsLast(io, rois, pool, output, count, channels, pooling);
}

// Rois [R, 1 + box] whose first value is the index of an image of `input` [N, C, H, W]
// (RoIAlign, RoIAlignRotated); Geometry makes a box's geometry.
template <typename T, typename Geometry>
struct IndexedRois {
  using A = ComputeType<T>;
  static constexpr int64_t kColumns = 1 + Geometry::kBoxValues;
  const T* rois;
  const T* input;
  int64_t images, channels, height, width;
  Geometry geometry;

  ORTOPS_HD void Read(int64_t r, A* roi) const {
    for (int64_t k = 0; k < kColumns; ++k) roi[k] = static_cast<A>(rois[kColumns * r + k]);
  }
  ORTOPS_HD bool Valid(int64_t r) const {
    A roi[kColumns];
    Read(r, roi);
    return RoiIsValid(roi, kColumns, images);
  }
  ORTOPS_HD auto Locate(int64_t r) const {
    A roi[kColumns];
    Read(r, roi);
    const auto image = static_cast<int64_t>(roi[0]);
    return RoiOnMap<T, decltype(geometry(roi + 1))>{geometry(roi + 1), input + image * channels * height * width,
                                                    height, width};
  }
};

// RoIAlign's and RoIAlignRotated's device path, after the shape checks: checks the rois on
// the device (and, for the first that fails, on the host with the CPU kernel's CheckRoi and
// CheckGrid, for its message), then pools every roi into output 0, [R, C, output_height,
// output_width].
template <typename T, typename Geometry, typename Pooling>
void PoolIndexedRois(const device::DeviceIO& io, const ConstTensor<T>& input, const ConstTensor<T>& rois,
                     const Geometry& geometry, const Pooling& pool) {
  using A = ComputeType<T>;
  using Located = IndexedRois<T, Geometry>;
  constexpr int64_t kColumns = Located::kColumns;
  const PoolingAttributes& pooling = geometry.pooling;
  const int64_t count = rois.dim(0), channels = input.dim(1);
  const Located located{rois.data, input.data, input.dim(0), channels, input.dim(2), input.dim(3), geometry};
  device::CheckEach(io, rois.data, count, kColumns, RoiFails<Located>{located, pooling.bins(), channels > 0},
                    [&](int64_t r, const T* values) {
                      A roi[kColumns];
                      for (int64_t k = 0; k < kColumns; ++k) roi[k] = static_cast<A>(values[k]);
                      CheckRoi(roi, r, kColumns, input.shape);
                      CheckGrid(geometry(roi + 1), pooling);
                    });
  T* output = io.Output<T>(0, {count, channels, pooling.output_height, pooling.output_width});
  PoolEveryBinOf(io, input, located, pool, output, count, pooling);
}

}  // namespace ortops::roi_pooling
