// RoIAlign over rotated rois (mmcv's MMCVRoIAlignRotated, Detectron2's ROIAlignRotated).
#include "ops/roi_align_rotated/roi_align_rotated.h"

#include <cmath>
#include <vector>

#include "core/upcast.h"
#include "math/bilinear.h"
#include "ops/roi_align/roi_pooling.h"

namespace ortops::roi_align_rotated {

namespace {

// Elements of T are read as A = ComputeType<T> and all arithmetic is in A, so a float16
// kernel computes what the float32 kernel does on the same values, then rounds once on store.
template <typename T>
struct RoiAlignRotatedKernel : OpKernel<T, kSchema, RotatedAttributes> {
  using OpKernel<T, kSchema, RotatedAttributes>::OpKernel;
  using A = ComputeType<T>;

  void Compute(const KernelIO& io, const RotatedAttributes& attributes) const {
    const roi_pooling::PoolingAttributes& pooling = attributes.pooling;
    const ConstTensor<T> input = io.Input<T>(0, 4);
    const ConstTensor<T> roi_input = io.Input<T>(1, 2);
    Scratch<A> roi_storage;
    const ConstTensor<A> rois{Upcast(io, roi_input, roi_storage), roi_input.shape};
    roi_pooling::CheckRois(rois, 6, kRoiLayout, input.shape);
    const int64_t channels = input.dim(1), height = input.dim(2), width = input.dim(3);
    const int64_t roi_count = rois.dim(0), bins = pooling.bins();
    T* output = io.Output<T>(0, {roi_count, channels, pooling.output_height, pooling.output_width});
    if (roi_count == 0 || channels == 0) return;
    // The taps of a rotated roi scatter over the map as an axis-aligned roi's do: read them from
    // a channels-last copy (all channels of a pixel at once) where there are enough of them.
    Scratch<A> copy;
    const roi_pooling::PoolSource<T, A> source = roi_pooling::MakePoolSource(io, input, roi_count, pooling, copy);
    const bool channels_last = source.channels_last != nullptr;
    const roi_pooling::RotatedGeometry<A> geometry = attributes.Geometry<A>();
    io.ParallelForRanges(static_cast<size_t>(roi_count), 256, [&](size_t begin, size_t end) {
      roi_pooling::RoiTaps<A> taps(io);
      roi_pooling::PoolScratch<T, A> scratch(io, channels_last, channels, bins);
      for (auto r = static_cast<int64_t>(begin); r < static_cast<int64_t>(end); ++r) {
        const A* roi = rois.data + 6 * r;
        const auto g = geometry(roi + 1);
        roi_pooling::CheckGrid(g, pooling);
        roi_pooling::PoolRoi(source, static_cast<int64_t>(roi[0]), taps.Of(g, pooling, height, width), bins,
                             g.grid_h * g.grid_w, roi_pooling::kAveragePool<A>, output + r * channels * bins, scratch);
      }
    });
  }
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<RoiAlignRotatedKernel, float, double, Half>(def); }

}  // namespace ortops::roi_align_rotated
