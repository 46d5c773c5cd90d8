// GatherTopk's device path: the CPU kernel's shape checks, its index check run on the device
// (the host writes the message of the first index outside [0, N)), then one thread per
// output element.
#include "device/device_kernel.h"
#include "ops/gather_topk/gather_topk.h"

namespace ortops::gather_topk {
namespace {

struct IndexOutside {
  const int64_t* indices;
  int64_t rows;
  ORTOPS_HD bool operator()(int64_t i) const { return indices[i] < 0 || indices[i] >= rows; }
};

// Output element e is element e % row_size of the row that index e / row_size picks.
template <typename T>
struct CopyElement {
  const T* input;
  const int64_t* indices;
  T* output;
  int64_t rows, picks, row_size;

  ORTOPS_HD void operator()(int64_t e) const {
    const int64_t pick = e / row_size, offset = e - pick * row_size;
    const int64_t item = pick / picks, index = indices[pick];  // item: the flat batch position
    // An index the data check refuses, met only where it could not run (a CUDA graph).
    output[e] =
        index < 0 || index >= rows ? device::RefusedValue<T>() : input[(item * rows + index) * row_size + offset];
  }
};

template <typename T>
struct GatherTopkDeviceKernel : OpKernel<T, kSchema, NoAttributes, device::DeviceKernelBase> {
  using OpKernel<T, kSchema, NoAttributes, device::DeviceKernelBase>::OpKernel;

  void Compute(const device::DeviceIO& io) const {
    const Gather<T> g = ReadGather<T>(io);
    device::CheckEach(io, g.indices.data, g.total, 1, IndexOutside{g.indices.data, g.rows},
                      [&](int64_t flat, const int64_t* index) {
                        FailIndexOutside(g.indices.shape, flat, *index, g.rows, g.input.shape);
                      });
    T* output = io.Output<T>(0, g.output_shape);
    io.ForEach(g.output_size, CopyElement<T>{g.input.data, g.indices.data, output, g.rows, g.picks, g.row_size});
  }
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) {
  return MakeOps<GatherTopkDeviceKernel, float, double, int32_t, int64_t>(def);
}

}  // namespace ortops::gather_topk
