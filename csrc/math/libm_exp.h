// e^x as the CPU kernels compute it (the C library's exp, on both ends of an op whose
// original used it: soft-NMS's gaussian decay, the sigmoid of score activations, box
// decoding), callable from device code too.
#pragma once

#include <cmath>

#include "core/host_device.h"

namespace ortops {

// On the host (the CPU kernels, the emulated device): std::exp. On a GPU, whose expf may be
// 2 ulp off, float goes through the double exp (1 ulp) and one rounding, so it agrees with the
// host's expf but for results within about 2^-29 of a rounding boundary; double takes CUDA's
// exp, which can differ from the host's in the last bit.
template <typename A>
ORTOPS_HD inline A LibmExp(A x) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(A) == sizeof(float)) {
    return static_cast<A>(::exp(static_cast<double>(x)));
  } else {
    return ::exp(x);
  }
#else
  return std::exp(x);
#endif
}

}  // namespace ortops
