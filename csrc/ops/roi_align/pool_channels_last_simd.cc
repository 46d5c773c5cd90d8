// Compiled once per instruction-set level (core/isa.h).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/host_device.h"
#include "core/transpose.h"
#include "core/vector_lanes.h"
#include "ops/roi_align/pool_channels_last.h"

namespace ortops::roi_pooling::ORTOPS_ISA_NS {
namespace {

// Generic vectors of the level's width (core/vector_lanes.h). Plain loops over channels are
// not enough: the compiler fuses the loop over samples into them and leaves the sums in memory.
// Vectors of channels whose sums stay in registers while a bin's samples are read.
constexpr int kPanelVectors = 4;

// How a bin pools its samples: their mean, their largest, or (ONNX's max mode) the largest of
// each sample's weighted corners.
enum class Pooling { kMean, kMax, kMaxOfCorners };

// MaxSkippingNaN (core/host_device.h) lane by lane: a unless b is larger, or b unless a is NaN.
template <typename V>
V MaxSkippingNaNs(V a, V b) {
  return (a > b) | (b != b) ? a : b;
}

// Channels [first, first + kVectors * lanes) of one bin: the mean (or max) of its samples,
// into acc[first...]. A sample's value is ((w0 v0 + w1 v1) + w2 v2) + w3 v3, as the scalar
// expression, or of corners the NaN-skipping largest of w0 v0 ... w3 v3 in that order; the
// running sum adds it, the running max takes it when it is larger (of corners: NaN-skipping,
// from a NaN start, so that the first sample starts it).
template <typename A, Pooling kMode, int kVectors>
void PoolPanel(const A* image, int64_t channels, const PixelTap<A>* taps, int64_t per_bin, A start, A count,
               int64_t first, A* acc) {
  using V = typename Lanes<A>::Vector;
  constexpr int64_t kLanes = Lanes<A>::kCount;
  V sum[kVectors];
  for (int i = 0; i < kVectors; ++i) sum[i] = V{} + start;
  for (int64_t s = 0; s < per_bin; ++s) {
    const PixelTap<A>& tap = taps[s];
    const A* p0 = image + tap.pixel[0] * channels + first;
    const A* p1 = image + tap.pixel[1] * channels + first;
    const A* p2 = image + tap.pixel[2] * channels + first;
    const A* p3 = image + tap.pixel[3] * channels + first;
    const A w0 = tap.weight[0], w1 = tap.weight[1], w2 = tap.weight[2], w3 = tap.weight[3];
    for (int i = 0; i < kVectors; ++i) {
      V v0, v1, v2, v3;
      std::memcpy(&v0, p0 + i * kLanes, sizeof(V));
      std::memcpy(&v1, p1 + i * kLanes, sizeof(V));
      std::memcpy(&v2, p2 + i * kLanes, sizeof(V));
      std::memcpy(&v3, p3 + i * kLanes, sizeof(V));
      if constexpr (kMode == Pooling::kMaxOfCorners) {
        const V value = MaxSkippingNaNs(MaxSkippingNaNs(MaxSkippingNaNs(w0 * v0, w1 * v1), w2 * v2), w3 * v3);
        sum[i] = MaxSkippingNaNs(sum[i], value);
      } else if constexpr (kMode == Pooling::kMax) {
        const V value = w0 * v0 + w1 * v1 + w2 * v2 + w3 * v3;
        sum[i] = value > sum[i] ? value : sum[i];
      } else {
        sum[i] += w0 * v0 + w1 * v1 + w2 * v2 + w3 * v3;
      }
    }
  }
  for (int i = 0; i < kVectors; ++i) {
    if constexpr (kMode == Pooling::kMean) sum[i] /= count;
    std::memcpy(acc + first + i * kLanes, &sum[i], sizeof(V));
  }
}

// One channel (those left over after the vectors), the same arithmetic.
template <typename A, Pooling kMode>
void PoolChannel(const A* image, int64_t channels, const PixelTap<A>* taps, int64_t per_bin, A start, A count,
                 int64_t c, A* acc) {
  A sum = start;
  for (int64_t s = 0; s < per_bin; ++s) {
    const PixelTap<A>& tap = taps[s];
    const A p0 = tap.weight[0] * image[tap.pixel[0] * channels + c];
    const A p1 = tap.weight[1] * image[tap.pixel[1] * channels + c];
    const A p2 = tap.weight[2] * image[tap.pixel[2] * channels + c];
    const A p3 = tap.weight[3] * image[tap.pixel[3] * channels + c];
    if constexpr (kMode == Pooling::kMaxOfCorners) {
      sum = MaxSkippingNaN(sum, MaxSkippingNaN(MaxSkippingNaN(MaxSkippingNaN(p0, p1), p2), p3));
    } else if constexpr (kMode == Pooling::kMax) {
      const A value = p0 + p1 + p2 + p3;
      sum = value > sum ? value : sum;
    } else {
      sum += p0 + p1 + p2 + p3;
    }
  }
  acc[c] = kMode == Pooling::kMean ? sum / count : sum;
}

// Asks for the pixels a bin's samples read before they are needed: a roi's samples lie
// scattered over a map larger than the caches, and each reads four runs of C values that the
// hardware prefetcher does not foresee. Bounded, so that a bin of many samples (adaptive
// sampling of a large roi) does not evict what is being read.
template <typename A>
void Prefetch(const A* image, int64_t channels, const PixelTap<A>* taps, int64_t per_bin) {
  constexpr int64_t kLine = 64, kMaxBytes = 16 * 1024;
  const int64_t run = channels * static_cast<int64_t>(sizeof(A));
  const int64_t samples = std::min(per_bin, std::max<int64_t>(1, kMaxBytes / (4 * run)));
  for (int64_t s = 0; s < samples; ++s) {
    for (int k = 0; k < 4; ++k) {
      const char* bytes = reinterpret_cast<const char*>(image + taps[s].pixel[k] * channels);
      for (int64_t b = 0; b < run; b += kLine) __builtin_prefetch(bytes + b, 0, 3);
    }
  }
}

template <typename A, Pooling kMode>
void Pool(const ChannelsLastRoi<A>& roi) {
  constexpr int64_t kLanes = Lanes<A>::kCount, kPanel = kPanelVectors * kLanes;
  const int64_t channels = roi.channels, bins = roi.bins, per_bin = roi.per_bin;
  if (kMode != Pooling::kMean && per_bin == 0) {
    std::fill(roi.out, roi.out + channels * bins, roi.empty_bin);
    return;
  }
  const A start = kMode == Pooling::kMaxOfCorners ? std::numeric_limits<A>::quiet_NaN()
                  : kMode == Pooling::kMax        ? roi.max_start
                                                  : A(0);
  const A count = static_cast<A>(per_bin > 1 ? per_bin : 1);
  for (int64_t group = 0; group < bins; group += kPoolGroupBins) {
    const int64_t group_end = std::min(bins, group + kPoolGroupBins);
    for (int64_t bin = group; bin < group_end; ++bin) {
      const PixelTap<A>* taps = roi.taps + bin * per_bin;
      if (bin + 1 < bins) Prefetch(roi.image, channels, taps + per_bin, per_bin);
      A* acc = roi.scratch + (bin - group) * channels;
      int64_t c = 0;
      for (; c + kPanel <= channels; c += kPanel) {
        PoolPanel<A, kMode, kPanelVectors>(roi.image, channels, taps, per_bin, start, count, c, acc);
      }
      for (; c + kLanes <= channels; c += kLanes) {
        PoolPanel<A, kMode, 1>(roi.image, channels, taps, per_bin, start, count, c, acc);
      }
      for (; c < channels; ++c) PoolChannel<A, kMode>(roi.image, channels, taps, per_bin, start, count, c, acc);
    }
    // [bins of the group, C] -> out[c * bins + bin]: runs of the group's bins per channel.
    Transpose(roi.scratch, group_end - group, channels, channels, roi.out + group, bins);
  }
}

template <typename A>
void Dispatch(const ChannelsLastRoi<A>& roi) {
  if (roi.of_corners) {
    Pool<A, Pooling::kMaxOfCorners>(roi);
  } else if (roi.max) {
    Pool<A, Pooling::kMax>(roi);
  } else {
    Pool<A, Pooling::kMean>(roi);
  }
}

}  // namespace

void PoolChannelsLast(const ChannelsLastRoi<float>& roi) { Dispatch(roi); }
void PoolChannelsLast(const ChannelsLastRoi<double>& roi) { Dispatch(roi); }

}  // namespace ortops::roi_pooling::ORTOPS_ISA_NS
