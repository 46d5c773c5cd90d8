// TensorRT's ROIAlign_TRT plugin node (plugin/roiAlignPlugin in NVIDIA/TensorRT, versions 1
// and 2): ONNX's RoiAlign with int32 batch indices, integer mode attributes and ONNX's max
// mode (roi_pooling::kMaxOfCorners), on the geometry, taps and pooling shared with ortops' own
// RoIAlign (roi_pooling.h), from a channels-last copy where that pays in both modes.
#include "ops/trt_roi_align/trt_roi_align.h"

#include <cmath>
#include <cstdint>

#include "core/upcast.h"
#include "math/bilinear.h"
#include "ops/roi_align/roi_pooling.h"

namespace ortops::trt_roi_align {

namespace {

template <typename T>
struct TrtRoiAlignKernel : OpKernel<T, kSchema, TrtAttributes> {
  using OpKernel<T, kSchema, TrtAttributes>::OpKernel;
  using A = ComputeType<T>;

  void Compute(const KernelIO& io, const TrtAttributes& attributes) const {
    const roi_pooling::PoolingAttributes& pooling = attributes.pooling;
    const bool average = attributes.average != 0;
    const ConstTensor<T> input = io.Input<T>(0, 4);
    const ConstTensor<T> roi_input = io.Input<T>(1, 2);
    const ConstTensor<int32_t> batch_indices = io.Input<int32_t>(2, 1);
    CheckRoisShape(roi_input, batch_indices);
    const int64_t roi_count = roi_input.dim(0);
    Scratch<A> roi_storage;
    const A* rois = Upcast(io, roi_input, roi_storage);
    const int64_t channels = input.dim(1), height = input.dim(2), width = input.dim(3);
    for (int64_t r = 0; r < roi_count; ++r) CheckRoi(rois + 4 * r, batch_indices.data[r], r, input.shape);

    const int64_t bins = pooling.bins();
    T* output = io.Output<T>(0, {roi_count, channels, pooling.output_height, pooling.output_width});
    if (roi_count == 0 || channels == 0) return;
    Scratch<A> copy;
    const roi_pooling::PoolSource<T, A> source = roi_pooling::MakePoolSource(io, input, roi_count, pooling, copy);
    const roi_pooling::PoolMode<A> mode = average ? roi_pooling::kAveragePool<A> : roi_pooling::kMaxOfCorners<A>;
    const roi_pooling::AlignedGeometry<A> geometry = attributes.Geometry<A>();
    io.ParallelForRanges(static_cast<size_t>(roi_count), 256, [&](size_t begin, size_t end) {
      roi_pooling::RoiTaps<A> roi_taps(io);
      roi_pooling::PoolScratch<T, A> scratch(io, source.channels_last != nullptr, channels, bins);
      for (auto r = static_cast<int64_t>(begin); r < static_cast<int64_t>(end); ++r) {
        const auto g = geometry(rois + 4 * r);
        roi_pooling::CheckGrid(g, pooling);
        const BilinearTap<A>* taps = roi_taps.Of(g, pooling, height, width);
        roi_pooling::PoolRoi(source, batch_indices.data[r], taps, bins, g.grid_h * g.grid_w, mode,
                             output + r * channels * bins, scratch);
      }
    });
  }
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<TrtRoiAlignKernel, float, Half>(def); }

}  // namespace ortops::trt_roi_align
