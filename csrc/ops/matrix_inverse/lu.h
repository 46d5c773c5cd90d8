// The inverse of one matrix (LU factorisation with partial pivoting, then solves, in
// float64), shared by MatrixInverse's CPU kernel and its device path (one thread per
// matrix there), so that both return the same bits and the same errors.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

#include "core/custom_op.h"
#include "core/host_device.h"

namespace ortops::matrix_inverse {

// Outcome of one matrix, kept per matrix so that the error names the lowest failing index
// whatever order the threads finish in.
enum class Outcome : uint8_t { kInverted, kNotFinite, kSingular };

// Scratch for one matrix at a time, in float64: the LU factors and the solution, row-major.
struct Workspace {
  double* lu;
  double* solution;
  int64_t* original_row;  // original_row[k]: the input row that pivoting moved to row k
};

// Factors the m x m row-major `lu` in place into P A = L U: U on and above the diagonal, the
// unit lower triangle L below it. Right-looking, so every update is a contiguous row axpy.
// Returns false at the first exactly zero pivot (LAPACK reports it as info > 0).
ORTOPS_HD inline bool FactorLu(double* lu, int64_t* original_row, int64_t m) {
  for (int64_t r = 0; r < m; ++r) original_row[r] = r;
  for (int64_t k = 0; k < m; ++k) {
    int64_t pivot = k;
    double largest = std::abs(lu[k * m + k]);
    for (int64_t r = k + 1; r < m; ++r) {
      const double candidate = std::abs(lu[r * m + k]);
      if (candidate > largest) {  // strictly greater: the first maximum wins, as in LAPACK's idamax
        pivot = r;
        largest = candidate;
      }
    }
    if (largest == 0.0) return false;
    double* pivot_row = lu + k * m;
    if (pivot != k) {
      double* other = lu + pivot * m;
      for (int64_t c = 0; c < m; ++c) std::swap(pivot_row[c], other[c]);
      std::swap(original_row[k], original_row[pivot]);
    }
    const double pivot_value = pivot_row[k];
    for (int64_t r = k + 1; r < m; ++r) {
      double* row = lu + r * m;
      const double multiplier = row[k] / pivot_value;
      row[k] = multiplier;
      if (multiplier == 0.0) continue;
      for (int64_t c = k + 1; c < m; ++c) row[c] -= multiplier * pivot_row[c];
    }
  }
  return true;
}

// Computes X = U^-1 L^-1 into `solution`, so that A^-1 = X P. Forward substitution L Z = I
// (row i of Z is zero beyond column i, so each update stops there), then back substitution
// U X = Z. Every step subtracts a multiple of a solution row: contiguous and vectorisable.
// Solving against P I, as getrs does, only adds exact zeros, so the rounding is the same.
ORTOPS_HD inline void SolveForInverse(const double* lu, double* solution, int64_t m) {
  for (int64_t i = 0; i < m; ++i) {
    double* row = solution + i * m;
    for (int64_t c = 0; c < m; ++c) row[c] = 0.0;
    row[i] = 1.0;
    for (int64_t k = 0; k < i; ++k) {
      const double factor = lu[i * m + k];
      if (factor == 0.0) continue;
      const double* solved = solution + k * m;
      for (int64_t c = 0; c <= k; ++c) row[c] -= factor * solved[c];
    }
  }
  for (int64_t i = m - 1; i >= 0; --i) {
    double* row = solution + i * m;
    for (int64_t k = i + 1; k < m; ++k) {
      const double factor = lu[i * m + k];
      if (factor == 0.0) continue;
      const double* solved = solution + k * m;
      for (int64_t c = 0; c < m; ++c) row[c] -= factor * solved[c];
    }
    const double reciprocal_pivot = 1.0 / lu[i * m + i];
    for (int64_t c = 0; c < m; ++c) row[c] *= reciprocal_pivot;
  }
}

template <typename T>
ORTOPS_HD Outcome Invert(const T* matrix, T* inverse, int64_t m, const Workspace& work) {
  const int64_t size = m * m;
  bool finite = true;
  for (int64_t i = 0; i < size; ++i) {
    finite &= std::isfinite(matrix[i]);
    work.lu[i] = static_cast<double>(matrix[i]);
  }
  if (!finite) return Outcome::kNotFinite;
  if (!FactorLu(work.lu, work.original_row, m)) return Outcome::kSingular;
  SolveForInverse(work.lu, work.solution, m);
  // A^-1 = X P: column k of X is column original_row[k] of the inverse.
  for (int64_t r = 0; r < m; ++r) {
    const double* solved = work.solution + r * m;
    T* out = inverse + r * m;
    for (int64_t k = 0; k < m; ++k) out[work.original_row[k]] = static_cast<T>(solved[k]);
  }
  return Outcome::kInverted;
}

// The batch of matrices in input 'X', checked as both kernels check it.
template <typename T>
struct Matrices {
  ConstTensor<T> x;
  int64_t m, batch;
};

template <typename T, typename IO>
Matrices<T> ReadMatrices(const IO& io) {
  Matrices<T> in{io.template Input<T>(0), 0, 1};
  const ConstTensor<T>& x = in.x;
  const size_t rank = x.rank();
  Check(rank >= 2, "input 'X' must have rank 2 or more ([..., M, M]), got shape ", ShapeText{x.shape});
  in.m = x.dim(rank - 1);
  Check(x.dim(rank - 2) == in.m, "input 'X' must hold square matrices ([..., M, M]), got shape ", ShapeText{x.shape});
  for (size_t axis = 0; axis + 2 < rank; ++axis) in.batch *= x.dim(axis);
  return in;
}

// The error for matrix b of a failed inversion, if it failed.
inline void CheckOutcome(Outcome outcome, int64_t b, int64_t batch, const Shape& shape) {
  Check(outcome != Outcome::kNotFinite, "input 'X' contains NaN or infinity (matrix ", b, " of ", batch, ", shape ",
        ShapeText{shape}, ")");
  Check(outcome != Outcome::kSingular, "matrix ", b, " of ", batch, " in input 'X' is singular");
}

}  // namespace ortops::matrix_inverse
