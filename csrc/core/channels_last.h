// The channels-last copy of an image that sampling kernels (RoIAlign, deformable conv) read
// from, so that one bilinear tap reads every channel of a pixel contiguously.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/kernel_io.h"

namespace ortops {

// image[c, pixel] -> out[pixel, c] for one image of `channels` planes of `pixels` elements,
// in tiles of pixels on the session's thread pool; converted to Out (float16 to float).
template <typename T, typename Out>
void ToChannelsLast(const KernelIO& io, const T* image, int64_t channels, int64_t pixels, Out* out) {
  constexpr int64_t kTile = 64;
  io.ParallelFor(static_cast<size_t>((pixels + kTile - 1) / kTile), [&](size_t tile) {
    const int64_t first = static_cast<int64_t>(tile) * kTile, last = std::min(pixels, first + kTile);
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t p = first; p < last; ++p) out[p * channels + c] = static_cast<Out>(image[c * pixels + p]);
    }
  });
}

}  // namespace ortops
