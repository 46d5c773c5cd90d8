// A float GEMM whose left operand (the weights of a convolution) is packed once, in panels,
// and whose right operand is a block of rows that the caller has just written and that
// still sits in the core's cache (deformable convolution's sampled columns): the product
// of a block is computed by the thread that wrote it, without a copy into a GEMM's own
// layout. Compiled per instruction-set level (packed_gemm_simd.cc), where AVX-512 and AVX2
// have it (SSE2 has no fused multiply-add); at other levels callers use ONNX Runtime's Gemm.
#pragma once

#include <cstdint>

#include "core/half.h"
#include "core/isa.h"

namespace ortops {

// Weights are packed in panels of kGemmPanel rows: element (row, k) of an m x depth matrix
// lies at PackedGemmIndex(row, k, depth), and the rows past m up to a whole panel are zeros.
// (Constants here are not `inline`: the per-level objects that include this header must
// define no weak symbol outside their level's namespace; see isa.h.)
constexpr int64_t kGemmPanel = 32;
inline int64_t PackedGemmSize(int64_t rows, int64_t depth) {
  return (rows + kGemmPanel - 1) / kGemmPanel * kGemmPanel * depth;
}
inline int64_t PackedGemmIndex(int64_t row, int64_t k, int64_t depth) {
  return ((row / kGemmPanel) * depth + k) * kGemmPanel + row % kGemmPanel;
}

// out[i * out_stride + j] = sum over k of weights(i, k) * columns[j * depth + k], plus
// bias[i] (after the sum, as torchvision adds it) or plus 0, rounded once to T, for i < m
// and j < n. Each sum is one chain of fused multiply-adds in k order, starting from 0, so
// every level that has PackedGemm returns the same bits.
template <typename T>
struct PackedProduct {
  const float* weights;  // packed, PackedGemmSize(m, depth) elements
  const float* columns;  // [n, depth], row-major
  int64_t m, depth, n;
  const T* bias;  // [m], or null
  T* out;
  int64_t out_stride;
};

ORTOPS_ISA_DECLARE(bool PackedGemmAvailable(); int64_t PackedGemmTileColumns();
                   void RunPackedGemm(const PackedProduct<float>& product);
                   void RunPackedGemm(const PackedProduct<Half>& product))

// Whether the active level has PackedGemm.
inline bool HasPackedGemm() { return ORTOPS_ISA_CALL(PackedGemmAvailable); }

// Columns per tile at the active level, the product's unit of work: blocks of a multiple of it
// run no narrower tiles, which are slower.
inline int64_t GemmTileColumns() { return ORTOPS_ISA_CALL(PackedGemmTileColumns); }

template <typename T>
void PackedGemm(const PackedProduct<T>& product) {
  ORTOPS_ISA_CALL(RunPackedGemm, product);
}

}  // namespace ortops
