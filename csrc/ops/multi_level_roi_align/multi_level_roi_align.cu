// The multi-level nodes' device path: each roi's level, rescaled box and geometry as the CPU
// kernel makes them (multi_level.h), pooled by the RoIAlign family's functor
// (roi_pool_device.h); the CPU kernel's checks and bits. Any number of levels: their maps
// reach the kernel in its arguments (LevelList), or as a table copied once per call where there
// are more than eight.
#include <algorithm>
#include <vector>

#include "device/device_kernel.h"
#include "ops/multi_level_roi_align/multi_level.h"
#include "ops/multi_level_roi_align/multi_level_roi_align.h"
#include "ops/roi_align/roi_pool_device.h"

namespace ortops::multi_level_roi_align {
namespace {

// One level in device memory: its features [N, C, H, W] and spatial scale.
template <typename T>
struct Level {
  const T* features;
  int64_t height, width;
  ComputeType<T> scale;
};

// The levels, in the kernel's arguments where there are at most kInlineLevels (every real
// FPN: a run then copies nothing from host memory, and a CUDA graph can hold it), else in
// device memory. Level l is picked by an unrolled loop, so that the table stays in the
// arguments rather than being copied to each thread's stack.
template <typename T>
struct LevelList {
  static constexpr int64_t kInlineLevels = 8;
  Level<T> inline_levels[kInlineLevels];
  const Level<T>* device_levels = nullptr;  // where there are more

  ORTOPS_HD Level<T> operator[](int64_t l) const {
    if (device_levels != nullptr) return device_levels[l];
    Level<T> level = inline_levels[0];
    ORTOPS_UNROLL
    for (int64_t k = 1; k < kInlineLevels; ++k) {
      if (k == l) level = inline_levels[k];
    }
    return level;
  }
};

// Rois [R, kColumns<Node>] (batch_index, box...), each on its level of `levels`.
template <typename T, typename Node>
struct LevelRois {
  using A = ComputeType<T>;
  static constexpr int64_t kColumns = multi_level_roi_align::kColumns<Node>;
  const T* rois;
  const int64_t* given_levels;  // device memory; nullptr where the node finds the levels
  LevelList<T> levels;
  int64_t level_count, images, channels, finest_scale;
  LevelGeometry<Node, A> geometry;

  ORTOPS_HD void Read(int64_t r, A* roi) const {
    for (int64_t k = 0; k < kColumns; ++k) roi[k] = static_cast<A>(rois[kColumns * r + k]);
  }
  ORTOPS_HD int64_t LevelOfRoi(int64_t r, const A* roi) const {
    if constexpr (Node::kLevelsInput) {
      return GivenLevel(given_levels[r], level_count);
    } else {
      return LevelOf<Node>(roi, finest_scale, level_count);
    }
  }
  ORTOPS_HD bool Valid(int64_t r) const {
    A roi[kColumns];
    Read(r, roi);
    return LevelOfRoi(r, roi) == kNoLevel || roi_pooling::RoiIsValid(roi, kColumns, images);
  }
  ORTOPS_HD auto Locate(int64_t r) const {
    A roi[kColumns];
    Read(r, roi);
    const int64_t l = LevelOfRoi(r, roi);
    if (l == kNoLevel) {
      // No samples on an empty map: zeros, whatever the roi holds.
      for (int64_t k = 0; k < kColumns; ++k) roi[k] = A(0);
      auto g = geometry(roi, A(0));
      g.grid_h = g.grid_w = 0;
      return roi_pooling::RoiOnMap<T, decltype(g)>{g, levels[0].features, 0, 0};
    }
    const Level<T> level = levels[l];
    const auto image = static_cast<int64_t>(roi[0]);
    return roi_pooling::RoiOnMap<T, decltype(geometry(roi, level.scale))>{
        geometry(roi, level.scale), level.features + image * channels * level.height * level.width, level.height,
        level.width};
  }
};

template <typename T, typename Node>
class MultiLevelDeviceKernel
    : public OpKernel<T, kSchemaOf<Node>, LevelAttributes<Node, ComputeType<T>>, device::DeviceKernelBase> {
 public:
  using OpKernel<T, kSchemaOf<Node>, LevelAttributes<Node, ComputeType<T>>, device::DeviceKernelBase>::OpKernel;
  using A = ComputeType<T>;
  static constexpr int64_t kColumns = multi_level_roi_align::kColumns<Node>;

  void Compute(const device::DeviceIO& io, const LevelAttributes<Node, A>& attributes) const {
    const roi_pooling::PoolingAttributes& pooling = attributes.pooling;
    const ConstTensor<T> rois = io.Input<T>(0, 2);
    const std::vector<ConstTensor<T>> features = FeatureInputs<T>(io, attributes);
    roi_pooling::CheckRoisShape(rois, kColumns, kRoiLayout<Node>);
    ConstTensor<int64_t> given_levels;
    if constexpr (Node::kLevelsInput) given_levels = LevelsInput(io, rois.dim(0));
    const auto level_count = static_cast<int64_t>(features.size());
    std::vector<Level<T>> host_levels;
    host_levels.reserve(features.size());
    for (int64_t l = 0; l < level_count; ++l) {
      const ConstTensor<T>& level = features[static_cast<size_t>(l)];
      host_levels.push_back({level.data, level.dim(2), level.dim(3), attributes.Scale(l)});
    }
    LevelList<T> levels{};
    Scratch<Level<T>> device_levels;
    if (level_count <= LevelList<T>::kInlineLevels) {
      std::copy(host_levels.begin(), host_levels.end(), levels.inline_levels);
    } else {
      device_levels = io.Allocate<Level<T>>(host_levels.size());
      io.CopyToDevice(device_levels.data(), host_levels.data(), host_levels.size());
      levels.device_levels = device_levels.data();
    }

    const int64_t count = rois.dim(0), channels = features[0].dim(1);
    const LevelGeometry<Node, A> geometry = attributes.Geometry();
    const LevelRois<T, Node> located{rois.data, given_levels.data,       levels,  level_count, features[0].dim(0),
                                     channels,  attributes.finest_scale, geometry};
    device::CheckEach(io, rois.data, count, kColumns,
                      roi_pooling::RoiFails<LevelRois<T, Node>>{located, pooling.bins(), channels > 0},
                      [&](int64_t r, const T* values) {
                        A roi[kColumns];
                        for (int64_t k = 0; k < kColumns; ++k) roi[k] = static_cast<A>(values[k]);
                        roi_pooling::CheckRoi(roi, r, kColumns, features[0].shape, "features[0]");
                        int64_t l = 0;
                        if constexpr (Node::kLevelsInput) {
                          io.CopyToHost(&l, given_levels.data + r, 1);  // a failing roi has a level
                        } else {
                          l = LevelOf<Node>(roi, attributes.finest_scale, level_count);
                        }
                        roi_pooling::CheckGrid(geometry(roi, attributes.Scale(l)), pooling);
                      });
    T* output = io.Output<T>(0, {count, channels, pooling.output_height, pooling.output_width});
    const roi_pooling::MeanOrMax<A> pool{attributes.mode};
    int64_t map_pixels = 0, map_values = 0;
    for (const ConstTensor<T>& level : features) {
      map_pixels += level.dim(0) * level.dim(2) * level.dim(3);
      map_values += level.size();
    }
    if (level_count > LevelList<T>::kInlineLevels ||
        !device::ReadsChannelsLast(count * pooling.bins(), map_pixels, channels,
                                   map_values * static_cast<int64_t>(sizeof(T)))) {
      roi_pooling::PoolEveryBin(io, located, pool, output, count, channels, pooling);
      return;
    }
    // Every level copied channels last, one after another, each image at its offset in the
    // level: the same rois located on the copies.
    Scratch<T> copies = io.Allocate<T>(static_cast<size_t>(map_values));
    LevelRois<T, Node> on_copies = located;
    T* copy = copies.data();
    for (int64_t l = 0; l < level_count; ++l) {
      const ConstTensor<T>& level = features[static_cast<size_t>(l)];
      device::TransposeLastTwo(io, level.data, copy, level.dim(0), channels, level.dim(2) * level.dim(3));
      on_copies.levels.inline_levels[l].features = copy;
      copy += level.size();
    }
    roi_pooling::PoolEveryBinChannelsLast(io, on_copies, pool, output, count, channels, pooling);
  }
};

}  // namespace

// float32 only, as the CPU kernels (multi_level_roi_align.cc says why).
std::vector<OpPtr> MakeDevice(const OpDef& def) { return MakeOps<MultiLevelDeviceKernel, OrtopsNode, float>(def); }
std::vector<OpPtr> MakeByLevelDevice(const OpDef& def) {
  return MakeOps<MultiLevelDeviceKernel, GivenLevelNode, float>(def);
}
std::vector<OpPtr> MakeMmdeployDevice(const OpDef& def) {
  return MakeOps<MultiLevelDeviceKernel, MmdeployNode, float>(def);
}
std::vector<OpPtr> MakeMmdeployRotatedDevice(const OpDef& def) {
  return MakeOps<MultiLevelDeviceKernel, MmdeployRotatedNode, float>(def);
}

}  // namespace ortops::multi_level_roi_align
