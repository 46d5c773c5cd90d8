// Inverse of a batch of square matrices: LU factorisation with partial pivoting, then solves.
#include "ops/matrix_inverse/matrix_inverse.h"

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace ortops::matrix_inverse {
namespace {

constexpr IoSpec kInputs[] = {
    {"X", ElemType::kTypeParam,
     "`[..., M, M]` a batch of square matrices (any number of batch dimensions); NaN or infinity is an error"},
};
constexpr IoSpec kOutputs[] = {
    {"Y", ElemType::kTypeParam, "`[..., M, M]` the inverse of each matrix"},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "Inverse of every matrix in a batch, matching `torch.linalg.inv`: LU factorisation with partial "
        "pivoting (the row with the largest absolute pivot, first on ties, as LAPACK's getrf), then forward "
        "and back substitution against the identity (as getrs). Both element types are computed in float64 "
        "and rounded once, so float32 results are within about one float32 ulp (relative to the largest "
        "entry) of the exact inverse of the float32 input, where float32 LAPACK (what torch runs) is off by "
        "about the condition number times that. A matrix that meets an exactly zero pivot is singular: "
        "that is an error naming it (`matrix <i> of <n> ... is singular`, `i` the flat batch index), as "
        "`torch.linalg.inv` raises. NaN or infinity in the input is an error naming the matrix too. When "
        "several matrices fail, the lowest index is reported, whatever the thread count. "
        "Empty batches and `M = 0` give empty outputs.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = {},
};

namespace {

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
bool FactorLu(double* lu, int64_t* original_row, int64_t m) {
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
void SolveForInverse(const double* lu, double* solution, int64_t m) {
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
Outcome Invert(const T* matrix, T* inverse, int64_t m, const Workspace& work) {
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

    T* y = io.Output<T>(0, x.shape);
    if (x.size() == 0) return;
    const size_t matrix_size = static_cast<size_t>(m * m);
    ScratchVector<Outcome> outcomes = io.Vector<Outcome>(static_cast<size_t>(batch), Outcome::kInverted);
    // Chunks of whole matrices: the scratch is allocated once per chunk and reused.
    io.ParallelForRanges(static_cast<size_t>(batch), 256, [&](size_t begin, size_t end) {
      const Scratch<double> doubles = io.Allocate<double>(2 * matrix_size);
      const Scratch<int64_t> rows = io.Allocate<int64_t>(static_cast<size_t>(m));
      const Workspace work{doubles.data(), doubles.data() + matrix_size, rows.data()};
      for (size_t b = begin; b < end; ++b) {
        outcomes[b] = Invert(x.data + b * matrix_size, y + b * matrix_size, m, work);
      }
    });
    for (size_t b = 0; b < outcomes.size(); ++b) {
      Check(outcomes[b] != Outcome::kNotFinite, "input 'X' contains NaN or infinity (matrix ", b, " of ", batch,
            ", shape ", ShapeText{x.shape}, ")");
      Check(outcomes[b] != Outcome::kSingular, "matrix ", b, " of ", batch, " in input 'X' is singular");
    }
  }
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<MatrixInverseKernel, float, double>(def); }

}  // namespace ortops::matrix_inverse
