// Code that the device path calls as well as the CPU kernels: the shared math of csrc/math,
// float16 conversions, geometry. Under nvcc such functions are compiled for the host and for
// the GPU; in every other compilation (the CPU kernels, and the device path compiled for the
// host in CI: csrc/device/README.md) the marker is empty.
#pragma once

#if defined(__CUDACC__)
#define ORTOPS_HD __host__ __device__
#else
#define ORTOPS_HD
#endif

// Before a loop of a constant trip count whose iterations must become registers on the GPU
// (an array indexed at run time would go to local memory); nothing for the host compiler.
#if defined(__CUDACC__)
#define ORTOPS_UNROLL _Pragma("unroll")
#else
#define ORTOPS_UNROLL
#endif

#include <cmath>

namespace ortops {

// fmax(a, b): the larger, a NaN skipped unless both are. On the host the same answer as glibc's
// fmax/fmaxf (b where they compare equal, as its maxss does: -0 and +0 included) without its
// call, which a loop that takes four per bilinear sample pays for; on the GPU CUDA's fmax.
template <typename T>
ORTOPS_HD inline T MaxSkippingNaN(T a, T b) {
#if defined(__CUDA_ARCH__)
  return fmax(a, b);
#else
  return a > b || b != b ? a : b;
#endif
}

}  // namespace ortops
