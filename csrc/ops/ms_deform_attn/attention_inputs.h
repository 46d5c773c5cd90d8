// The inputs of multi-scale deformable attention, checked as the CPU kernel and the device
// path both check them, and the level table they read.
#pragma once

#include <cstdint>
#include <vector>

#include "core/custom_op.h"
#include "core/host_device.h"
#include "math/bilinear.h"
#include "ops/ms_deform_attn/ms_deform_attn.h"

namespace ortops::ms_deform_attn {

// a * b, or an error naming `what` when it does not fit in int64 (dims are untrusted).
inline int64_t Product(int64_t a, int64_t b, const char* what) {
  int64_t result = 0;
  Check(!__builtin_mul_overflow(a, b, &result), what, " overflows: ", a, " x ", b);
  return result;
}

template <typename A>
struct Level {
  int64_t height, width;
  A height_f, width_f;
  int64_t start;   // first row of S
  int64_t points;  // the level's run of points, which follows the previous level's
};

// The attribute `points_per_level` of ortops' nodes (mmdeploy's has none): empty for one P per
// level, read from the inputs' shapes; else P_l of each level, each at least 1, read and
// checked once when the session is created.
struct PointsPerLevel {
  PointsPerLevel(const Attributes& attrs, Node node);
  std::vector<int64_t> counts;
  int64_t total = 0;  // sum of P_l
};

inline PointsPerLevel::PointsPerLevel(const Attributes& attrs, Node node) {
  if (node == Node::kMmdeploy) return;
  counts = attrs.Ints("points_per_level");
  for (size_t l = 0; l < counts.size(); ++l) {
    Check(counts[l] >= 1, "attribute 'points_per_level' must hold at least 1 point per level, got ", counts[l],
          " at level ", l);
    Check(!__builtin_add_overflow(total, counts[l], &total), "attribute 'points_per_level': the sum overflows int64");
  }
}

// Where the sampling location (x, y), normalised to the level, reads. As mmcv: the pixel
// coordinate loc * size - 0.5, in the compute type A, sampled by the zero-padding rule.
template <typename A, typename T>
ORTOPS_HD ZeroPaddedSample<A> SampleAt(const Level<A>& level, const T* location) {
  const A x = static_cast<A>(location[0]) * level.width_f - A(0.5);
  const A y = static_cast<A>(location[1]) * level.height_f - A(0.5);
  return ZeroPaddedBilinear(y, x, level.height, level.width);
}

// The same for the FromOffsets node, whose location is the query's reference point on the
// level plus the offset in the level's pixels, computed as the model computes it:
// reference + offset / (W_l, H_l), in A.
template <typename A, typename T>
ORTOPS_HD ZeroPaddedSample<A> SampleAt(const Level<A>& level, const T* offset, const T* reference) {
  const A location[2] = {static_cast<A>(reference[0]) + static_cast<A>(offset[0]) / level.width_f,
                         static_cast<A>(reference[1]) + static_cast<A>(offset[1]) / level.height_f};
  return SampleAt(level, location);
}

template <typename T>
struct Inputs {
  ConstTensor<T> value;                 // [B, S, H, D]
  ConstTensor<int64_t> shapes, starts;  // [L, 2], [L]
  ConstTensor<T> locations;             // [B, Q, H, L, P, 2], or [B, Q, H, sum(P_l), 2]; offsets for FromOffsets
  const T* references;                  // FromOffsets' [B, Q, L, 2]; else null
  ConstTensor<T> weights;               // [B, Q, H, L, P], or [B, Q, H, sum(P_l)]
  int64_t batch, keys, heads, dim, levels, queries;
  const PointsPerLevel* points_per_level;
  int64_t points;    // P, where every level has P points; else 0
  int64_t samples;   // points per query and head, level after level (L * P or sum of P_l)
  int64_t channels;  // H * D
};

// The inputs of a KernelIO or a device::DeviceIO, their shapes checked.
template <typename T, Node kNode, typename IO>
Inputs<T> CheckedInputs(const IO& io, const PointsPerLevel& points_per_level) {
  const bool flattened = !points_per_level.counts.empty();
  // FromOffsets' reference points come before the offsets, which stand where the locations do.
  constexpr size_t kReferencesInput = 3, kLocationsInput = kNode == Node::kFromOffsets ? 4 : 3;
  ConstTensor<T> value = io.template Input<T>(0, 4);
  ConstTensor<int64_t> shapes = io.template Input<int64_t>(1, 2);
  ConstTensor<int64_t> starts = io.template Input<int64_t>(2, 1);
  ConstTensor<T> locations = io.template Input<T>(kLocationsInput, flattened ? 5 : 6);
  ConstTensor<T> weights = io.template Input<T>(kLocationsInput + 1, flattened ? 4 : 5);
  const char* locations_name = kNode == Node::kFromOffsets ? "sampling_offsets" : "sampling_locations";
  const int64_t batch = value.dim(0), keys = value.dim(1), heads = value.dim(2), dim = value.dim(3);
  Check(shapes.dim(1) == 2, "input 'value_spatial_shapes' must have shape [L, 2], got ", ShapeText{shapes.shape});
  const int64_t levels = shapes.dim(0);
  Check(starts.dim(0) == levels, "input 'value_level_start_index' must have shape [L] with L = ", levels,
        " (the levels of 'value_spatial_shapes'), got ", ShapeText{starts.shape});
  const int64_t queries = locations.dim(1);
  int64_t points = 0, samples = 0;
  Shape expected_weights;
  if (flattened) {
    const auto counts = static_cast<int64_t>(points_per_level.counts.size());
    Check(counts == levels, "attribute 'points_per_level' has ", counts, " entries, but 'value_spatial_shapes' ",
          ShapeText{shapes.shape}, " has L = ", levels, " levels");
    samples = points_per_level.total;
    Check(
        locations.dim(0) == batch && locations.dim(2) == heads && locations.dim(3) == samples && locations.dim(4) == 2,
        "input '", locations_name, "' must have shape [B, Q, H, sum(P_l), 2] with B = ", batch, ", H = ", heads,
        " (from 'value' ", ShapeText{value.shape}, ") and sum(P_l) = ", samples, " (of 'points_per_level'), got ",
        ShapeText{locations.shape});
    expected_weights = {batch, queries, heads, samples};
  } else {
    Check(locations.dim(0) == batch && locations.dim(2) == heads && locations.dim(3) == levels && locations.dim(5) == 2,
          "input '", locations_name, "' must have shape [B, Q, H, L, P, 2] with B = ", batch, ", H = ", heads,
          " (from 'value' ", ShapeText{value.shape}, ") and L = ", levels, ", got ", ShapeText{locations.shape});
    points = locations.dim(4);
    samples = levels * points;  // fits: the locations hold twice as many elements
    expected_weights = {batch, queries, heads, levels, points};
  }
  Check(weights.shape == expected_weights, "input 'attention_weights' must have shape ", ShapeText{expected_weights},
        flattened ? " ([B, Q, H, sum(P_l)] of '" : " ([B, Q, H, L, P] of '", locations_name, "'), got ",
        ShapeText{weights.shape});
  const T* references = nullptr;
  if constexpr (kNode == Node::kFromOffsets) {
    const ConstTensor<T> reference_points = io.template Input<T>(kReferencesInput, 4);
    const Shape expected = {batch, queries, levels, 2};
    Check(reference_points.shape == expected,
          "input 'reference_points' must have shape [B, Q, L, 2] = ", ShapeText{expected},
          " (of 'sampling_offsets' and 'value_spatial_shapes'), got ", ShapeText{reference_points.shape});
    references = reference_points.data;
  }
  const int64_t channels = Product(heads, dim, "H * D of input 'value'");
  Product(Product(batch, queries, "the output size"), channels, "the output size");
  return {std::move(value),
          std::move(shapes),
          std::move(starts),
          std::move(locations),
          references,
          std::move(weights),
          batch,
          keys,
          heads,
          dim,
          levels,
          queries,
          &points_per_level,
          points,
          samples,
          channels};
}

// The levels into `table` (L entries, host memory), checked: non-negative sizes whose areas
// add up to S without overflow, and start indices equal to the running sums (so the
// kernels' reads stay inside `value`). `shapes` and `starts` are in host memory.
template <typename T, typename A>
void CheckLevels(const Inputs<T>& in, Level<A>* table) {
  int64_t total = 0;
  for (int64_t l = 0; l < in.levels; ++l) {
    const int64_t height = in.shapes.data[2 * l], width = in.shapes.data[2 * l + 1];
    Check(height >= 0 && width >= 0, "input 'value_spatial_shapes' must hold non-negative (H_l, W_l), got (", height,
          ", ", width, ") at level ", l);
    int64_t area = 0, next = 0;
    Check(!__builtin_mul_overflow(height, width, &area) && !__builtin_add_overflow(total, area, &next),
          "input 'value_spatial_shapes': the levels' sizes overflow int64 at level ", l, " (", height, ", ", width,
          ")");
    Check(in.starts.data[l] == total,
          "input 'value_level_start_index' must hold the running sums of H_l * W_l of 'value_spatial_shapes' "
          "(where each level starts in S): level ",
          l, " starts at ", total, ", got ", in.starts.data[l]);
    const int64_t points = in.points_per_level->counts.empty() ? in.points : in.points_per_level->counts[l];
    table[l] = {height, width, static_cast<A>(height), static_cast<A>(width), total, points};
    total = next;
  }
  Check(total == in.keys, "input 'value' ", ShapeText{in.value.shape}, " has S = ", in.keys,
        ", but the levels of 'value_spatial_shapes' hold ", total, " (the sum of H_l * W_l)");
}

}  // namespace ortops::ms_deform_attn
