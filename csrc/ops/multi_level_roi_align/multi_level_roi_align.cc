// Multi-level RoIAlign: an FPN RoI extractor (mmdet's SingleRoIExtractor, mmrotate's
// RotatedSingleRoIExtractor, torchvision's MultiScaleRoIAlign) as one node. Each roi goes to one
// pyramid level, by its scale or as input 'levels' says, and is pooled there with RoIAlign's (or
// RoIAlignRotated's) math from roi_pooling.h.
#include "ops/multi_level_roi_align/multi_level_roi_align.h"

#include <algorithm>
#include <numeric>
#include <tuple>
#include <vector>

#include "core/upcast.h"
#include "math/bilinear.h"
#include "ops/multi_level_roi_align/multi_level.h"
#include "ops/roi_align/roi_pooling.h"

namespace ortops::multi_level_roi_align {

namespace {

// Registered for T = float only (see Make); written, like RoIAlign, for elements of T read
// as their compute type A = ComputeType<T>.
template <typename T, typename Node>
struct MultiLevelKernel : OpKernel<T, kSchemaOf<Node>, LevelAttributes<Node, ComputeType<T>>> {
  using OpKernel<T, kSchemaOf<Node>, LevelAttributes<Node, ComputeType<T>>>::OpKernel;
  using A = ComputeType<T>;
  static constexpr int64_t kColumns = multi_level_roi_align::kColumns<Node>;

  void Compute(const KernelIO& io, const LevelAttributes<Node, A>& attributes) const {
    const roi_pooling::PoolingAttributes& pooling = attributes.pooling;
    const ConstTensor<T> roi_input = io.Input<T>(0, 2);
    const std::vector<ConstTensor<T>> features = FeatureInputs<T>(io, attributes);
    const auto levels = static_cast<int64_t>(features.size());
    Scratch<A> roi_storage;
    const ConstTensor<A> rois{Upcast(io, roi_input, roi_storage), roi_input.shape};
    roi_pooling::CheckRoisShape(rois, kColumns, kRoiLayout<Node>);
    const int64_t roi_count = rois.dim(0), channels = features[0].dim(1), bins = pooling.bins();
    ConstTensor<int64_t> given_levels;
    if constexpr (Node::kLevelsInput) given_levels = LevelsInput(io, roi_count);

    // Each roi's level: given, or from the roi before rescaling (mmdet's map_roi_levels); the
    // rois per level. Only rois on a level are checked: the others are not read.
    ScratchVector<int64_t> level = io.Vector<int64_t>(static_cast<size_t>(roi_count));
    ScratchVector<int64_t> per_level = io.Vector<int64_t>(static_cast<size_t>(levels));
    for (int64_t r = 0; r < roi_count; ++r) {
      const A* roi = rois.data + kColumns * r;
      if constexpr (Node::kLevelsInput) {
        level[r] = GivenLevel(given_levels.data[r], levels);
        if (level[r] == kNoLevel) continue;
      }
      roi_pooling::CheckRoi(roi, r, kColumns, features[0].shape, "features[0]");
      if constexpr (!Node::kLevelsInput) level[r] = LevelOf<Node>(roi, attributes.finest_scale, levels);
      ++per_level[level[r]];
    }
    T* output = io.Output<T>(0, {roi_count, channels, pooling.output_height, pooling.output_width});
    if (roi_count == 0 || channels == 0) return;

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
    // A roi on no level is not read: its values were not checked (NaN would break the order).
    auto key = [&](int64_t r) {
      const A* roi = rois.data + kColumns * r;
      if (level[r] == kNoLevel) return std::tuple(kNoLevel, int64_t{0}, A(0), A(0));
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
        if (l == kNoLevel) {
          std::fill_n(output + r * channels * bins, channels * bins, T(0));
          continue;
        }
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
std::vector<OpPtr> MakeByLevel(const OpDef& def) { return MakeOps<MultiLevelKernel, GivenLevelNode, float>(def); }
std::vector<OpPtr> MakeMmdeploy(const OpDef& def) { return MakeOps<MultiLevelKernel, MmdeployNode, float>(def); }
std::vector<OpPtr> MakeMmdeployRotated(const OpDef& def) {
  return MakeOps<MultiLevelKernel, MmdeployRotatedNode, float>(def);
}

}  // namespace ortops::multi_level_roi_align
