// A batch of matrices transposed on the device: [B, rows, cols] to [B, cols, rows]. The
// RoIAlign family makes channels-last copies of its maps with it ([N, C, H W] to [N, H W, C]),
// so that the threads of a warp read one pixel's consecutive channels.
#pragma once

#include <cstdint>

#include "device/device_io.h"

namespace ortops::device {

// out[b, j, i] = in[b, i, j]: element e of out (its twin, one element per item).
template <typename T>
struct TransposedElement {
  const T* in;
  T* out;
  int64_t rows, cols;
  ORTOPS_HD void operator()(int64_t e) const {
    const int64_t matrix = rows * cols, b = e / matrix, j = e % matrix / rows, i = e % rows;
    out[e] = in[b * matrix + i * cols + j];
  }
};

#if defined(__CUDACC__)
inline constexpr int kTransposeTile = 32;
inline constexpr int kTransposeRowsPerPass = 8;

// TransposedElement on a GPU (GPU only; TransposedElement is its twin): a 32 x 32 tile per
// block, read along rows and written along columns through shared memory (padded by one
// column, so that a column's reads fall in different banks), both coalesced. Block (x, y, z):
// tile columns x, tile rows y, matrix z (folded into y past the grid's limit of z).
template <typename T>
static __global__ void __launch_bounds__(kTransposeTile* kTransposeRowsPerPass)
    TransposeTiles(const T* in, T* out, int64_t rows, int64_t cols, int64_t tile_rows, int64_t batch) {
  __shared__ T tile[kTransposeTile][kTransposeTile + 1];
  const int64_t flat = blockIdx.y + static_cast<int64_t>(gridDim.y) * blockIdx.z;
  const int64_t b = flat / tile_rows, row0 = flat % tile_rows * kTransposeTile;
  if (b >= batch) return;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTransposeTile;
  const T* matrix_in = in + b * rows * cols;
  T* matrix_out = out + b * rows * cols;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  for (int k = ty; k < kTransposeTile; k += kTransposeRowsPerPass) {
    const int64_t i = row0 + k, j = col0 + tx;
    if (i < rows && j < cols) tile[k][tx] = matrix_in[i * cols + j];
  }
  __syncthreads();
  for (int k = ty; k < kTransposeTile; k += kTransposeRowsPerPass) {
    const int64_t j = col0 + k, i = row0 + tx;
    if (i < rows && j < cols) matrix_out[j * rows + i] = tile[tx][k];
  }
}
#endif

// out [batch, cols, rows] = in [batch, rows, cols] transposed (device memory, not
// overlapping). One launch; nothing waits.
template <typename T>
void TransposeLastTwo(const DeviceIO& io, const T* in, T* out, int64_t batch, int64_t rows, int64_t cols) {
  if (batch <= 0 || rows <= 0 || cols <= 0) return;
#if defined(__CUDACC__)
  const int64_t tile_rows = (rows + kTransposeTile - 1) / kTransposeTile;
  const int64_t tile_cols = (cols + kTransposeTile - 1) / kTransposeTile;
  const int64_t flat = tile_rows * batch;
  constexpr int64_t kMaxGridY = 65535;
  const int64_t grid_z = (flat + kMaxGridY - 1) / kMaxGridY;
  Check(tile_cols <= 0x7fffffff && grid_z <= kMaxGridY, "a transposed map of ", batch, " x ", rows, " x ", cols,
        " is too large for one launch");
  const dim3 grid(static_cast<unsigned>(tile_cols), static_cast<unsigned>(flat < kMaxGridY ? flat : kMaxGridY),
                  static_cast<unsigned>(grid_z));
  io.NoteLaunch();
  TransposeTiles<<<grid, dim3(kTransposeTile, kTransposeRowsPerPass), 0, io.stream()>>>(in, out, rows, cols, tile_rows,
                                                                                        batch);
  io.CheckLaunch("a transposition");
#else
  io.ForEach(batch * rows * cols, TransposedElement<T>{in, out, rows, cols});
#endif
}

}  // namespace ortops::device
