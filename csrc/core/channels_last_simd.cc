// Compiled once per instruction-set level (core/isa.h).
#include "core/channels_last.h"
#include "core/transpose.h"

namespace ortops::channels_last::ORTOPS_ISA_NS {

void Transpose(const float* image, int64_t channels, int64_t pixels, int64_t first, int64_t last, float* out) {
  PlanesToChannelsLastRange(image, channels, pixels, first, last, out);
}
void Transpose(const double* image, int64_t channels, int64_t pixels, int64_t first, int64_t last, double* out) {
  PlanesToChannelsLastRange(image, channels, pixels, first, last, out);
}

}  // namespace ortops::channels_last::ORTOPS_ISA_NS
