// The channels-last copy of an image that sampling kernels (RoIAlign, deformable conv) read
// from, so that one bilinear tap reads every channel of a pixel contiguously.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/kernel_io.h"

namespace ortops {

// image[c, pixel] -> out[pixel, c] for one image of `channels` planes of `pixels` elements,
// in tiles of pixels on the session's thread pool; converted to Out (float16 to float).
// Within a tile, blocks of kBlock channels: a block's reads (kBlock rows of the tile) and
// writes (one line per pixel) stay in L1, where whole-tile columns of all channels did not
// (about twice as fast for 256 channels).
template <typename T, typename Out>
void ToChannelsLast(const KernelIO& io, const T* image, int64_t channels, int64_t pixels, Out* out) {
  constexpr int64_t kTile = 32, kBlock = 16;
  io.ParallelFor(static_cast<size_t>((pixels + kTile - 1) / kTile), [&](size_t tile) {
    const int64_t first = static_cast<int64_t>(tile) * kTile, last = std::min(pixels, first + kTile);
    for (int64_t block = 0; block < channels; block += kBlock) {
      const int64_t end = std::min(channels, block + kBlock);
      for (int64_t p = first; p < last; ++p) {
        for (int64_t c = block; c < end; ++c) out[p * channels + c] = static_cast<Out>(image[c * pixels + p]);
      }
    }
  });
}

}  // namespace ortops
