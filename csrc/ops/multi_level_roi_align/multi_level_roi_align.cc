// Multi-level RoIAlign: an FPN RoI extractor (mmdet's SingleRoIExtractor, mmrotate's
// RotatedSingleRoIExtractor) as one node. Each roi goes to one pyramid level by its scale and
// is pooled there with RoIAlign's (or RoIAlignRotated's) math from roi_pooling.h.
#include "ops/multi_level_roi_align/multi_level_roi_align.h"

#include <algorithm>
#include <numeric>
#include <tuple>
#include <vector>

#include "core/upcast.h"
#include "math/bilinear.h"
#include "ops/multi_level_roi_align/multi_level.h"
#include "ops/roi_align/pooling_specs.h"
#include "ops/roi_align/roi_pooling.h"

namespace ortops::multi_level_roi_align {
namespace {

constexpr IoSpec kInputs[] = {
    {"rois", ElemType::kTypeParam, "`[R, 5]` rois as (batch_index, x1, y1, x2, y2) in input-image coordinates"},
    {.name = "features",
     .type = ElemType::kTypeParam,
     .doc = "`[N, C, H_l, W_l]` feature maps, one input per pyramid level (finest first), every level with the "
            "same N and C",
     .variadic = true},
};
constexpr IoSpec kRotatedInputs[] = {
    {"rois", ElemType::kTypeParam,
     "`[R, 6]` rotated rois as (batch_index, cx, cy, w, h, theta), theta in radians, in input-image coordinates"},
    kInputs[1],
};
constexpr IoSpec kOutputs[] = {
    {"output", ElemType::kTypeParam, roi_pooling::kPooledDoc},
};

constexpr AttrSpec kFinestScale{"finest_scale", AttrType::kInt, "56",
                                "roi scale (sqrt of its area) under which a roi stays on the finest level"};
// The plugins' strides (both mmdeploy nodes).
constexpr AttrSpec kMmdeployStrides{"featmap_strides", AttrType::kFloats, "",
                                    "stride of each level: level l has spatial scale 1 / featmap_strides[l]; strides "
                                    "past the number of `features` inputs are ignored"};

constexpr AttrSpec kAttributes[] = {
    roi_pooling::OutputHeightSpec("7"),
    roi_pooling::OutputWidthSpec("7"),
    roi_pooling::SamplingRatioSpec("0"),
    {"featmap_strides", AttrType::kFloats, "",
     "stride of each level (one per `features` input): level l has spatial scale 1 / featmap_strides[l]"},
    kFinestScale,
    {"roi_scale_factor", AttrType::kFloat, "1.0",
     "after the level is chosen, each roi's width and height are multiplied by this, about its centre"},
    {"pool_mode", AttrType::kString, "avg", "`avg` (mean of the samples) or `max` (largest sample)"},
    {"aligned", AttrType::kInt, "1",
     "1: shift the scaled roi by -0.5 pixel (true alignment); 0: legacy, no shift and roi sides of at least 1"},
};

constexpr AttrSpec kMmdeployAttributes[] = {
    roi_pooling::OutputHeightSpec("7"),
    roi_pooling::OutputWidthSpec("7"),
    {"pool_mode", AttrType::kInt, "0", "0: max (largest sample), 1: avg (mean of the samples)"},
    roi_pooling::SamplingRatioSpec("2"),
    kMmdeployStrides,
    {"roi_scale_factor", AttrType::kFloat, "-1.0",
     "when positive, each roi is rescaled about its centre by this after its level is chosen"},
    kFinestScale,
    {"aligned", AttrType::kInt, "0",
     "1: shift the scaled roi by -0.5 pixel, sides of at least 0; 0: no shift, sides of at least 1"},
};

constexpr AttrSpec kMmdeployRotatedAttributes[] = {
    roi_pooling::OutputHeightSpec("7"),
    roi_pooling::OutputWidthSpec("7"),
    {"clockwise", AttrType::kInt, "0", "1: theta turns clockwise (it is negated)"},
    roi_pooling::SamplingRatioSpec("2"),
    kMmdeployStrides,
    {"roi_scale_factor", AttrType::kFloat, "-1.0",
     "when positive, each roi's width and height are multiplied by this after its level is chosen"},
    kFinestScale,
    {"aligned", AttrType::kInt, "0", "1: shift the scaled centre by -0.5 pixel; 0: no shift"},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "mmdet's FPN RoI extractor (`SingleRoIExtractor` over mmcv's `RoIAlign`) as one node. Each roi "
        "goes to one level by its scale s = sqrt((x2 - x1) (y2 - y1)): level = floor(log2(s / "
        "`finest_scale` + 1e-6)), clamped to [0, L - 1] for L `features` inputs (mmdet's "
        "`map_roi_levels`; a roi of negative area has no scale and goes to level 0). The level is chosen "
        "first; then, when `roi_scale_factor` is not 1, the roi is scaled about its centre (width and "
        "height times the factor, mmdet's `roi_rescale`; unlike mmdet, also with a single level). The "
        "roi is then pooled from its level's map exactly as `RoIAlign` of the ortops domain with "
        "`spatial_scale` = 1 / featmap_strides[level]: the same sampling, bilinear rule, adaptive grid "
        "and checks of the rois (finite, a batch index naming an image). `avg` averages a bin's "
        "samples; `max` takes its largest bilinearly interpolated sample (mmcv's max mode), and a bin "
        "without samples gives 0. Every level must have the same N and C, and `featmap_strides` must "
        "list one positive stride per level. float32 only: ONNX Runtime 1.17 cannot type a node with "
        "several values in a variadic input of an op registered for more than one element type.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = kAttributes,
};

constexpr OpSchema kMmdeploySchema{
    .doc =
        "mmdeploy's TensorRT plugin `MMCVMultiLevelRoiAlign`, which mmdeploy's rewrite of mmdet's "
        "`SingleRoIExtractor` exports for TensorRT: `rois`, then one feature map per level. A roi's "
        "level is chosen as in MultiLevelRoIAlign, from the roi before rescaling; then, when "
        "`roi_scale_factor` is positive, the roi is rescaled about its centre the plugin's way: half "
        "width (x2 - x1 + 1) * factor / 2 - 0.5, half height likewise. The roi is pooled from its "
        "level as RoIAlign with spatial scale 1 / stride, except that with `aligned` 1 a side below "
        "0 is raised to 0. `pool_mode` 0 takes a bin's largest bilinearly interpolated sample, "
        "starting from -FLT_MAX (so a bin without samples gives -3.4e38); 1 averages them. float32 "
        "only, as the plugin.",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = kMmdeployAttributes,
    .differences =
        "Reproduces the plugin (`csrc/mmdeploy/backend_ops/tensorrt/multi_level_roi_align/`), which "
        "disagrees with the PyTorch model mmdeploy exports it from in three places, where ortops follows "
        "the plugin, as TensorRT ran it: the rescale adds 1 to the sides (mmdet's `roi_rescale` scales "
        "x2 - x1 itself, so factors other than 1 give slightly larger boxes here); with `aligned` 1 a "
        "negative side is raised to 0 (mmcv's RoIAlign keeps it); a roi of negative area goes to level "
        "0 (mmdet assigns it no level and leaves its output 0). mmdeploy's exporter also writes mmcv's "
        "output size (h, w) as `output_height` = w, `output_width` = h, so a non-square size pools "
        "transposed bins; the node takes its attributes as written, as the plugin does. Differences "
        "from the plugin: it runs in ONNX Runtime (CPU or CUDA execution provider); rounding differs in "
        "the last bits (the plugin computes sample positions with fused multiply-adds and interpolates "
        "in lerp form); more than 10 levels "
        "work (its arrays hold 10); and what it would read out of bounds or compute garbage from is an "
        "error here: non-finite roi values, batch indices outside the features, levels of different N "
        "or C, fewer `featmap_strides` than levels, a stride that is not positive and finite, a "
        "non-finite `roi_scale_factor`, and `pool_mode` or `aligned` other than 0 or 1 (the plugin "
        "takes any nonzero `aligned` as 1 and any nonzero `pool_mode` as avg). Level mapping, "
        "sampling, the bilinear rule and the -FLT_MAX start of max pooling are the plugin's.",
};

constexpr OpSchema kMmdeployRotatedSchema{
    .doc =
        "mmdeploy's TensorRT plugin `MMCVMultiLevelRotatedRoiAlign`, which mmdeploy's rewrite of "
        "mmrotate's `RotatedSingleRoIExtractor` exports for TensorRT: rotated `rois`, then one feature "
        "map per level. A roi's level comes from the rotated box's own scale s = sqrt(w h) (mmrotate's "
        "`map_roi_levels`): floor(log2(s / `finest_scale` + 1e-6)) clamped to [0, L - 1], level 0 for a "
        "negative area. Then, when `roi_scale_factor` is positive, w and h are multiplied by it (centre "
        "and angle kept, mmrotate's `roi_rescale`). The roi is pooled from its level as RoIAlignRotated "
        "(average pooling) with spatial scale 1 / stride, except that its sides are raised to at least 1 "
        "whatever `aligned` is. float32 only, as the plugin.",
    .inputs = kRotatedInputs,
    .outputs = kOutputs,
    .attributes = kMmdeployRotatedAttributes,
    .differences =
        "Reproduces the plugin (`csrc/mmdeploy/backend_ops/tensorrt/multi_level_rotated_roi_align/`), "
        "which disagrees with the PyTorch model it is exported from in two places, where ortops follows "
        "the plugin: a roi's sides are raised to at least 1 also with `aligned` 1 (mmcv's "
        "RoIAlignRotated only with `aligned` 0), and a roi of negative area goes to level 0 (mmrotate "
        "assigns it no level and leaves its output 0). mmdeploy's exporter writes mmcv's output size "
        "(h, w) as `output_height` = w, `output_width` = h; the node takes its attributes as written, "
        "as the plugin does. Differences from the plugin: it runs in ONNX Runtime (CPU or CUDA "
        "execution provider); rounding differs in the last bits (the plugin interpolates in lerp form "
        "with fused multiply-adds); more than 10 levels "
        "work (its arrays hold 10); and what it would read out of bounds or compute garbage from is an "
        "error here: non-finite roi values, batch indices outside the features, levels of different N "
        "or C, fewer `featmap_strides` than levels, a stride that is not positive and finite, a "
        "non-finite `roi_scale_factor`, and `clockwise` or `aligned` other than 0 or 1 (the plugin "
        "takes any positive `clockwise` and any nonzero `aligned` as 1). Level mapping, rescale, "
        "sampling and the bilinear rule are the plugin's.",
};

namespace {

// Registered for T = float only (see Make); written, like RoIAlign, for elements of T read
// as their compute type A = ComputeType<T>.
template <typename T, typename Node>
class MultiLevelKernel : public OpKernel<T, kSchemaOf<Node>, LevelAttributes<Node, ComputeType<T>>> {
 public:
  using OpKernel<T, kSchemaOf<Node>, LevelAttributes<Node, ComputeType<T>>>::OpKernel;
  using A = ComputeType<T>;
  static constexpr int64_t kColumns = multi_level_roi_align::kColumns<Node>;

  void Compute(const KernelIO& io) const {
    const LevelAttributes<Node, A>& attributes = this->attributes();
    const roi_pooling::PoolingAttributes& pooling = attributes.pooling;
    const ConstTensor<T> roi_input = io.Input<T>(0, 2);
    const std::vector<ConstTensor<T>> features = FeatureInputs<T>(io, attributes);
    const auto levels = static_cast<int64_t>(features.size());
    Scratch<A> roi_storage;
    const ConstTensor<A> rois{Upcast(io, roi_input, roi_storage), roi_input.shape};
    roi_pooling::CheckRois(rois, kColumns, kRoiLayout<Node>, features[0].shape, "features[0]");
    const int64_t roi_count = rois.dim(0), channels = features[0].dim(1), bins = pooling.bins();
    T* output = io.Output<T>(0, {roi_count, channels, pooling.output_height, pooling.output_width});
    if (roi_count == 0 || channels == 0) return;

    // Each roi's level, from the roi before rescaling (mmdet's map_roi_levels), and the rois per level.
    ScratchVector<int64_t> level = io.Vector<int64_t>(static_cast<size_t>(roi_count));
    ScratchVector<int64_t> per_level = io.Vector<int64_t>(static_cast<size_t>(levels));
    for (int64_t r = 0; r < roi_count; ++r) {
      level[r] = LevelOf<Node>(rois.data + kColumns * r, attributes.finest_scale, levels);
      ++per_level[level[r]];
    }
    // Each level is read from a channels-last copy where that pays for the rois it pools.
    std::vector<Scratch<A>> copies(static_cast<size_t>(levels));
    std::vector<roi_pooling::PoolSource<T, A>> sources;
    sources.reserve(static_cast<size_t>(levels));
    bool any_channels_last = false;
    for (int64_t l = 0; l < levels; ++l) {
      sources.push_back(roi_pooling::MakePoolSource(io, features[l], per_level[l], pooling, copies[l]));
      any_channels_last |= sources.back().channels_last != nullptr;
    }
    const LevelGeometry<Node, A> geometry = attributes.Geometry();
    // Rois in order of level, image and position, so that neighbouring rois, which read
    // overlapping parts of one map, are pooled one after the other (and by one thread).
    ScratchVector<int64_t> order = io.Vector<int64_t>(static_cast<size_t>(roi_count));
    std::iota(order.begin(), order.end(), int64_t{0});
    auto key = [&](int64_t r) {
      const A* roi = rois.data + kColumns * r;
      return std::tuple(level[r], static_cast<int64_t>(roi[0]), roi[2], roi[1]);
    };
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return key(a) < key(b); });
    io.ParallelForRanges(static_cast<size_t>(roi_count), 256, [&](size_t begin, size_t end) {
      roi_pooling::RoiTaps<A> taps(io);
      roi_pooling::PoolScratch<T, A> scratch(io, any_channels_last, channels, bins);
      for (size_t position = begin; position < end; ++position) {
        const int64_t r = order[position];
        const A* roi = rois.data + kColumns * r;
        const int64_t l = level[r];
        const roi_pooling::PoolSource<T, A>& source = sources[l];
        const auto g = geometry(roi, attributes.Scale(l));
        roi_pooling::CheckGrid(g, pooling);
        roi_pooling::PoolRoi(source, static_cast<int64_t>(roi[0]), taps.Of(g, pooling, source.height, source.width),
                             bins, g.grid_h * g.grid_w, attributes.mode, output + r * channels * bins, scratch);
      }
    });
  }
};

}  // namespace

// float32 only: ONNX Runtime 1.17 cannot type the output of a node with two or more values in
// a variadic input when the op is registered for several element types (its type inference
// looks for a kernel type constraint per node input, and kernels have one per declared input).
std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<MultiLevelKernel, OrtopsNode, float>(def); }
std::vector<OpPtr> MakeMmdeploy(const OpDef& def) { return MakeOps<MultiLevelKernel, MmdeployNode, float>(def); }
std::vector<OpPtr> MakeMmdeployRotated(const OpDef& def) {
  return MakeOps<MultiLevelKernel, MmdeployRotatedNode, float>(def);
}

}  // namespace ortops::multi_level_roi_align
