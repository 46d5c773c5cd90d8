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

// image[c, pixel] -> out[pixel, c] for one image of `channels` planes of `pixels` elements,
// in tiles of pixels on the session's thread pool; converted to Out (float16 to float).
template <typename T, typename Out>
void ToChannelsLast(const KernelIO& io, const T* image, int64_t channels, int64_t pixels, Out* out) {
  static_assert(std::is_same_v<Out, float> || std::is_same_v<Out, double>, "copies are made in float or double");
  constexpr int64_t kTile = 64;
  const auto tiles = static_cast<size_t>((pixels + kTile - 1) / kTile);
  if constexpr (std::is_same_v<T, Out> && (std::is_same_v<T, float> || std::is_same_v<T, double>)) {
    io.ParallelFor(tiles, [&](size_t tile) {
      const int64_t first = static_cast<int64_t>(tile) * kTile;
      channels_last::TransposeTile(image, channels, pixels, first, std::min(pixels, first + kTile), out);
    });
  } else {
    static_assert(std::is_same_v<T, Half> && std::is_same_v<Out, float>, "only float16 is copied in another type");
    // Widened first (float16 to float: dispatched, core/half_convert.h), a tile of every plane
    // at a time, then transposed like float; a scratch tile per task, not per tile.
    constexpr size_t kTasks = 64;
    io.ParallelForRanges(tiles, kTasks, [&](size_t begin, size_t end) {
      ScratchVector<Out> widened = io.Vector<Out>(static_cast<size_t>(channels * kTile));
      for (size_t tile = begin; tile < end; ++tile) {
        const int64_t first = static_cast<int64_t>(tile) * kTile, count = std::min(pixels - first, kTile);
        for (int64_t c = 0; c < channels; ++c) {
          WidenHalves(image + c * pixels + first, count, widened.data() + c * count);
        }
        channels_last::TransposeTile(widened.data(), channels, count, 0, count, out + first * channels);
      }
    });
  }
}

}  // namespace ortops
