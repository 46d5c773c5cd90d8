// Inverse of a batch of square matrices: LU factorisation with partial pivoting, then solves.
#include "ops/matrix_inverse/matrix_inverse.h"

#include <cstdint>
#include <vector>

#include "ops/matrix_inverse/lu.h"

namespace ortops::matrix_inverse {

namespace {

template <typename T>
struct MatrixInverseKernel : OpKernel<T, kSchema> {
  using OpKernel<T, kSchema>::OpKernel;

  void Compute(const KernelIO& io) const {
    const Matrices<T> in = ReadMatrices<T>(io);
    const ConstTensor<T>& x = in.x;
    const int64_t m = in.m, batch = in.batch;
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
    for (size_t b = 0; b < outcomes.size(); ++b) CheckOutcome(outcomes[b], static_cast<int64_t>(b), batch, x.shape);
  }
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<MatrixInverseKernel, float, double>(def); }

}  // namespace ortops::matrix_inverse
