// RoIAlign over [N, C, H, W] features and [R, 5] rois, Detectron style (mmcv's MMCVRoiAlign).
#include "ops/roi_align/roi_align.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/upcast.h"
#include "math/bilinear.h"
#include "ops/roi_align/pooling_specs.h"
#include "ops/roi_align/roi_pooling.h"

namespace ortops::roi_align {
namespace {

constexpr IoSpec kInputs[] = {
    {"input", ElemType::kTypeParam, roi_pooling::kFeatureMapsDoc},
    {"rois", ElemType::kTypeParam, "`[R, 5]` rois as (batch_index, x1, y1, x2, y2) in input-image coordinates"},
};
constexpr IoSpec kOutputs[] = {
    {"output", ElemType::kTypeParam, roi_pooling::kPooledDoc},
};
constexpr AttrSpec kAttributes[] = {
    roi_pooling::OutputHeightSpec("1"),
    roi_pooling::OutputWidthSpec("1"),
    {"spatial_scale", AttrType::kFloat, "1.0", "multiplies roi coordinates to give feature-map coordinates"},
    roi_pooling::SamplingRatioSpec("0"),
    {"mode", AttrType::kString, "avg", "`avg` (mean of the samples) or `max` (largest sample)"},
    {"aligned", AttrType::kInt, "1",
     "1: shift the scaled roi by -0.5 pixel (true alignment); 0: legacy, no shift and roi sides of at least 1"},
};

// Where each compatibility name's node differs from the runtime that defined it.
constexpr CompatDifferences kCompatDifferences[] = {
    {"mmcv",
     "mmcv 1.x's kernel read the image a roi names without checking that it exists (out of bounds for a "
     "batch index past the batch) and sampled with non-finite roi coordinates; ortops reports both as "
     "errors. `max` starts at -10000, as the original did. It took float32 only; ortops also takes "
     "float64 and float16. Otherwise the same sampling; averages agree to float32 rounding."},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "RoIAlign as in Detectron/Caffe2 and mmcv: each roi is scaled by `spatial_scale` (and "
        "shifted by -0.5 when `aligned` is 1; with `aligned` 0 its sides are clamped to at least 1), "
        "divided into `output_height x output_width` bins, and each bin samples a regular grid of "
        "`sampling_ratio` (or adaptively ceil(roi size / output size)) points per axis, each read "
        "bilinearly (a point more than one pixel outside the map reads 0; points just outside are "
        "clamped to the edge). `avg` averages the samples (equal to `torchvision.ops.roi_align`); "
        "`max` takes the largest interpolated sample, which is not what ONNX's RoiAlign max mode "
        "does. In the `mmcv` domain `max` starts from -10000 as the original kernel did, so a bin "
        "with no samples (an empty adaptive grid) or with all samples below -10000 gives -10000; in "
        "the `ortops` domain it starts from -infinity and a bin with no samples gives 0. A roi's "
        "batch index is truncated toward zero and must name an image of `input`; non-finite roi "
        "coordinates are an error. A map with H or W = 0 reads 0 everywhere.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = kAttributes,
    .compat_differences = kCompatDifferences,
};

namespace {

// Elements of T are read as A = ComputeType<T> and all arithmetic is in A, so a float16
// kernel computes what the float32 kernel does on the same values, then rounds once on store.
template <typename T>
class RoiAlignKernel : public OpKernel<T, kSchema, RoiAlignAttributes<ComputeType<T>>> {
 public:
  using OpKernel<T, kSchema, RoiAlignAttributes<ComputeType<T>>>::OpKernel;
  using A = ComputeType<T>;

  void Compute(const KernelIO& io) const {
    const RoiAlignAttributes<A>& attributes = this->attributes();
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
