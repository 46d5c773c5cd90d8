// The channels-last copy of an image that sampling kernels (RoIAlign, grid sampling,
// deformable convolution) read from, so that one bilinear tap reads every channel of a pixel
// contiguously.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

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
  constexpr int64_t kTile = 64;
  io.ParallelFor(static_cast<size_t>((pixels + kTile - 1) / kTile), [&](size_t tile) {
    const int64_t first = static_cast<int64_t>(tile) * kTile, last = std::min(pixels, first + kTile);
    if constexpr (std::is_same_v<T, Out> && (std::is_same_v<T, float> || std::is_same_v<T, double>)) {
      channels_last::TransposeTile(image, channels, pixels, first, last, out);
    } else {
      // Blocks of 16 channels, so that a block's reads (16 rows of the tile) and writes stay in L1.
      constexpr int64_t kBlock = 16;
      for (int64_t block = 0; block < channels; block += kBlock) {
        const int64_t end = std::min(channels, block + kBlock);
        for (int64_t p = first; p < last; ++p) {
          for (int64_t c = block; c < end; ++c) out[p * channels + c] = static_cast<Out>(image[c * pixels + p]);
        }
      }
    }
  });
}

}  // namespace ortops
