// The deformed im2col of deformable convolution, the hot loop that the GEMM follows:
// compiled per instruction-set level (core/isa.h) in columns_simd.cc.
#pragma once

#include <cstdint>

#include "core/isa.h"

namespace ortops::deform_conv {

// One image's inputs to the column matrix, in the compute type A (float or double).
template <typename A>
struct ColumnSource {
  const A* image;   // [H * W + 1, C]: channels-last, then one pixel of zeros
  const A* offset;  // [2 * deform_groups * kh * kw, H_out * W_out]
  const A* mask;    // [deform_groups * kh * kw, H_out * W_out], or null (DCNv1)
  int64_t channels, height, width, out_h, out_w, kernel_h, kernel_w;
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  int64_t groups, deform_groups;
};

// Rows [begin, end) of convolution group `group`'s column matrix: for each output position,
// its samples at every tap of every input channel of the group, columns ordered (tap,
// channel). `columns` points at row `begin`.
ORTOPS_ISA_DECLARE(void FillColumns(const ColumnSource<float>& source, int64_t group, int64_t begin, int64_t end,
                                    float* columns);
                   void FillColumns(const ColumnSource<double>& source, int64_t group, int64_t begin, int64_t end,
                                    double* columns))

}  // namespace ortops::deform_conv
