// Multi-level RoIAlign: an FPN RoI extractor (mmdet's SingleRoIExtractor, mmrotate's
// RotatedSingleRoIExtractor) as one node. Each roi goes to one pyramid level by its scale and
// is pooled there with RoIAlign's (or RoIAlignRotated's) math from roi_pooling.h.
#include "ops/multi_level_roi_align/multi_level_roi_align.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "core/upcast.h"
#include "math/bilinear.h"
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
    {"output", ElemType::kTypeParam, "`[R, C, output_height, output_width]` pooled features"},
};

constexpr AttrSpec kAttributes[] = {
    {"output_height", AttrType::kInt, "7", "height of each pooled output"},
    {"output_width", AttrType::kInt, "7", "width of each pooled output"},
    {"sampling_ratio", AttrType::kInt, "0",
     "samples per bin along each axis; 0 or less: adaptive, ceil(roi size / output size)"},
    {"featmap_strides", AttrType::kFloats, "",
     "stride of each level (one per `features` input): level l has spatial scale 1 / featmap_strides[l]"},
    {"finest_scale", AttrType::kInt, "56", "roi scale (sqrt of its area) under which a roi stays on the finest level"},
    {"roi_scale_factor", AttrType::kFloat, "1.0",
     "after the level is chosen, each roi's width and height are multiplied by this, about its centre"},
    {"pool_mode", AttrType::kString, "avg", "`avg` (mean of the samples) or `max` (largest sample)"},
    {"aligned", AttrType::kInt, "1",
     "1: shift the scaled roi by -0.5 pixel (true alignment); 0: legacy, no shift and roi sides of at least 1"},
};

constexpr AttrSpec kMmdeployAttributes[] = {
    {"output_height", AttrType::kInt, "7", "height of each pooled output"},
    {"output_width", AttrType::kInt, "7", "width of each pooled output"},
    {"pool_mode", AttrType::kInt, "0", "0: max (largest sample), 1: avg (mean of the samples)"},
    {"sampling_ratio", AttrType::kInt, "2",
     "samples per bin along each axis; 0 or less: adaptive, ceil(roi size / output size)"},
    {"featmap_strides", AttrType::kFloats, "",
     "stride of each level: level l has spatial scale 1 / featmap_strides[l]; strides past the number of "
     "`features` inputs are ignored"},
    {"roi_scale_factor", AttrType::kFloat, "-1.0",
     "when positive, each roi is rescaled about its centre by this after its level is chosen"},
    {"finest_scale", AttrType::kInt, "56", "roi scale (sqrt of its area) under which a roi stays on the finest level"},
    {"aligned", AttrType::kInt, "0",
     "1: shift the scaled roi by -0.5 pixel, sides of at least 0; 0: no shift, sides of at least 1"},
};

constexpr AttrSpec kMmdeployRotatedAttributes[] = {
    {"output_height", AttrType::kInt, "7", "height of each pooled output"},
    {"output_width", AttrType::kInt, "7", "width of each pooled output"},
    {"clockwise", AttrType::kInt, "0", "1: theta turns clockwise (it is negated)"},
    {"sampling_ratio", AttrType::kInt, "2",
     "samples per bin along each axis; 0 or less: adaptive, ceil(roi size / output size)"},
    {"featmap_strides", AttrType::kFloats, "",
     "stride of each level: level l has spatial scale 1 / featmap_strides[l]; strides past the number of "
     "`features` inputs are ignored"},
    {"roi_scale_factor", AttrType::kFloat, "-1.0",
     "when positive, each roi's width and height are multiplied by this after its level is chosen"},
    {"finest_scale", AttrType::kInt, "56", "roi scale (sqrt of its area) under which a roi stays on the finest level"},
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
        "from the plugin: it runs on the CPU; rounding differs in the last bits (the plugin computes "
        "sample positions with fused multiply-adds and interpolates in lerp form); more than 10 levels "
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
        "as the plugin does. Differences from the plugin: it runs on the CPU; rounding differs in the "
        "last bits (the plugin interpolates in lerp form with fused multiply-adds); more than 10 levels "
        "work (its arrays hold 10); and what it would read out of bounds or compute garbage from is an "
        "error here: non-finite roi values, batch indices outside the features, levels of different N "
        "or C, fewer `featmap_strides` than levels, a stride that is not positive and finite, a "
        "non-finite `roi_scale_factor`, and `clockwise` or `aligned` other than 0 or 1 (the plugin "
        "takes any positive `clockwise` and any nonzero `aligned` as 1). Level mapping, rescale, "
        "sampling and the bilinear rule are the plugin's.",
};

namespace {

// The level of a roi of area `area` among `levels`: floor(log2(sqrt(area) / finest_scale +
// 1e-6)) clamped to [0, levels - 1], in the rois' compute type as mmdet computes it. A NaN (a
// negative area) gives level 0, as the plugins' float-to-int conversion does on CUDA.
template <typename A>
int64_t MapLevel(A area, int64_t finest_scale, int64_t levels) {
  const A level = std::floor(std::log2(std::sqrt(area) / static_cast<A>(finest_scale) + static_cast<A>(1e-6)));
  if (!(level > A(0))) return 0;
  if (level >= static_cast<A>(levels - 1)) return levels - 1;
  return static_cast<int64_t>(level);
}

// What the three nodes differ in: the roi layout, how a roi's level and rescaled box follow
// from it, the lower bound on its sides, and how the pool mode is stored.

// ortops::MultiLevelRoIAlign: mmdet's SingleRoIExtractor over mmcv's RoIAlign.
struct OrtopsNode {
  static constexpr const OpSchema& kSchema = multi_level_roi_align::kSchema;
  static constexpr bool kRotated = false;
  static constexpr bool kPlugin = false;

  template <typename A>
  static roi_pooling::PoolMode<A> ReadPoolMode(const Attributes& attrs) {
    const std::string mode = attrs.String("pool_mode");
    Check(mode == "avg" || mode == "max", "attribute 'pool_mode' must be \"avg\" or \"max\", got \"", mode, "\"");
    return {.max = mode == "max", .max_start = -std::numeric_limits<A>::infinity(), .empty_bin = A(0)};
  }
  // mmcv's RoIAlign: sides of at least 1 only for legacy (not aligned) rois.
  template <typename A>
  static A MinSide(bool aligned) {
    return aligned ? roi_pooling::kNoMinSide<A> : A(1);
  }
  // mmdet's roi_rescale: width and height times the factor, about the centre.
  template <typename A>
  static void Rescale(A factor, A* box) {
    if (factor == A(1)) return;
    const A cx = (box[0] + box[2]) * A(0.5), cy = (box[1] + box[3]) * A(0.5);
    const A half_w = (box[2] - box[0]) * factor * A(0.5), half_h = (box[3] - box[1]) * factor * A(0.5);
    box[0] = cx - half_w;
    box[1] = cy - half_h;
    box[2] = cx + half_w;
    box[3] = cy + half_h;
  }
};

// mmdeploy::MMCVMultiLevelRoiAlign: trt_multi_level_roi_align_kernel.cu.
struct MmdeployNode {
  static constexpr const OpSchema& kSchema = multi_level_roi_align::kMmdeploySchema;
  static constexpr bool kRotated = false;
  static constexpr bool kPlugin = true;

  template <typename A>
  static roi_pooling::PoolMode<A> ReadPoolMode(const Attributes& attrs) {
    const int64_t mode = attrs.Int("pool_mode");
    Check(mode == 0 || mode == 1, "attribute 'pool_mode' must be 0 (max) or 1 (avg), got ", mode);
    return {.max = mode == 0, .max_start = A(-FLT_MAX), .empty_bin = A(-FLT_MAX)};
  }
  // The plugin raises sides to max(side, aligned ? 0 : 1).
  template <typename A>
  static A MinSide(bool aligned) {
    return aligned ? A(0) : A(1);
  }
  // The plugin's rescale: half side (side + 1) * factor / 2 - 0.5, when the factor is positive.
  template <typename A>
  static void Rescale(A factor, A* box) {
    if (!(factor > A(0))) return;
    const A cx = (box[0] + box[2]) * A(0.5), cy = (box[1] + box[3]) * A(0.5);
    const A half_factor = factor * A(0.5);
    const A half_w = (box[2] - box[0] + A(1)) * half_factor - A(0.5);
    const A half_h = (box[3] - box[1] + A(1)) * half_factor - A(0.5);
    box[0] = cx - half_w;
    box[1] = cy - half_h;
    box[2] = cx + half_w;
    box[3] = cy + half_h;
  }
};

// mmdeploy::MMCVMultiLevelRotatedRoiAlign: trt_multi_level_rotated_roi_align_kernel.cu.
struct MmdeployRotatedNode {
  static constexpr const OpSchema& kSchema = multi_level_roi_align::kMmdeployRotatedSchema;
  static constexpr bool kRotated = true;
  static constexpr bool kPlugin = true;

  template <typename A>
  static roi_pooling::PoolMode<A> ReadPoolMode(const Attributes&) {
    return {.max = false, .max_start = A(0), .empty_bin = A(0)};
  }
  // The plugin raises the sides to 1 whether or not the roi is aligned.
  template <typename A>
  static A MinSide(bool) {
    return A(1);
  }
  // mmrotate's roi_rescale, as the plugin: w and h times the factor, when it is positive.
  template <typename A>
  static void Rescale(A factor, A* box) {
    if (!(factor > A(0))) return;
    box[2] *= factor;
    box[3] *= factor;
  }
};

// Registered for T = float only (see Make); written, like RoIAlign, for elements of T read
// as their compute type A = ComputeType<T>.
template <typename T, typename Node>
class MultiLevelKernel : public KernelBase {
 public:
  using Element = T;
  using A = ComputeType<T>;
  static constexpr const OpSchema& kSchema = Node::kSchema;
  // (batch_index, box...): the box is (x1, y1, x2, y2) or (cx, cy, w, h, theta).
  static constexpr int64_t kColumns = Node::kRotated ? 6 : 5;

  MultiLevelKernel(const Attributes& attrs, const OpDef& def)
      : KernelBase(def),
        pooling_(attrs, nullptr),
        strides_(attrs.Floats("featmap_strides")),
        finest_scale_(attrs.Int("finest_scale")),
        roi_scale_factor_(attrs.Float("roi_scale_factor")),
        mode_(Node::template ReadPoolMode<A>(attrs)) {
    Check(!strides_.empty(), "attribute 'featmap_strides' must list the stride of each level, got an empty list");
    for (float stride : strides_) {
      Check(std::isfinite(stride) && stride > 0, "attribute 'featmap_strides' must hold positive finite strides, got ",
            stride);
    }
    Check(std::isfinite(roi_scale_factor_), "attribute 'roi_scale_factor' must be finite, got ", roi_scale_factor_);
    if constexpr (!Node::kPlugin) {
      // mmdet accepts these, but they only ever give a box that is empty, reflected, or everywhere.
      Check(roi_scale_factor_ > 0, "attribute 'roi_scale_factor' must be positive, got ", roi_scale_factor_);
      Check(finest_scale_ > 0, "attribute 'finest_scale' must be positive, got ", finest_scale_);
    }
    if constexpr (Node::kRotated) {
      clockwise_ = attrs.Int("clockwise");
      Check(clockwise_ == 0 || clockwise_ == 1, "attribute 'clockwise' must be 0 or 1, got ", clockwise_);
    }
  }

  void Compute(const KernelIO& io) const {
    const ConstTensor<T> roi_input = io.Input<T>(0, 2);
    const auto levels = static_cast<int64_t>(io.InputCount()) - 1;
    Check(levels >= 1, "needs at least one input 'features'");
    // The plugins keep the first strides and ignore the rest; ortops' own node wants one per level.
    const auto strides = static_cast<int64_t>(strides_.size());
    Check(Node::kPlugin ? strides >= levels : strides == levels, "attribute 'featmap_strides' lists ", strides,
          " strides, but the node has ", levels, " inputs 'features'");
    std::vector<ConstTensor<T>> features;
    features.reserve(static_cast<size_t>(levels));
    for (int64_t l = 0; l < levels; ++l) {
      features.push_back(io.Input<T>(static_cast<size_t>(1 + l), 4));
      const Shape& shape = features.back().shape;
      const Shape& first = features.front().shape;
      Check(shape[0] == first[0] && shape[1] == first[1], "every level needs the same N and C, but input 'features[", l,
            "]' has shape ", ShapeText{shape}, " and 'features[0]' ", ShapeText{first});
    }
    Scratch<A> roi_storage;
    const ConstTensor<A> rois{Upcast(io, roi_input, roi_storage), roi_input.shape};
    roi_pooling::CheckRois(rois, kColumns,
                           Node::kRotated ? "(batch_index, cx, cy, w, h, theta)" : "(batch_index, x1, y1, x2, y2)",
                           features[0].shape, "features[0]");
    const int64_t roi_count = rois.dim(0), channels = features[0].dim(1), bins = pooling_.bins();
    T* output = io.Output<T>(0, {roi_count, channels, pooling_.output_height, pooling_.output_width});
    if (roi_count == 0 || channels == 0) return;

    // Each roi's level, from the roi before rescaling (mmdet's map_roi_levels), and the rois per level.
    ScratchVector<int64_t> level = io.Vector<int64_t>(static_cast<size_t>(roi_count));
    ScratchVector<int64_t> per_level = io.Vector<int64_t>(static_cast<size_t>(levels));
    for (int64_t r = 0; r < roi_count; ++r) {
      const A* box = rois.data + kColumns * r + 1;
      const A area = Node::kRotated ? box[2] * box[3] : (box[2] - box[0]) * (box[3] - box[1]);
      level[r] = MapLevel(area, finest_scale_, levels);
      ++per_level[level[r]];
    }
    // Each level is read from a channels-last copy where that pays for the rois it pools.
    std::vector<Scratch<A>> copies(static_cast<size_t>(levels));
    std::vector<roi_pooling::PoolSource<T, A>> sources;
    sources.reserve(static_cast<size_t>(levels));
    bool any_channels_last = false;
    for (int64_t l = 0; l < levels; ++l) {
      sources.push_back(roi_pooling::MakePoolSource(io, features[l], per_level[l], pooling_, copies[l]));
      any_channels_last |= sources.back().channels_last != nullptr;
    }
    const A min_side = Node::template MinSide<A>(pooling_.aligned != 0);
    const auto factor = static_cast<A>(roi_scale_factor_);
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
      ScratchVector<BilinearTap<A>> taps(io.Allocator<BilinearTap<A>>());
      roi_pooling::PoolScratch<T, A> scratch(io, any_channels_last, channels, bins);
      for (size_t position = begin; position < end; ++position) {
        const int64_t r = order[position];
        const A* roi = rois.data + kColumns * r;
        const int64_t l = level[r];
        const roi_pooling::PoolSource<T, A>& source = sources[l];
        // The spatial scale as mmdet computes it (1 / stride in double), then in A.
        const auto scale = static_cast<A>(1.0 / static_cast<double>(strides_[l]));
        A box[kColumns - 1];
        for (int64_t k = 0; k + 1 < kColumns; ++k) box[k] = roi[k + 1];
        Node::Rescale(factor, box);
        int64_t per_bin = 0;
        if constexpr (Node::kRotated) {
          const auto g = roi_pooling::RotatedRoiGeometry(box, scale, min_side, clockwise_ != 0, pooling_);
          per_bin = g.grid_h * g.grid_w;
          taps.resize(static_cast<size_t>(bins * per_bin));
          roi_pooling::RotatedRoiTaps(g, pooling_, source.height, source.width, taps.data());
        } else {
          const auto g = roi_pooling::AlignedRoiGeometry(box, scale, min_side, pooling_);
          per_bin = g.grid_h * g.grid_w;
          taps.resize(static_cast<size_t>(bins * per_bin));
          roi_pooling::AlignedRoiTaps(g, pooling_, source.height, source.width, taps.data());
        }
        roi_pooling::PoolRoi(source, static_cast<int64_t>(roi[0]), taps.data(), bins, per_bin, mode_,
                             output + r * channels * bins, scratch);
      }
    });
  }

 private:
  roi_pooling::PoolingAttributes pooling_;
  std::vector<float> strides_;
  int64_t finest_scale_;
  float roi_scale_factor_;
  roi_pooling::PoolMode<A> mode_;
  int64_t clockwise_ = 0;
};

template <typename T>
using OrtopsKernel = MultiLevelKernel<T, OrtopsNode>;
template <typename T>
using MmdeployKernel = MultiLevelKernel<T, MmdeployNode>;
template <typename T>
using MmdeployRotatedKernel = MultiLevelKernel<T, MmdeployRotatedNode>;

}  // namespace

// float32 only: ONNX Runtime 1.17 cannot type the output of a node with two or more values in
// a variadic input when the op is registered for several element types (its type inference
// looks for a kernel type constraint per node input, and kernels have one per declared input).
std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<OrtopsKernel, float>(def); }
std::vector<OpPtr> MakeMmdeploy(const OpDef& def) { return MakeOps<MmdeployKernel, float>(def); }
std::vector<OpPtr> MakeMmdeployRotated(const OpDef& def) { return MakeOps<MmdeployRotatedKernel, float>(def); }

}  // namespace ortops::multi_level_roi_align
