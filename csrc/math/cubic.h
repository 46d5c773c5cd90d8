// Cubic convolution weights (Keys' kernel with PyTorch's A = -0.75), as PyTorch's bicubic
// upsampling and grid_sample compute them: the arithmetic is kept operation for operation.
#pragma once

#include "core/host_device.h"

namespace ortops {

// The kernel for a distance |x| <= 1 from the tap.
template <typename T>
ORTOPS_HD T CubicNear(T x, T a) {
  return ((a + 2) * x - (a + 3)) * x * x + 1;
}

// The kernel for a distance 1 < |x| < 2 from the tap.
template <typename T>
ORTOPS_HD T CubicFar(T x, T a) {
  return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
}

// The weights of taps floor(x) - 1 .. floor(x) + 2 for a point at fraction t = x - floor(x).
template <typename T>
ORTOPS_HD void CubicCoefficients(T t, T out[4]) {
  const T a = T(-0.75);
  out[0] = CubicFar<T>(t + 1, a);
  out[1] = CubicNear<T>(t, a);
  out[2] = CubicNear<T>(1 - t, a);
  out[3] = CubicFar<T>(2 - t, a);
}

}  // namespace ortops
