// What the multi-level nodes' CPU kernel and device path share: what the four nodes differ
// in, their attributes and input checks, each roi's level, and its geometry on that level.
// Functions marked ORTOPS_HD also run on the device.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/custom_op.h"
#include "core/host_device.h"
#include "ops/multi_level_roi_align/multi_level_roi_align.h"
#include "ops/roi_align/roi_geometry.h"

namespace ortops::multi_level_roi_align {

// The level of a roi of area `area` among `levels`: floor(log2(sqrt(area) / finest_scale +
// 1e-6)) clamped to [0, levels - 1], in the rois' compute type as mmdet computes it. A NaN (a
// negative area) gives level 0, as the plugins' float-to-int conversion does on CUDA.
template <typename A>
ORTOPS_HD int64_t MapLevel(A area, int64_t finest_scale, int64_t levels) {
  const A level = std::floor(std::log2(std::sqrt(area) / static_cast<A>(finest_scale) + static_cast<A>(1e-6)));
  if (!(level > A(0))) return 0;
  if (level >= static_cast<A>(levels - 1)) return levels - 1;
  return static_cast<int64_t>(level);
}

// What the four nodes differ in: the roi layout, whether a roi's level is an input or follows
// from its box, how the box is rescaled, the lower bound on its sides, and how the pool mode and
// the levels' scales are stored.

// The box (x1, y1, x2, y2) given new half sides about its centre.
template <typename A>
ORTOPS_HD void ResizeAboutCentre(A* box, A half_w, A half_h) {
  const A cx = (box[0] + box[2]) * A(0.5), cy = (box[1] + box[3]) * A(0.5);
  box[0] = cx - half_w;
  box[1] = cy - half_h;
  box[2] = cx + half_w;
  box[3] = cy + half_h;
}

// ortops' `avg` or `max` in the string attribute `name`: max starts from -infinity, and a bin
// without samples gives 0 (as ortops::RoIAlign).
template <typename A>
roi_pooling::PoolMode<A> ReadAvgOrMax(const Attributes& attrs, const char* name) {
  const std::string mode = attrs.String(name);
  Check(mode == "avg" || mode == "max", "attribute '", name, "' must be \"avg\" or \"max\", got \"", mode, "\"");
  return {.max = mode == "max", .max_start = -std::numeric_limits<A>::infinity(), .empty_bin = A(0)};
}

// ortops::MultiLevelRoIAlign: mmdet's SingleRoIExtractor over mmcv's RoIAlign.
struct OrtopsNode {
  static constexpr const OpSchema& kSchema = multi_level_roi_align::kSchema;
  static constexpr bool kRotated = false;
  static constexpr bool kPlugin = false;
  static constexpr bool kLevelsInput = false;

  template <typename A>
  static roi_pooling::PoolMode<A> ReadPoolMode(const Attributes& attrs) {
    return ReadAvgOrMax<A>(attrs, "pool_mode");
  }
  // mmcv's RoIAlign: sides of at least 1 only for legacy (not aligned) rois.
  template <typename A>
  static A MinSide(bool aligned) {
    return aligned ? roi_pooling::kNoMinSide<A> : A(1);
  }
  // mmdet's roi_rescale: width and height times the factor, about the centre.
  template <typename A>
  static ORTOPS_HD void Rescale(A factor, A* box) {
    if (factor == A(1)) return;
    ResizeAboutCentre(box, (box[2] - box[0]) * factor * A(0.5), (box[3] - box[1]) * factor * A(0.5));
  }
};

// ortops::RoIAlignByLevel: each roi's level is input 'levels' (torchvision's MultiScaleRoIAlign
// after its LevelMapper); the pooling is ortops::RoIAlign's.
struct GivenLevelNode {
  static constexpr const OpSchema& kSchema = multi_level_roi_align::kByLevelSchema;
  static constexpr bool kRotated = false;
  static constexpr bool kPlugin = false;
  static constexpr bool kLevelsInput = true;

  template <typename A>
  static roi_pooling::PoolMode<A> ReadPoolMode(const Attributes& attrs) {
    return ReadAvgOrMax<A>(attrs, "mode");
  }
  template <typename A>
  static A MinSide(bool aligned) {
    return OrtopsNode::MinSide<A>(aligned);
  }
  template <typename A>
  static ORTOPS_HD void Rescale(A, A*) {}
};

// mmdeploy::MMCVMultiLevelRoiAlign: trt_multi_level_roi_align_kernel.cu.
struct MmdeployNode {
  static constexpr const OpSchema& kSchema = multi_level_roi_align::kMmdeploySchema;
  static constexpr bool kRotated = false;
  static constexpr bool kPlugin = true;
  static constexpr bool kLevelsInput = false;

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
  static ORTOPS_HD void Rescale(A factor, A* box) {
    if (!(factor > A(0))) return;
    const A half_factor = factor * A(0.5);
    ResizeAboutCentre(box, (box[2] - box[0] + A(1)) * half_factor - A(0.5),
                      (box[3] - box[1] + A(1)) * half_factor - A(0.5));
  }
};

// mmdeploy::MMCVMultiLevelRotatedRoiAlign: trt_multi_level_rotated_roi_align_kernel.cu.
struct MmdeployRotatedNode {
  static constexpr const OpSchema& kSchema = multi_level_roi_align::kMmdeployRotatedSchema;
  static constexpr bool kRotated = true;
  static constexpr bool kPlugin = true;
  static constexpr bool kLevelsInput = false;

  template <typename A>
  static roi_pooling::PoolMode<A> ReadPoolMode(const Attributes&) {
    return roi_pooling::kAveragePool<A>;
  }
  // The plugin raises the sides to 1 whether or not the roi is aligned.
  template <typename A>
  static A MinSide(bool) {
    return A(1);
  }
  // mmrotate's roi_rescale, as the plugin: w and h times the factor, when it is positive.
  template <typename A>
  static ORTOPS_HD void Rescale(A factor, A* box) {
    if (!(factor > A(0))) return;
    box[2] *= factor;
    box[3] *= factor;
  }
};

// A node's schema, for its kernels' OpKernel: nvcc's host pass writes a static reference
// member given as a template argument (Node::kSchema) as its address, which GCC then refuses.
template <typename Node>
inline constexpr const OpSchema& kSchemaOf = Node::kSchema;

// Rois of a node: [R, kColumns], (batch_index, box...), the box (x1, y1, x2, y2) or (cx, cy,
// w, h, theta).
template <typename Node>
inline constexpr int64_t kColumns = Node::kRotated ? 6 : 5;
template <typename Node>
inline constexpr const char* kRoiLayout =
    Node::kRotated ? "(batch_index, cx, cy, w, h, theta)" : "(batch_index, x1, y1, x2, y2)";

// Inputs of a node: rois, then 'levels' where the node is given them, then the features.
template <typename Node>
inline constexpr size_t kFirstFeatureInput = Node::kLevelsInput ? 2 : 1;

// The level of roi `roi` (batch_index, box...) among `levels`, from its box before rescaling
// (mmdet's map_roi_levels).
template <typename Node, typename A>
ORTOPS_HD int64_t LevelOf(const A* roi, int64_t finest_scale, int64_t levels) {
  const A* box = roi + 1;
  const A area = Node::kRotated ? box[2] * box[3] : (box[2] - box[0]) * (box[3] - box[1]);
  return MapLevel(area, finest_scale, levels);
}

// A given level (RoIAlignByLevel's input 'levels'), or kNoLevel for one outside [0, levels):
// such a roi is not pooled and gives zeros, as torchvision's merge leaves it.
inline constexpr int64_t kNoLevel = -1;
ORTOPS_HD inline int64_t GivenLevel(int64_t level, int64_t levels) {
  return level >= 0 && level < levels ? level : kNoLevel;
}

// Input 'levels' of a node given them: [R] int64, one per roi of rois [R, ...].
template <typename IO>
ConstTensor<int64_t> LevelsInput(const IO& io, int64_t roi_count) {
  const ConstTensor<int64_t> levels = io.template Input<int64_t>(1, 1);
  Check(levels.dim(0) == roi_count, "input 'levels' must hold one level per roi, shape [", roi_count, "], got ",
        ShapeText{levels.shape});
  return levels;
}

// The geometry of roi `roi` (batch_index, box...) on a level of spatial scale `scale`: its box
// rescaled as the node does, then RoIAlign's or RoIAlignRotated's geometry. Its grid is
// invalid (roi_pooling::GridIsValid) for a roi that needs too many samples.
template <typename Node, typename A>
struct LevelGeometry {
  A factor, min_side;
  bool clockwise;
  roi_pooling::PoolingAttributes pooling;

  ORTOPS_HD auto operator()(const A* roi, A scale) const {
    A box[kColumns<Node> - 1];
    for (int64_t k = 0; k + 1 < kColumns<Node>; ++k) box[k] = roi[k + 1];
    Node::Rescale(factor, box);
    if constexpr (Node::kRotated) {
      return roi_pooling::RotatedRoiGeometryOf(box, scale, min_side, clockwise, pooling);
    } else {
      return roi_pooling::AlignedRoiGeometryOf(box, scale, min_side, pooling);
    }
  }
};

// The attributes of a multi-level node, read and checked as every kernel of it does; A is
// the rois' compute type.
template <typename Node, typename A>
struct LevelAttributes {
  explicit LevelAttributes(const Attributes& attrs)
      : pooling(attrs, nullptr), mode(Node::template ReadPoolMode<A>(attrs)) {
    if constexpr (Node::kLevelsInput) {
      for (float scale : attrs.Floats("spatial_scales")) {
        Check(std::isfinite(scale), "attribute 'spatial_scales' must hold finite scales, got ", scale);
        scales.push_back(static_cast<A>(scale));
      }
      Check(!scales.empty(), "attribute 'spatial_scales' must list the scale of each level, got an empty list");
      return;
    }
    const std::vector<float> strides = attrs.Floats("featmap_strides");
    finest_scale = attrs.Int("finest_scale");
    roi_scale_factor = attrs.Float("roi_scale_factor");
    Check(!strides.empty(), "attribute 'featmap_strides' must list the stride of each level, got an empty list");
    for (float stride : strides) {
      Check(std::isfinite(stride) && stride > 0, "attribute 'featmap_strides' must hold positive finite strides, got ",
            stride);
      // As mmdet computes it: 1 / stride in double, then in A.
      scales.push_back(static_cast<A>(1.0 / static_cast<double>(stride)));
    }
    Check(std::isfinite(roi_scale_factor), "attribute 'roi_scale_factor' must be finite, got ", roi_scale_factor);
    if constexpr (!Node::kPlugin) {
      // mmdet accepts these, but they only ever give a box that is empty, reflected, or everywhere.
      Check(roi_scale_factor > 0, "attribute 'roi_scale_factor' must be positive, got ", roi_scale_factor);
      Check(finest_scale > 0, "attribute 'finest_scale' must be positive, got ", finest_scale);
    }
    if constexpr (Node::kRotated) {
      clockwise = attrs.Int("clockwise");
      Check(clockwise == 0 || clockwise == 1, "attribute 'clockwise' must be 0 or 1, got ", clockwise);
    }
  }

  A Scale(int64_t level) const { return scales[static_cast<size_t>(level)]; }

  LevelGeometry<Node, A> Geometry() const {
    return {static_cast<A>(roi_scale_factor), Node::template MinSide<A>(pooling.aligned != 0), clockwise != 0, pooling};
  }

  roi_pooling::PoolingAttributes pooling;
  roi_pooling::PoolMode<A> mode;
  // Each level's spatial scale: given, or 1 / its stride.
  std::vector<A> scales;
  int64_t finest_scale = 0;
  float roi_scale_factor = 1.0f;
  int64_t clockwise = 0;
};

// The inputs 'features' (one per level) of a KernelIO or a device::DeviceIO, checked against
// the attributes and each other.
template <typename T, typename Node, typename IO, typename A>
std::vector<ConstTensor<T>> FeatureInputs(const IO& io, const LevelAttributes<Node, A>& attributes) {
  constexpr size_t kFirst = kFirstFeatureInput<Node>;
  const auto levels = static_cast<int64_t>(io.InputCount()) - static_cast<int64_t>(kFirst);
  Check(levels >= 1, "needs at least one input 'features'");
  // The plugins keep the first strides and ignore the rest; ortops' own nodes want one per level.
  const auto scales = static_cast<int64_t>(attributes.scales.size());
  Check(Node::kPlugin ? scales >= levels : scales == levels, "attribute '",
        Node::kLevelsInput ? "spatial_scales' lists " : "featmap_strides' lists ", scales,
        Node::kLevelsInput ? " scales" : " strides", ", but the node has ", levels, " inputs 'features'");
  std::vector<ConstTensor<T>> features;
  features.reserve(static_cast<size_t>(levels));
  for (int64_t l = 0; l < levels; ++l) {
    features.push_back(io.template Input<T>(kFirst + static_cast<size_t>(l), 4));
    const Shape& shape = features.back().shape;
    const Shape& first = features.front().shape;
    Check(shape[0] == first[0] && shape[1] == first[1], "every level needs the same N and C, but input 'features[", l,
          "]' has shape ", ShapeText{shape}, " and 'features[0]' ", ShapeText{first});
  }
  return features;
}

}  // namespace ortops::multi_level_roi_align
