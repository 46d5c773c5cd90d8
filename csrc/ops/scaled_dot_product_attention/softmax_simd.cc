// Compiled once per instruction-set level (core/isa.h).
#include <cstdint>

#include "ops/scaled_dot_product_attention/softmax.h"
#include "ops/scaled_dot_product_attention/softmax_row.h"

namespace ortops::scaled_dot_product_attention::ORTOPS_ISA_NS {

void SoftmaxRow(float* row, int64_t count, float scale, const float* mask, int64_t mask_stride) {
  ScaledSoftmaxRow(row, count, scale, mask, mask_stride);
}

}  // namespace ortops::scaled_dot_product_attention::ORTOPS_ISA_NS
