// Multi-scale deformable attention's device path: one thread per four channels of an output
// row and head (or one channel, where the head's channels are not a multiple of four),
// summing each channel's samples over levels and points with the CPU kernel's sampling rule
// (math/bilinear.h) and in its order of operations, so that both return the same bits. A
// thread locates each sample once for its channels; consecutive threads read consecutive
// channels of the same pixels. Up to kInlineLevels levels travel with the kernel's
// arguments, so that a run copies nothing to the device.
#include <algorithm>
#include <vector>

#include "device/device_kernel.h"
#include "device/vector_load.h"
#include "math/bilinear.h"
#include "ops/ms_deform_attn/attention_inputs.h"
#include "ops/ms_deform_attn/ms_deform_attn.h"

namespace ortops::ms_deform_attn {
namespace {

// The levels, in the kernel's arguments (kInline: at most kInlineLevels of them, each read
// at an index known when compiled, so that they stay there) or in device memory.
template <typename A, bool kInline>
struct LevelTable {
  static constexpr int64_t kInlineLevels = 8;
  Level<A> inline_levels[kInline ? kInlineLevels : 1];
  const Level<A>* device_levels = nullptr;

  // body(level, l) for each of the `count` levels, in order.
  template <typename Body>
  ORTOPS_HD void ForEach(int64_t count, Body&& body) const {
    if constexpr (kInline) {
      ORTOPS_UNROLL
      for (int64_t l = 0; l < kInlineLevels; ++l) {
        if (l < count) body(inline_levels[l], l);
      }
    } else {
      for (int64_t l = 0; l < count; ++l) body(device_levels[l], l);
    }
  }
};

// output[kChannels i, + kChannels) of [B, Q, H * D]: channels d to d + kChannels - 1 of head h
// (D a multiple of kChannels).
template <typename T, int64_t kChannels, bool kInline>
struct SampleSum {
  using A = ComputeType<T>;
  const T* value;
  LevelTable<A, kInline> levels;
  const T* locations;   // or the FromOffsets node's offsets
  const T* references;  // the FromOffsets node's [B, Q, L, 2]; else null
  const T* weights;
  T* output;
  int64_t queries, keys, heads, dim, level_count;
  int64_t samples;  // points per query and head, level after level
  bool aligned;     // value is aligned for runs of kChannels (device::AlignedForRuns)

  ORTOPS_HD void operator()(int64_t i) const {
    const int64_t groups = dim / kChannels;
    const int64_t d = i % groups * kChannels, h = i / groups % heads, row = i / (groups * heads);
    const int64_t channels = heads * dim;
    // The head's channel d at the batch item's first pixel; pixels are `channels` apart.
    const T* head_values = value + (row / queries) * keys * channels + h * dim + d;
    const T* location = locations + (row * heads + h) * samples * 2;
    const T* weight = weights + (row * heads + h) * samples;
    A sum[kChannels];
    ORTOPS_UNROLL
    for (int64_t k = 0; k < kChannels; ++k) sum[k] = 0;
    levels.ForEach(level_count, [&](const Level<A>& level, int64_t l) {
      const T* level_values = head_values + level.start * channels;
      const T* reference = references == nullptr ? nullptr : references + (row * level_count + l) * 2;
      for (int64_t p = 0; p < level.points; ++p, location += 2, ++weight) {
        const ZeroPaddedSample<A> s =
            reference == nullptr ? SampleAt(level, location) : SampleAt(level, location, reference);
        if (!s.inside) continue;
        const auto attention = static_cast<A>(*weight);
        A w[4];
        int64_t at[4];
        ORTOPS_UNROLL
        for (int corner = 0; corner < 4; ++corner) {
          // A neighbour outside the map: weight 0 times a value 0, as the CPU kernel's.
          w[corner] = s.valid[corner] ? s.weight[corner] * attention : A(0);
          at[corner] = ((s.y0 + corner / 2) * level.width + s.x0 + corner % 2) * channels;
        }
        // Each corner's kChannels values in one load where they can be (device/vector_load.h).
        T c[4][kChannels];
        ORTOPS_UNROLL
        for (int corner = 0; corner < 4; ++corner) {
          if (s.valid[corner]) {
            device::LoadRun<kChannels>(level_values + at[corner], aligned, c[corner]);
          } else {
            ORTOPS_UNROLL
            for (int64_t k = 0; k < kChannels; ++k) c[corner][k] = T(0);
          }
        }
        ORTOPS_UNROLL
        for (int64_t k = 0; k < kChannels; ++k) {
          sum[k] += w[0] * static_cast<A>(c[0][k]) + w[1] * static_cast<A>(c[1][k]) + w[2] * static_cast<A>(c[2][k]) +
                    w[3] * static_cast<A>(c[3][k]);
        }
      }
    });
    ORTOPS_UNROLL
    for (int64_t k = 0; k < kChannels; ++k) output[row * channels + h * dim + d + k] = static_cast<T>(sum[k]);
  }
};

template <typename T, Node kNode>
struct MsDeformAttnDeviceKernel
    : OpKernel<T, kSchemaOf<kNode>, ParsedWith<PointsPerLevel, kNode>, device::DeviceKernelBase> {
  // im2col_step (mmdeploy) is ignored; the adapter has checked its type.
  using OpKernel<T, kSchemaOf<kNode>, ParsedWith<PointsPerLevel, kNode>, device::DeviceKernelBase>::OpKernel;
  using A = ComputeType<T>;

  // The level shapes and start indices are read on the host, where they are checked (ONNX
  // Runtime copies them there when they live on the GPU: a few int64 per level).
  static OrtMemType InputMemoryType(size_t index) {
    return index == 1 || index == 2 ? OrtMemTypeCPUInput : OrtMemTypeDefault;
  }

  void Compute(const device::DeviceIO& io, const PointsPerLevel& points_per_level) const {
    const Inputs<T> in = CheckedInputs<T, kNode>(io, points_per_level);
    std::vector<Level<A>> table(static_cast<size_t>(in.levels));
    CheckLevels(in, table.data());

    T* output = io.Output<T>(0, {in.batch, in.queries, in.channels});
    const int64_t rows = in.batch * in.queries;
    if (rows == 0 || in.channels == 0) return;
    if (in.levels == 0 || in.samples == 0) {
      io.Fill(output, 0, static_cast<size_t>(rows * in.channels) * sizeof(T));  // zeros of every T are all-zero bits
      return;
    }
    if (in.levels <= LevelTable<A, true>::kInlineLevels) {
      LevelTable<A, true> levels{};
      std::copy(table.begin(), table.end(), levels.inline_levels);
      Run(io, in, levels, output);
    } else {
      const Scratch<Level<A>> device_levels = io.Allocate<Level<A>>(table.size());
      io.CopyToDevice(device_levels.data(), table.data(), table.size());
      Run(io, in, LevelTable<A, false>{{}, device_levels.data()}, output);
    }
  }

  template <bool kInline>
  static void Run(const device::DeviceIO& io, const Inputs<T>& in, const LevelTable<A, kInline>& levels, T* output) {
    const int64_t outputs = in.batch * in.queries * in.channels;
    if (in.dim % 4 == 0) {
      io.ForEach(outputs / 4,
                 SampleSum<T, 4, kInline>{in.value.data, levels, in.locations.data, in.references, in.weights.data,
                                          output, in.queries, in.keys, in.heads, in.dim, in.levels, in.samples,
                                          device::AlignedForRuns<4>(in.value.data)});
    } else {
      io.ForEach(outputs,
                 SampleSum<T, 1, kInline>{in.value.data, levels, in.locations.data, in.references, in.weights.data,
                                          output, in.queries, in.keys, in.heads, in.dim, in.levels, in.samples, false});
    }
  }
};

// Names unlike the CPU kernel's aliases: see deform_conv.cu.

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) {
  return MakeOps<MsDeformAttnDeviceKernel, Node::kLocations, float, double, Half>(def);
}
std::vector<OpPtr> MakeFromOffsetsDevice(const OpDef& def) {
  return MakeOps<MsDeformAttnDeviceKernel, Node::kFromOffsets, float, double, Half>(def);
}
std::vector<OpPtr> MakeMmdeployDevice(const OpDef& def) {
  return MakeOps<MsDeformAttnDeviceKernel, Node::kMmdeploy, float, double, Half>(def);
}

}  // namespace ortops::ms_deform_attn
