// Inverse of a batch of square matrices by Gauss-Jordan elimination with partial pivoting.
#include "ops/matrix_inverse/matrix_inverse.h"

#include <cmath>
#include <utility>
#include <vector>

namespace ortops::matrix_inverse {
namespace {

constexpr IoSpec kInputs[] = {
    {"X", ElemType::kTypeParam, "`[..., M, M]` a batch of square matrices (any number of batch dimensions)"},
};
constexpr IoSpec kOutputs[] = {
    {"Y", ElemType::kTypeParam, "`[..., M, M]` the inverse of each matrix"},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "Inverse of every matrix in a batch, matching `torch.linalg.inv`. Gauss-Jordan elimination "
        "with partial pivoting (the largest remaining pivot in absolute value, as LAPACK's getrf), "
        "computed in float64 for both element types, so float32 results are correctly rounded "
        "inverses of well-conditioned matrices. A matrix whose elimination meets an exactly zero "
        "pivot is singular: that is an error naming the matrix, as `torch.linalg.inv` raises. "
        "NaN or infinity in the input is an error. Empty batches and `M = 0` give empty outputs.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = {},
};

namespace {

// Inverts the m x m row-major matrix `a` into `inverse`, using `work` (2 m^2 doubles) as
// the augmented matrix [a | I]. Returns false if a pivot is exactly zero.
template <typename T>
bool Invert(const T* a, T* inverse, int64_t m, double* work) {
  const int64_t width = 2 * m;
  for (int64_t r = 0; r < m; ++r) {
    double* row = work + r * width;
    for (int64_t c = 0; c < m; ++c) row[c] = static_cast<double>(a[r * m + c]);
    for (int64_t c = 0; c < m; ++c) row[m + c] = c == r ? 1.0 : 0.0;
  }
  for (int64_t col = 0; col < m; ++col) {
    int64_t pivot = col;
    for (int64_t r = col + 1; r < m; ++r) {
      if (std::abs(work[r * width + col]) > std::abs(work[pivot * width + col])) pivot = r;
    }
    if (work[pivot * width + col] == 0.0) return false;
    double* pivot_row = work + pivot * width;
    double* target = work + col * width;
    if (pivot != col) {
      for (int64_t c = 0; c < width; ++c) std::swap(pivot_row[c], target[c]);
    }
    // Eliminate with the unscaled pivot row, as LU does: a row equal to the pivot row then
    // cancels exactly (multiplier 1), so exactly singular matrices are found as in LAPACK.
    const double pivot_value = target[col];
    for (int64_t r = 0; r < m; ++r) {
      if (r == col) continue;
      double* row = work + r * width;
      const double factor = row[col] / pivot_value;
      if (factor == 0.0) continue;
      for (int64_t c = col; c < width; ++c) row[c] -= factor * target[c];
    }
    for (int64_t c = col; c < width; ++c) target[c] /= pivot_value;
  }
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < m; ++c) inverse[r * m + c] = static_cast<T>(work[r * width + m + c]);
  }
  return true;
}

template <typename T>
class MatrixInverseKernel : public KernelBase {
 public:
  using Element = T;
  static constexpr const OpSchema& kSchema = matrix_inverse::kSchema;

  MatrixInverseKernel(const Attributes&, const OpDef& def) : KernelBase(def) {}

  void Compute(const KernelIO& io) const {
    const ConstTensor<T> x = io.Input<T>(0);
    const size_t rank = x.rank();
    Check(rank >= 2, "input 'X' must have rank 2 or more ([..., M, M]), got shape ", ShapeText{x.shape});
    const int64_t m = x.dim(rank - 1);
    Check(x.dim(rank - 2) == m, "input 'X' must hold square matrices ([..., M, M]), got shape ", ShapeText{x.shape});
    int64_t batch = 1;
    for (size_t axis = 0; axis + 2 < rank; ++axis) batch *= x.dim(axis);
    const int64_t size = x.size();
    for (int64_t i = 0; i < size; ++i) Check(std::isfinite(x.data[i]), "input 'X' contains NaN or infinity");

    T* y = io.Output<T>(0, x.shape);
    if (size == 0) return;
    const size_t matrix_size = static_cast<size_t>(m * m);
    io.ParallelForRanges(static_cast<size_t>(batch), 256, [&](size_t begin, size_t end) {
      std::vector<double> work(2 * matrix_size);
      for (size_t b = begin; b < end; ++b) {
        Check(Invert(x.data + b * matrix_size, y + b * matrix_size, m, work.data()), "matrix ", b, " of ", batch,
              " in input 'X' is singular");
      }
    });
  }
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<MatrixInverseKernel, float, double>(def); }

}  // namespace ortops::matrix_inverse
