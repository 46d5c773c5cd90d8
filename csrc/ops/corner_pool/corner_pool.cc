// Corner pooling (CornerNet; mmcv's MMCVCornerPool): a running maximum across the map.
#include "ops/corner_pool/corner_pool.h"

#include "ops/cummax/scan.h"

namespace ortops::corner_pool {

namespace {

template <typename T>
struct CornerPoolKernel : OpKernel<T, kSchema, Direction> {
  using OpKernel<T, kSchema, Direction>::OpKernel;

  void Compute(const KernelIO& io, const Direction& direction) const {
    const ConstTensor<T> input = io.Input<T>(0, 4);
    T* output = io.Output<T>(0, input.shape);
    scan::CumulativeExtreme<T, true>(io, input.data, output, nullptr, direction.LayoutOf(input), direction.reverse());
  }
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<CornerPoolKernel, float, double, Half>(def); }

}  // namespace ortops::corner_pool
