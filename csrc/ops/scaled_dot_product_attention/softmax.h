// Attention's softmax over one row of scores, the loop between its two matrix products:
// compiled per instruction-set level (core/isa.h) in softmax_simd.cc, so that its passes run
// as wide as the CPU's vectors. The same operations in the same order at every level.
#pragma once

#include <cstdint>

#include "core/isa.h"

namespace ortops::scaled_dot_product_attention {

// In place: row * scale (+ mask), then the softmax with the row's maximum subtracted. The mask
// is read at mask[j * mask_stride] (stride 0: one value for the row), or not at all if null.
// A row holding NaN or +inf, or all -inf, becomes NaN throughout, as in PyTorch and cuDNN.
ORTOPS_ISA_DECLARE(void SoftmaxRow(float* row, int64_t count, float scale, const float* mask, int64_t mask_stride))

}  // namespace ortops::scaled_dot_product_attention
