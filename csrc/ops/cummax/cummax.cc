// Cumulative maximum and minimum with indices (mmcv's cummax and cummin, torch.cummax/cummin).
#include "ops/cummax/cummax.h"

#include "ops/cummax/scan.h"

namespace ortops::cummax {

namespace {

template <typename T, bool kMax>
struct CumulativeKernel : OpKernel<T, kSchema, Axis> {
  using OpKernel<T, kSchema, Axis>::OpKernel;

  void Compute(const KernelIO& io, const Axis& axis) const {
    const ScanCall<T> call = PrepareCall<T>(io, axis);
    scan::CumulativeExtreme<T, kMax>(io, call.input.data, call.values, call.indices, call.layout, false);
  }
};

}  // namespace

std::vector<OpPtr> MakeMax(const OpDef& def) {
  return MakeOps<CumulativeKernel, true, float, double, int64_t, Half>(def);
}
std::vector<OpPtr> MakeMin(const OpDef& def) {
  return MakeOps<CumulativeKernel, false, float, double, int64_t, Half>(def);
}

}  // namespace ortops::cummax
