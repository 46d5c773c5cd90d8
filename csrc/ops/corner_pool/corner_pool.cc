// Corner pooling (CornerNet; mmcv's MMCVCornerPool): a running maximum across the map.
#include "ops/corner_pool/corner_pool.h"

#include "ops/cummax/scan.h"

namespace ortops::corner_pool {
namespace {

constexpr IoSpec kInputs[] = {
    {"input", ElemType::kTypeParam, "`[N, C, H, W]` feature maps"},
};
constexpr IoSpec kOutputs[] = {
    {"output", ElemType::kTypeParam, "`[N, C, H, W]` pooled feature maps"},
};
constexpr AttrSpec kAttributes[] = {
    {"mode", AttrType::kInt, "0", "0 top, 1 bottom, 2 left, 3 right"},
};

// Where each compatibility name's node differs from the runtime that defined it.
constexpr CompatDifferences kCompatDifferences[] = {
    {"mmcv",
     "mmcv 1.x's kernel carried the running maximum with `std::max(running, next)`, which passes over a "
     "NaN (a NaN that starts a scan stays to its end); ortops follows `torch.cummax`, where a NaN "
     "propagates in the scan direction. Without NaN the same values. It took float32 only; ortops also "
     "takes float64 and float16."},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "Corner pooling: `top` (mode 0) is the running maximum from the bottom row upward, "
        "`bottom` (1) from the top row downward, `left` (2) from the right edge leftward, `right` "
        "(3) from the left edge rightward. Equal to `torch.cummax` on the flipped input, so NaN "
        "propagates in the scan direction.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = kAttributes,
    .compat_differences = kCompatDifferences,
};

namespace {

template <typename T>
class CornerPoolKernel : public OpKernel<T, kSchema, Direction> {
 public:
  using OpKernel<T, kSchema, Direction>::OpKernel;

  void Compute(const KernelIO& io) const {
    const Direction& direction = this->attributes();
    const ConstTensor<T> input = io.Input<T>(0, 4);
    T* output = io.Output<T>(0, input.shape);
    scan::CumulativeExtreme<T, true>(io, input.data, output, nullptr, direction.LayoutOf(input), direction.reverse());
  }
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<CornerPoolKernel, float, double, Half>(def); }

}  // namespace ortops::corner_pool
