// Cumulative maximum and minimum with indices (mmcv's cummax and cummin, torch.cummax/cummin).
#include "ops/cummax/cummax.h"

#include "ops/cummax/scan.h"

namespace ortops::cummax {
namespace {

constexpr IoSpec kInputs[] = {
    {"input", ElemType::kTypeParam, "a tensor of any rank (rank 0 and empty allowed)"},
};
constexpr IoSpec kOutputs[] = {
    {"values", ElemType::kTypeParam, "same shape: the running maximum (minimum) along `dim`"},
    {"indices", ElemType::kInt64, "same shape: the position along `dim` each value came from"},
};
constexpr AttrSpec kAttributes[] = {
    {"dim", AttrType::kInt, "0", "the axis to scan; negative counts from the end"},
};

// Where each compatibility name's node differs from the runtime that defined it.
constexpr CompatDifferences kCompatDifferences[] = {
    {"mmcv",
     "mmcv 1.x's kernels compare with `>=` (`<=` for cummin), so ties take the later position, as in "
     "ortops and PyTorch; but a NaN never compares true there, so it is passed over (a NaN in the first "
     "position stays to the end), where ortops, like PyTorch, lets a NaN take over. An empty input made "
     "the original read its first element out of bounds; ortops returns empty outputs. It took float32 "
     "only; ortops also takes float64, int64 and float16."},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "Running maximum (`cummax`, `CumMax`) or minimum (`cummin`, `CumMin`) along `dim`, with the "
        "position each value came from; identical to `torch.cummax` / `torch.cummin`: on ties the "
        "later position wins, and NaN propagates (a NaN takes over, and each later NaN takes its own "
        "position). A rank-0 input is scanned as a single element (`dim` 0 or -1).",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = kAttributes,
    .compat_differences = kCompatDifferences,
};

namespace {

template <typename T, bool kMax>
class CumulativeKernel : public OpKernel<T, kSchema, Axis> {
 public:
  using OpKernel<T, kSchema, Axis>::OpKernel;

  void Compute(const KernelIO& io) const {
    const ScanCall<T> call = PrepareCall<T>(io, this->attributes());
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
