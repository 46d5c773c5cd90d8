// ROIAlign_TRT's device path: RoIAlign's (roi_pool_device.h) with batch indices in their own
// input, and TensorRT's max mode (MaxOfCorners); the CPU kernel's checks and bits.
#include "device/device_kernel.h"
#include "ops/roi_align/roi_pool_device.h"
#include "ops/trt_roi_align/trt_roi_align.h"

namespace ortops::trt_roi_align {
namespace {

// Rois [R, 4] (x1, y1, x2, y2), roi r pooling from image batch_indices[r] of X [N, C, H, W].
template <typename T>
struct TrtRois {
  using A = ComputeType<T>;
  const T* rois;
  const int32_t* batch_indices;
  const T* input;
  int64_t images, channels, height, width;
  roi_pooling::AlignedGeometry<A> geometry;

  ORTOPS_HD void Read(int64_t r, A* box) const {
    for (int64_t k = 0; k < 4; ++k) box[k] = static_cast<A>(rois[4 * r + k]);
  }
  ORTOPS_HD bool Valid(int64_t r) const {
    A box[4];
    Read(r, box);
    return RoiIsValid(box, batch_indices[r], images);
  }
  ORTOPS_HD roi_pooling::RoiOnMap<T, roi_pooling::AlignedRoi<A>> Locate(int64_t r) const {
    A box[4];
    Read(r, box);
    return {geometry(box), input + static_cast<int64_t>(batch_indices[r]) * channels * height * width, height, width};
  }
};

template <typename T>
struct TrtRoiAlignDeviceKernel : OpKernel<T, kSchema, TrtAttributes, device::DeviceKernelBase> {
  using OpKernel<T, kSchema, TrtAttributes, device::DeviceKernelBase>::OpKernel;
  using A = ComputeType<T>;

  void Compute(const device::DeviceIO& io, const TrtAttributes& attributes) const {
    const roi_pooling::PoolingAttributes& pooling = attributes.pooling;
    const ConstTensor<T> input = io.Input<T>(0, 4);
    const ConstTensor<T> rois = io.Input<T>(1, 2);
    const ConstTensor<int32_t> batch_indices = io.Input<int32_t>(2, 1);
    CheckRoisShape(rois, batch_indices);
    const int64_t count = rois.dim(0), channels = input.dim(1);
    const roi_pooling::AlignedGeometry<A> geometry = attributes.Geometry<A>();
    const TrtRois<T> located{rois.data, batch_indices.data, input.data,   input.dim(0),
                             channels,  input.dim(2),       input.dim(3), geometry};
    device::CheckEach(io, rois.data, count, 4, roi_pooling::RoiFails<TrtRois<T>>{located, pooling.bins(), channels > 0},
                      [&](int64_t r, const T* values) {
                        A box[4];
                        for (int k = 0; k < 4; ++k) box[k] = static_cast<A>(values[k]);
                        int32_t image = 0;
                        io.CopyToHost(&image, batch_indices.data + r, 1);
                        CheckRoi(box, image, r, input.shape);
                        roi_pooling::CheckGrid(geometry(box), pooling);
                      });
    T* output = io.Output<T>(0, {count, channels, pooling.output_height, pooling.output_width});
    if (attributes.average) {
      roi_pooling::PoolEveryBinOf(io, input, located, roi_pooling::MeanOrMax<A>{roi_pooling::kAveragePool<A>}, output,
                                  count, pooling);
    } else {
      roi_pooling::PoolEveryBinOf(io, input, located, roi_pooling::MaxOfCorners<A>{}, output, count, pooling);
    }
  }
};

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<TrtRoiAlignDeviceKernel, float, Half>(def); }

}  // namespace ortops::trt_roi_align
