// Compiled once per instruction-set level (core/isa.h).
//
// The product is computed in tiles of one weight panel (32 rows of the output) by kTile
// columns, each tile's sums held in registers for the whole depth: per k, the panel's 32
// weights are loaded once and each column's element is broadcast against them. AVX-512
// holds 14 columns x 2 vectors of 16 (28 accumulators of its 32 registers); at 4096
// columns of depth 2304 it runs at about 88% of the measured FMA peak of an Intel Xeon
// (Emerald Rapids) core, where ONNX Runtime's Gemm, which repacks both operands per call,
// reaches about 77%; on an AMD Zen 5 core, at the peak within measurement. A tile is then
// written transposed, with the bias, into the output's rows.
//
// Only AVX-512 dispatches here. At AVX2, a 6 x 16 tile was slower than ONNX Runtime's Gemm
// on this AVX-512 machine, which runs MLAS's AVX-512 kernel whatever ortops' level, and no
// AVX2-only CPU was at hand to settle it; SSE2 has no fused multiply-add. The other levels
// keep a scalar loop with the same roundings, which states the contract and is never run.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <utility>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "core/packed_gemm.h"

namespace ortops::ORTOPS_ISA_NS {
namespace {

constexpr int kTile = kGemmTileColumns;

// sums[c][r] = sum over k of panel[k][r] * columns[c * depth + k], for c < kColumns and the
// panel's 32 rows r, each as a chain of fused multiply-adds in k order.
template <int kColumns>
void Tile(const float* __restrict panel, const float* __restrict columns, int64_t depth, int live_rows,
          float (&sums)[kTile][kGemmPanel]) {
#if defined(__AVX512F__)
  (void)live_rows;
  __m512 low[kColumns], high[kColumns];
  for (int c = 0; c < kColumns; ++c) low[c] = high[c] = _mm512_setzero_ps();
  for (int64_t k = 0; k < depth; ++k) {
    const __m512 w_low = _mm512_loadu_ps(panel + k * kGemmPanel);
    const __m512 w_high = _mm512_loadu_ps(panel + k * kGemmPanel + 16);
#pragma GCC unroll 14
    for (int c = 0; c < kColumns; ++c) {
      const __m512 x = _mm512_set1_ps(columns[c * depth + k]);
      low[c] = _mm512_fmadd_ps(x, w_low, low[c]);
      high[c] = _mm512_fmadd_ps(x, w_high, high[c]);
    }
  }
  for (int c = 0; c < kColumns; ++c) {
    _mm512_storeu_ps(sums[c], low[c]);
    _mm512_storeu_ps(sums[c] + 16, high[c]);
  }
#else
  for (int c = 0; c < kColumns; ++c) {
    for (int r = 0; r < live_rows; ++r) {
      float sum = 0;
      for (int64_t k = 0; k < depth; ++k) sum = std::fma(columns[c * depth + k], panel[k * kGemmPanel + r], sum);
      sums[c][r] = sum;
    }
  }
#endif
}

using TileFunction = void (*)(const float*, const float*, int64_t, int, float (&)[kTile][kGemmPanel]);

template <int... kIndex>
constexpr auto MakeTiles(std::integer_sequence<int, kIndex...>) {
  return std::array<TileFunction, kTile>{&Tile<kIndex + 1>...};
}
// kTiles[c - 1] computes a tile of c columns.
constexpr std::array<TileFunction, kTile> kTiles = MakeTiles(std::make_integer_sequence<int, kTile>{});

template <typename T>
void Multiply(const PackedProduct<T>& p) {
  alignas(64) float sums[kTile][kGemmPanel];
  for (int64_t first_row = 0; first_row < p.m; first_row += kGemmPanel) {
    const int live_rows = static_cast<int>(std::min(kGemmPanel, p.m - first_row));
    const float* panel = p.weights + first_row * p.depth;
    for (int64_t first_column = 0; first_column < p.n; first_column += kTile) {
      const int columns = static_cast<int>(std::min<int64_t>(kTile, p.n - first_column));
      kTiles[columns - 1](panel, p.columns + first_column * p.depth, p.depth, live_rows, sums);
      for (int r = 0; r < live_rows; ++r) {
        const float bias = p.bias ? static_cast<float>(p.bias[first_row + r]) : 0.0f;
        T* out = p.out + (first_row + r) * p.out_stride + first_column;
        for (int c = 0; c < columns; ++c) out[c] = static_cast<T>(sums[c][r] + bias);
      }
    }
  }
}

}  // namespace

bool PackedGemmAvailable() {
#if defined(__AVX512F__)
  return true;
#else
  return false;
#endif
}

void RunPackedGemm(const PackedProduct<float>& product) { Multiply(product); }
void RunPackedGemm(const PackedProduct<Half>& product) { Multiply(product); }

}  // namespace ortops::ORTOPS_ISA_NS
