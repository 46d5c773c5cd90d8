// MatrixInverse's device path: one thread per matrix, running the CPU kernel's own
// factorisation, pivoting and solves (lu.h) in float64, so the same bits, and the CPU
// kernel's error for the lowest failing matrix (NaN or infinity, singular).
#include <algorithm>

#include "device/device_kernel.h"
#include "ops/matrix_inverse/lu.h"
#include "ops/matrix_inverse/matrix_inverse.h"

namespace ortops::matrix_inverse {
namespace {

// The workspaces of the matrices in flight at once: a band of matrices at a time, so that
// the scratch stays bounded whatever the batch (a band is at least one matrix).
constexpr int64_t kBandBytes = int64_t{256} << 20;

// Matrix first + i of the batch, in workspace i of the band.
template <typename T>
struct InvertMatrix {
  const T* x;
  T* y;
  Outcome* outcomes;
  double* doubles;  // per matrix: the LU factors, then the solution
  int64_t* rows;    // per matrix: m
  int64_t m, first;

  ORTOPS_HD void operator()(int64_t i) const {
    const int64_t size = m * m, b = first + i;
    const Workspace work{doubles + 2 * size * i, doubles + 2 * size * i + size, rows + m * i};
    outcomes[b] = Invert(x + size * b, y + size * b, m, work);
    // A matrix the check refuses (met by the output only where the check could not run: a
    // CUDA graph) has no inverse to give.
    if (outcomes[b] != Outcome::kInverted) {
      for (int64_t k = 0; k < size; ++k) y[size * b + k] = device::RefusedValue<T>();
    }
  }
};

struct Failed {
  const Outcome* outcomes;
  ORTOPS_HD bool operator()(int64_t b) const { return outcomes[b] != Outcome::kInverted; }
};

template <typename T>
struct MatrixInverseDeviceKernel : OpKernel<T, kSchema, NoAttributes, device::DeviceKernelBase> {
  using OpKernel<T, kSchema, NoAttributes, device::DeviceKernelBase>::OpKernel;

  void Compute(const device::DeviceIO& io) const {
    const Matrices<T> in = ReadMatrices<T>(io);
    T* y = io.Output<T>(0, in.x.shape);
    if (in.x.size() == 0) return;
    const int64_t m = in.m, batch = in.batch;
    const int64_t matrix_bytes =
        2 * m * m * static_cast<int64_t>(sizeof(double)) + m * static_cast<int64_t>(sizeof(int64_t));
    const int64_t band = std::clamp<int64_t>(kBandBytes / matrix_bytes, 1, batch);
    Scratch<Outcome> outcomes = io.Allocate<Outcome>(static_cast<size_t>(batch));
    Scratch<double> doubles = io.Allocate<double>(static_cast<size_t>(2 * m * m * band));
    Scratch<int64_t> rows = io.Allocate<int64_t>(static_cast<size_t>(m * band));
    // Bands run one after another on the stream, so each reuses the scratch safely.
    for (int64_t first = 0; first < batch; first += band) {
      io.ForEach(std::min(band, batch - first),
                 InvertMatrix<T>{in.x.data, y, outcomes.data(), doubles.data(), rows.data(), m, first});
    }
    device::CheckEach(io, outcomes.data(), batch, 1, Failed{outcomes.data()},
                      [&](int64_t b, const Outcome* outcome) { CheckOutcome(*outcome, b, batch, in.x.shape); });
  }
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<MatrixInverseDeviceKernel, float, double>(def); }

}  // namespace ortops::matrix_inverse
