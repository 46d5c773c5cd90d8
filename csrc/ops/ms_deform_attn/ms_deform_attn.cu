// Multi-scale deformable attention's device path: one thread per output element (batch,
// query, head, channel), summing its samples over levels and points with the CPU kernel's
// sampling rule (math/bilinear.h) and in its order of operations, so that both return the
// same bits. Consecutive threads read consecutive channels of the same pixels.
#include <vector>

#include "device/device_kernel.h"
#include "math/bilinear.h"
#include "ops/ms_deform_attn/attention_inputs.h"
#include "ops/ms_deform_attn/ms_deform_attn.h"

namespace ortops::ms_deform_attn {
namespace {

// output[i] of [B, Q, H * D].
template <typename T>
struct SampleSum {
  using A = ComputeType<T>;
  const T* value;
  const Level<A>* levels;
  const T* locations;
  const T* weights;
  T* output;
  int64_t queries, keys, heads, dim, level_count, points;

  ORTOPS_HD void operator()(int64_t i) const {
    const int64_t d = i % dim, h = i / dim % heads, row = i / (dim * heads);
    const int64_t channels = heads * dim, samples = level_count * points;
    // The head's channel d at the batch item's first pixel; pixels are `channels` apart.
    const T* head_values = value + (row / queries) * keys * channels + h * dim + d;
    const T* location = locations + (row * heads + h) * samples * 2;
    const T* weight = weights + (row * heads + h) * samples;
    A sum = 0;
    for (int64_t l = 0; l < level_count; ++l) {
      const Level<A> level = levels[l];
      const T* level_values = head_values + level.start * channels;
      for (int64_t p = 0; p < points; ++p, location += 2, ++weight) {
        const ZeroPaddedSample<A> s = SampleAt(level, location);
        if (!s.inside) continue;
        const auto attention = static_cast<A>(*weight);
        A w[4], c[4];
        for (int k = 0; k < 4; ++k) {
          // A neighbour outside the map: weight 0 times a value 0, as the CPU kernel's.
          w[k] = s.valid[k] ? s.weight[k] * attention : A(0);
          c[k] = s.valid[k] ? static_cast<A>(level_values[((s.y0 + k / 2) * level.width + s.x0 + k % 2) * channels])
                            : A(0);
        }
        sum += w[0] * c[0] + w[1] * c[1] + w[2] * c[2] + w[3] * c[3];
      }
    }
    output[i] = static_cast<T>(sum);
  }
};

template <typename T, bool kMmdeploy>
struct MsDeformAttnDeviceKernel : OpKernel<T, kSchemaOf<kMmdeploy>, NoAttributes, device::DeviceKernelBase> {
  // im2col_step (mmdeploy) is ignored; the adapter has checked its type.
  using OpKernel<T, kSchemaOf<kMmdeploy>, NoAttributes, device::DeviceKernelBase>::OpKernel;
  using A = ComputeType<T>;

  // The level shapes and start indices are read on the host, where they are checked (ONNX
  // Runtime copies them there when they live on the GPU: a few int64 per level).
  static OrtMemType InputMemoryType(size_t index) {
    return index == 1 || index == 2 ? OrtMemTypeCPUInput : OrtMemTypeDefault;
  }

  void Compute(const device::DeviceIO& io) const {
    const Inputs<T> in = CheckedInputs<T>(io);
    std::vector<Level<A>> table(static_cast<size_t>(in.levels));
    CheckLevels(in, table.data());

    T* output = io.Output<T>(0, {in.batch, in.queries, in.channels});
    const int64_t rows = in.batch * in.queries;
    if (rows == 0 || in.channels == 0) return;
    if (in.levels == 0 || in.points == 0) {
      io.Fill(output, 0, static_cast<size_t>(rows * in.channels) * sizeof(T));  // zeros of every T are all-zero bits
      return;
    }
    const Scratch<Level<A>> levels = io.Allocate<Level<A>>(table.size());
    io.CopyToDevice(levels.data(), table.data(), table.size());
    io.ForEach(rows * in.channels, SampleSum<T>{in.value.data, levels.data(), in.locations.data, in.weights.data,
                                                output, in.queries, in.keys, in.heads, in.dim, in.levels, in.points});
  }
};

// Names unlike the CPU kernel's aliases: see deform_conv.cu.

}  // namespace

std::vector<OpPtr> MakeDevice(const OpDef& def) {
  return MakeOps<MsDeformAttnDeviceKernel, false, float, double, Half>(def);
}
std::vector<OpPtr> MakeMmdeployDevice(const OpDef& def) {
  return MakeOps<MsDeformAttnDeviceKernel, true, float, double, Half>(def);
}

}  // namespace ortops::ms_deform_attn
