// The channels-last copy of an image that sampling kernels (RoIAlign, grid sampling,
// deformable convolution) read from, so that one bilinear tap reads every channel of a pixel
// contiguously.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/half_convert.h"
#include "core/isa.h"
#include "core/kernel_io.h"

namespace ortops {
namespace channels_last {

// Pixels [first, last) of `channels` planes of `pixels` elements, channels-last:
// out[p * channels + c] = image[c * pixels + p], through register transposes of small
// blocks (core/transpose.h; moves only, so bits are kept). Compiled per instruction-set
// level in channels_last_simd.cc.
ORTOPS_ISA_DECLARE(void Transpose(const float* image, int64_t channels, int64_t pixels, int64_t first, int64_t last,
                                  float* out);
                   void Transpose(const double* image, int64_t channels, int64_t pixels, int64_t first, int64_t last,
                                  double* out))

template <typename A>
void TransposeTile(const A* image, int64_t channels, int64_t pixels, int64_t first, int64_t last, A* out) {
  ORTOPS_ISA_CALL(Transpose, image, channels, pixels, first, last, out);
}

}  // namespace channels_last

// The channels-last copy is made in tiles of this many pixels.
inline constexpr int64_t kChannelsLastTile = 64;

// Tiles [begin, end) of ToChannelsLast's copy, on the calling thread. Float16 is widened
// first (dispatched, core/half_convert.h), a tile of every plane at a time, through
// `widened` (channels * kChannelsLastTile floats; unused for float and double), then
// transposed like float.
template <typename T, typename Out>
void ToChannelsLastTiles(const T* image, int64_t channels, int64_t pixels, int64_t begin, int64_t end, Out* widened,
                         Out* out) {
  static_assert(std::is_same_v<Out, float> || std::is_same_v<Out, double>, "copies are made in float or double");
  const int64_t first = begin * kChannelsLastTile, last = std::min(pixels, end * kChannelsLastTile);
  if constexpr (std::is_same_v<T, Out>) {
    channels_last::TransposeTile(image, channels, pixels, first, last, out);
  } else {
    static_assert(std::is_same_v<T, Half> && std::is_same_v<Out, float>, "only float16 is copied in another type");
    for (int64_t tile = first; tile < last; tile += kChannelsLastTile) {
      const int64_t count = std::min(last - tile, kChannelsLastTile);
      for (int64_t c = 0; c < channels; ++c) WidenHalves(image + c * pixels + tile, count, widened + c * count);
      channels_last::TransposeTile(widened, channels, count, 0, count, out + tile * channels);
    }
  }
}

// image[c, pixel] -> out[pixel, c] for one image of `channels` planes of `pixels` elements,
// in tiles of pixels on the session's thread pool; converted to Out (float16 to float).
template <typename T, typename Out>
void ToChannelsLast(const KernelIO& io, const T* image, int64_t channels, int64_t pixels, Out* out) {
  const auto tiles = static_cast<size_t>((pixels + kChannelsLastTile - 1) / kChannelsLastTile);
  if constexpr (std::is_same_v<T, Out>) {
    io.ParallelFor(tiles, [&](size_t tile) {
      const auto t = static_cast<int64_t>(tile);
      ToChannelsLastTiles(image, channels, pixels, t, t + 1, static_cast<Out*>(nullptr), out);
    });
  } else {
    // A scratch tile per task, not per tile.
    constexpr size_t kTasks = 64;
    io.ParallelForRanges(tiles, kTasks, [&](size_t begin, size_t end) {
      ScratchVector<Out> widened = io.Vector<Out>(static_cast<size_t>(channels * kChannelsLastTile));
      ToChannelsLastTiles(image, channels, pixels, static_cast<int64_t>(begin), static_cast<int64_t>(end),
                          widened.data(), out);
    });
  }
}

}  // namespace ortops
