// Outputs [M, C, K] (K values per channel of each of M items: a roi's bins, an image's grid
// points) whose values are read from maps copied channels last ([N, H W, C], made by
// device/transpose.h): value(m, k, c) reads channel c of a few pixels, so the threads that
// compute consecutive channels of one (m, k) read each pixel's channels in one line. On a GPU
// a block computes 32 channels of 64 values of k that way, a warp per k, into a shared tile,
// and writes it out along k, so that the stores are coalesced too.
#pragma once

#include <cstdint>

#include "device/device_io.h"

namespace ortops::device {

// Element e of the [M, C, K] output (the emulated device's twin of ChannelTiles).
template <typename T, typename Value>
struct ChannelTileElement {
  Value value;
  T* output;
  int64_t channels, inner;
  ORTOPS_HD void operator()(int64_t e) const {
    output[e] = value(e / (inner * channels), e % inner, e / inner % channels);
  }
};

#if defined(__CUDACC__)
inline constexpr int kTileChannels = 32;  // a warp's lanes
inline constexpr int kTileWarps = 8;
inline constexpr int kTileInner = 64;

// Block (x, y): item x / inner_tiles, its values k in tile x % inner_tiles, channels 32 y to
// 32 y + 31.
template <typename T, typename Value>
static __global__ void __launch_bounds__(kTileChannels* kTileWarps)
    ChannelTiles(Value value, T* output, int64_t channels, int64_t inner, int64_t inner_tiles) {
  __shared__ T tile[kTileInner][kTileChannels + 1];
  const int64_t m = blockIdx.x / inner_tiles, first_k = static_cast<int64_t>(blockIdx.x) % inner_tiles * kTileInner;
  const int64_t first_c = static_cast<int64_t>(blockIdx.y) * kTileChannels;
  const int lane = static_cast<int>(threadIdx.x) % kTileChannels, warp = static_cast<int>(threadIdx.x) / kTileChannels;
  const int64_t here_c = channels - first_c < kTileChannels ? channels - first_c : kTileChannels;
  const int64_t here_k = inner - first_k < kTileInner ? inner - first_k : kTileInner;
  for (int64_t k = warp; k < here_k; k += kTileWarps) {
    if (lane < here_c) tile[k][lane] = value(m, first_k + k, first_c + lane);
  }
  __syncthreads();
  T* out = output + (m * channels + first_c) * inner + first_k;
  for (int64_t i = threadIdx.x; i < here_c * here_k; i += blockDim.x) {
    const int64_t c = i / here_k, k = i % here_k;
    out[c * inner + k] = tile[k][c];
  }
}
#endif

// output[m, c, k] = value(m, k, c) for every m < outer, c < channels, k < inner. One launch;
// nothing waits.
template <typename T, typename Value>
void WriteChannelTiles(const DeviceIO& io, const Value& value, T* output, int64_t outer, int64_t channels,
                       int64_t inner) {
  if (outer <= 0 || channels <= 0 || inner <= 0) return;
#if defined(__CUDACC__)
  const int64_t inner_tiles = (inner + kTileInner - 1) / kTileInner;
  const int64_t channel_tiles = (channels + kTileChannels - 1) / kTileChannels;
  Check(outer <= 0x7fffffff / inner_tiles && channel_tiles <= 65535, "an output of ", outer, " x ", channels, " x ",
        inner, " values is too large for one launch");
  io.NoteLaunch();
  ChannelTiles<<<dim3(static_cast<unsigned>(outer * inner_tiles), static_cast<unsigned>(channel_tiles)),
                 kTileChannels * kTileWarps, 0, io.stream()>>>(value, output, channels, inner, inner_tiles);
  io.CheckLaunch("a pass over channels-last maps");
#else
  io.ForEach(outer * channels * inner, ChannelTileElement<T, Value>{value, output, channels, inner});
#endif
}

// Whether a node that reads `samples` points of `pixels` map pixels (all its maps', each read
// for every channel) reads them from a channels-last copy of `copy_bytes`: where the points
// are many beside the pixels, the copy (one coalesced pass over the maps) costs less than it
// saves. A point's four corners are then four lines for 32 channels, where planes make them
// four reads per channel. Maps over kMaxCopyBytes stay planar, so that a large input does not
// need twice its memory.
inline constexpr int64_t kMaxCopyBytes = int64_t{1} << 29;
inline bool ReadsChannelsLast(int64_t samples, int64_t pixels, int64_t channels, int64_t copy_bytes) {
  return channels > 1 && copy_bytes <= kMaxCopyBytes && static_cast<double>(samples) * 4 >= static_cast<double>(pixels);
}

}  // namespace ortops::device
