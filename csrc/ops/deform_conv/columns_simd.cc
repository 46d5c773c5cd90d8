// Compiled once per instruction-set level (core/isa.h).
#include <algorithm>
#include <cstdint>

#include "math/bilinear.h"
#include "ops/deform_conv/columns.h"

namespace ortops::deform_conv::ORTOPS_ISA_NS {
namespace {

template <typename A>
void Fill(const ColumnSource<A>& s, int64_t group, int64_t begin, int64_t end, A* columns) {
  const int64_t taps = s.kernel_h * s.kernel_w, positions = s.out_h * s.out_w;
  const int64_t group_channels = s.channels / s.groups, rows = group_channels * taps;
  const int64_t per_deform_group = s.channels / s.deform_groups;
  const int64_t first_channel = group * group_channels, end_channel = first_channel + group_channels;
  const int64_t first_d = first_channel / per_deform_group, end_d = (end_channel - 1) / per_deform_group + 1;
  // Neighbours that read 0 point at the zero pixel H * W.
  const int64_t zero_pixel = s.height * s.width;
  for (int64_t p = begin; p < end; ++p) {
    const int64_t oy = p / s.out_w, ox = p % s.out_w;
    A* row = columns + (p - begin) * rows;
    for (int64_t k = 0; k < taps; ++k) {
      const int64_t i = k / s.kernel_w, j = k % s.kernel_w;
      for (int64_t d = first_d; d < end_d; ++d) {
        const int64_t line = d * taps + k;
        // As torchvision: the integer base position, converted, plus the offset.
        const A y = static_cast<A>(oy * s.stride_h - s.pad_h + i * s.dilation_h) +
                    s.offset[(d * 2 * taps + 2 * k) * positions + p];
        const A x = static_cast<A>(ox * s.stride_w - s.pad_w + j * s.dilation_w) +
                    s.offset[(d * 2 * taps + 2 * k + 1) * positions + p];
        const A m = s.mask ? s.mask[line * positions + p] : A(1);
        // torchvision's deform-conv rule (math/bilinear.h).
        const ZeroPaddedSample<A> point = ZeroPaddedBilinear(y, x, s.height, s.width);
        int64_t pixel[4] = {zero_pixel, zero_pixel, zero_pixel, zero_pixel};
        A w[4] = {0, 0, 0, 0};
        if (point.inside) {
          for (int n = 0; n < 4; ++n) {
            if (!point.valid[n]) continue;
            pixel[n] = (point.y0 + n / 2) * s.width + point.x0 + n % 2;
            w[n] = point.weight[n];
          }
        }
        const int64_t c0 = std::max(first_channel, d * per_deform_group);
        const int64_t c1 = std::min(end_channel, (d + 1) * per_deform_group);
        const A* __restrict v0 = s.image + pixel[0] * s.channels + c0;
        const A* __restrict v1 = s.image + pixel[1] * s.channels + c0;
        const A* __restrict v2 = s.image + pixel[2] * s.channels + c0;
        const A* __restrict v3 = s.image + pixel[3] * s.channels + c0;
        A* __restrict out = row + k * group_channels + (c0 - first_channel);
        const A w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
        // torchvision's mask * (w0 v0 + w1 v1 + w2 v2 + w3 v3), in that order, so NaN or
        // infinite masks and values propagate as they do there.
        for (int64_t c = 0; c < c1 - c0; ++c) out[c] = m * (w0 * v0[c] + w1 * v1[c] + w2 * v2[c] + w3 * v3[c]);
      }
    }
  }
}

}  // namespace

void FillColumns(const ColumnSource<float>& source, int64_t group, int64_t begin, int64_t end, float* columns) {
  Fill(source, group, begin, end, columns);
}
void FillColumns(const ColumnSource<double>& source, int64_t group, int64_t begin, int64_t end, double* columns) {
  Fill(source, group, begin, end, columns);
}

}  // namespace ortops::deform_conv::ORTOPS_ISA_NS
