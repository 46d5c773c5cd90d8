// RoIAlign over [N, C, H, W] features and [R, 5] rois, Detectron style (mmcv's MMCVRoiAlign).
#include "ops/roi_align/roi_align.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/upcast.h"
#include "math/bilinear.h"
#include "ops/roi_align/roi_pooling.h"

namespace ortops::roi_align {

namespace {

// Elements of T are read as A = ComputeType<T> and all arithmetic is in A, so a float16
// kernel computes what the float32 kernel does on the same values, then rounds once on store.
template <typename T>
struct RoiAlignKernel : OpKernel<T, kSchema, RoiAlignAttributes<ComputeType<T>>> {
  using OpKernel<T, kSchema, RoiAlignAttributes<ComputeType<T>>>::OpKernel;
  using A = ComputeType<T>;

  void Compute(const KernelIO& io, const RoiAlignAttributes<A>& attributes) const {
    const roi_pooling::PoolingAttributes& pooling = attributes.pooling;
    const ConstTensor<T> input = io.Input<T>(0, 4);
    const ConstTensor<T> roi_input = io.Input<T>(1, 2);
    Scratch<A> roi_storage;
    const ConstTensor<A> rois{Upcast(io, roi_input, roi_storage), roi_input.shape};
    roi_pooling::CheckRois(rois, 5, "(batch_index, x1, y1, x2, y2)", input.shape);
    const int64_t channels = input.dim(1), height = input.dim(2), width = input.dim(3);
    const int64_t roi_count = rois.dim(0);

    const int64_t bins = pooling.bins();
    T* output = io.Output<T>(0, {roi_count, channels, pooling.output_height, pooling.output_width});
    if (roi_count == 0 || channels == 0) return;
    Scratch<A> copy;
    const roi_pooling::PoolSource<T, A> source = roi_pooling::MakePoolSource(io, input, roi_count, pooling, copy);
    const bool channels_last = source.channels_last != nullptr;
    const A scale = static_cast<A>(pooling.spatial_scale);
    // mmcv raised the sides of a legacy (not aligned) roi to 1.
    const A min_side = pooling.aligned ? roi_pooling::kNoMinSide<A> : A(1);
    io.ParallelForRanges(static_cast<size_t>(roi_count), 256, [&](size_t begin, size_t end) {
      roi_pooling::RoiTaps<A> taps(io);
      roi_pooling::PoolScratch<T, A> scratch(io, channels_last, channels, bins);
      for (auto r = static_cast<int64_t>(begin); r < static_cast<int64_t>(end); ++r) {
        const A* roi = rois.data + 5 * r;
        const auto g = roi_pooling::AlignedRoiGeometry(roi + 1, scale, min_side, pooling);
        roi_pooling::PoolRoi(source, static_cast<int64_t>(roi[0]), taps.Of(g, pooling, height, width), bins,
                             g.grid_h * g.grid_w, attributes.mode, output + r * channels * bins, scratch);
      }
    });
  }
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<RoiAlignKernel, float, double, Half>(def); }

}  // namespace ortops::roi_align
