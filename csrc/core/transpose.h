// Transposition of a matrix of float or double (moves only, so bits are kept): the
// channels-last copies that sampling kernels read from, and their [points, C] results
// written back as [C, points]. Included by `*_simd.cc` files, so compiled per
// instruction-set level (core/isa.h): 8 x 8 blocks through AVX registers where the level has
// AVX2, 4 x 4 through SSE2 registers on baseline x86-64, one element at a time elsewhere.
#pragma once

#include <cstdint>
#include <type_traits>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "core/isa.h"

namespace ortops {
inline namespace ORTOPS_ISA_NS {  // compiled per instruction-set level (core/isa.h)

#if defined(__AVX2__)
// One block of kTransposeBlock x kTransposeBlock floats through registers: 8 x 8 (AVX) or
// 4 x 4 (SSE2).
constexpr int64_t kTransposeBlock = 8;
inline void TransposeBlock(const float* s, int64_t src_stride, float* d, int64_t dst_stride) {
  __m256 r[8], t[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(s + k * src_stride);
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) {
    r[k] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int k = 0; k < 4; ++k) {
    _mm256_storeu_ps(d + k * dst_stride, _mm256_permute2f128_ps(r[k], r[k + 4], 0x20));
    _mm256_storeu_ps(d + (k + 4) * dst_stride, _mm256_permute2f128_ps(r[k], r[k + 4], 0x31));
  }
}
#elif defined(__SSE2__)
constexpr int64_t kTransposeBlock = 4;
inline void TransposeBlock(const float* s, int64_t src_stride, float* d, int64_t dst_stride) {
  __m128 r0 = _mm_loadu_ps(s), r1 = _mm_loadu_ps(s + src_stride), r2 = _mm_loadu_ps(s + 2 * src_stride),
         r3 = _mm_loadu_ps(s + 3 * src_stride);
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
  _mm_storeu_ps(d, r0);
  _mm_storeu_ps(d + dst_stride, r1);
  _mm_storeu_ps(d + 2 * dst_stride, r2);
  _mm_storeu_ps(d + 3 * dst_stride, r3);
}
#endif

// dst[j * dst_stride + i] = src[i * src_stride + j] for the whole blocks (TransposeBlock):
// rows [0, row_done) x columns [0, column_done) (none without those registers).
inline void TransposeFloatBlocks(const float* src, int64_t rows, int64_t columns, int64_t src_stride, float* dst,
                                 int64_t dst_stride, int64_t& row_done, int64_t& column_done) {
#if defined(__AVX2__) || defined(__SSE2__)
  row_done = rows / kTransposeBlock * kTransposeBlock;
  column_done = columns / kTransposeBlock * kTransposeBlock;
  for (int64_t i = 0; i < row_done; i += kTransposeBlock) {
    for (int64_t j = 0; j < column_done; j += kTransposeBlock) {
      TransposeBlock(src + i * src_stride + j, src_stride, dst + j * dst_stride + i, dst_stride);
    }
  }
#else
  row_done = 0;
  column_done = 0;
  (void)src, (void)rows, (void)columns, (void)src_stride, (void)dst, (void)dst_stride;
#endif
}

// dst[j * dst_stride + i] = src[i * src_stride + j] for i < rows, j < columns (moves only).
template <typename A>
inline void Transpose(const A* src, int64_t rows, int64_t columns, int64_t src_stride, A* dst, int64_t dst_stride) {
  int64_t row_done = 0, column_done = 0;
  if constexpr (std::is_same_v<A, float>) {
    TransposeFloatBlocks(src, rows, columns, src_stride, dst, dst_stride, row_done, column_done);
  }
  // What the blocks left: the columns right of them for their rows, then the rows below.
  for (int64_t j = column_done; j < columns; ++j) {
    for (int64_t i = 0; i < row_done; ++i) dst[j * dst_stride + i] = src[i * src_stride + j];
  }
  for (int64_t j = 0; j < columns; ++j) {
    for (int64_t i = row_done; i < rows; ++i) dst[j * dst_stride + i] = src[i * src_stride + j];
  }
}

// Pixels [first, last) of `channels` planes of `pixels` elements, channels-last:
// out[p * channels + c] = image[c * pixels + p]. Blocks of 16 channels, so that a block's
// reads (16 rows of the pixels) and its writes stay in L1.
template <typename A>
inline void PlanesToChannelsLastRange(const A* image, int64_t channels, int64_t pixels, int64_t first, int64_t last,
                                      A* out) {
  constexpr int64_t kChannelBlock = 16;
  for (int64_t c = 0; c < channels; c += kChannelBlock) {
    const int64_t block = channels - c < kChannelBlock ? channels - c : kChannelBlock;
    Transpose(image + c * pixels + first, block, last - first, pixels, out + first * channels + c, channels);
  }
}

}  // namespace ORTOPS_ISA_NS
}  // namespace ortops
