// Deformable convolution's device path: the sampled columns of a block of images or
// positions, one thread per column element, with the CPU kernel's sampling rule and order of
// operations (math/bilinear.h: the same column values, to the bit), then each convolution
// group's product with its weights on the device's matrix product (device/gemm.h: cuBLAS on
// a GPU). Images, or runs of an image's positions, go through in blocks whose scratch stays
// near kBlockBytes, whatever the image size.
#include <algorithm>
#include <type_traits>

#include "device/device_kernel.h"
#include "device/gemm.h"
#include "math/bilinear.h"
#include "ops/deform_conv/conv_inputs.h"
#include "ops/deform_conv/deform_conv.h"

namespace ortops::deform_conv {
namespace {

// Scratch per block: the columns, and the product where it is rounded to float16 on store
// (counted for every element type, so that float16 and float32 run the same blocks, and so
// the same products). Large, so that a GPU's products are few and wide: two 256-channel
// 64x64 images with a 3x3 kernel are one block.
constexpr int64_t kBlockBytes = int64_t{128} << 20;
constexpr int64_t kMinBlock = 64;     // positions, however many channels
constexpr int64_t kBlockAlign = 128;  // positions of a partial image: whole multiples

// The columns of images [first_item, first_item + items) and positions [first_position,
// first_position + block_width): per image, C * kh * kw rows (channel, then tap, as the
// weights are stored) of block_width positions. Thread i makes the kh * kw column elements of
// one channel and position (i = (item C + c) block_width + position in the block), so that
// the index arithmetic is done once for all taps and neighbouring threads read neighbouring
// offsets and write neighbouring columns. Each value is torchvision's mask * (w0 v0 + w1 v1 +
// w2 v2 + w3 v3) as the CPU kernel computes it, a neighbour outside the map reading weight 0
// times value 0.
template <typename T>
struct ColumnElements {
  using A = ComputeType<T>;
  const T* input;   // [N, C, H, W]
  const T* offset;  // [N, deform_groups, 2 * taps, positions]
  const T* mask;    // [N, deform_groups, taps, positions], or null
  A* columns;
  int64_t first_item, first_position, block_width;
  int64_t channels, height, width, out_w, positions, kernel_h, kernel_w, deform_groups, per_deform_group;
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;

  ORTOPS_HD void operator()(int64_t i) const {
    const int64_t taps = kernel_h * kernel_w, column = i % block_width;
    const int64_t c = i / block_width % channels, item = i / (block_width * channels);
    const int64_t n = first_item + item, p = first_position + column, d = c / per_deform_group;
    const int64_t oy = p / out_w, ox = p % out_w;
    const T* plane = input + (n * channels + c) * height * width;
    A* out = columns + (item * channels + c) * taps * block_width + column;
    int64_t line = (n * deform_groups + d) * taps;
    for (int64_t ky = 0; ky < kernel_h; ++ky) {
      for (int64_t kx = 0; kx < kernel_w; ++kx, ++line, out += block_width) {
        // As torchvision: the integer base position, converted, plus the offset.
        const A y =
            static_cast<A>(oy * stride_h - pad_h + ky * dilation_h) + static_cast<A>(offset[2 * line * positions + p]);
        const A x = static_cast<A>(ox * stride_w - pad_w + kx * dilation_w) +
                    static_cast<A>(offset[(2 * line + 1) * positions + p]);
        const A m = mask ? static_cast<A>(mask[line * positions + p]) : A(1);
        const ZeroPaddedSample<A> s = ZeroPaddedBilinear(y, x, height, width);
        A w[4] = {0, 0, 0, 0}, v[4] = {0, 0, 0, 0};
        if (s.inside) {
          for (int corner = 0; corner < 4; ++corner) {
            if (!s.valid[corner]) continue;
            w[corner] = s.weight[corner];
            v[corner] = static_cast<A>(plane[(s.y0 + corner / 2) * width + s.x0 + corner % 2]);
          }
        }
        *out = m * (w[0] * v[0] + w[1] * v[1] + w[2] * v[2] + w[3] * v[3]);
      }
    }
  }
};

// output element i of a block: the product (or, where product is null, the output itself,
// which the product was written to) plus the bias, stored as T.
template <typename T>
struct StoreOutput {
  using A = ComputeType<T>;
  const A* product;  // [items, C_out, block_width], or null
  const T* bias;     // [C_out], or null
  T* output;
  int64_t first_item, first_position, block_width, out_channels, positions;

  ORTOPS_HD void operator()(int64_t i) const {
    const int64_t o = i / block_width % out_channels, item = i / (block_width * out_channels);
    T* out = output + ((first_item + item) * out_channels + o) * positions + first_position + i % block_width;
    const A value = product ? product[i] : static_cast<A>(*out);
    *out = static_cast<T>(bias ? value + static_cast<A>(bias[o]) : value);
  }
};

// No input channels: each output plane is its bias (or 0).
template <typename T>
struct FillWithBias {
  const T* bias;
  T* output;
  int64_t out_channels, positions;
  ORTOPS_HD void operator()(int64_t i) const { output[i] = bias ? bias[i / positions % out_channels] : T(0); }
};

template <typename T>
struct Widen {
  const T* from;
  ComputeType<T>* to;
  ORTOPS_HD void operator()(int64_t i) const { to[i] = static_cast<ComputeType<T>>(from[i]); }
};

template <typename T, Layout kLayout>
class DeformConvDeviceKernel
    : public OpKernel<T, SchemaOf(kLayout), ParsedWith<ConvAttributes, kLayout>, device::DeviceKernelBase> {
 public:
  using OpKernel<T, SchemaOf(kLayout), ParsedWith<ConvAttributes, kLayout>, device::DeviceKernelBase>::OpKernel;
  using A = ComputeType<T>;

  void Compute(const device::DeviceIO& io, const ConvAttributes& conv) const {
    const auto [input, offset, weight, g, mask, bias] = ReadConvInputs<kLayout, T>(io, conv);
    const int64_t taps = g.kernel_h * g.kernel_w, positions = g.out_h * g.out_w;
    T* output = io.Output<T>(0, {g.batch, g.out_channels, g.out_h, g.out_w});
    if (g.batch * g.out_channels * positions == 0) return;

    const int64_t group_channels = g.channels / conv.groups, group_out = g.out_channels / conv.groups;
    const int64_t depth = group_channels * taps;  // the product's K
    if (depth == 0) {
      io.ForEach(g.batch * g.out_channels * positions, FillWithBias<T>{bias, output, g.out_channels, positions});
      return;
    }
    // The weights as the product reads them: [C_out, C / groups * taps] in A, as stored.
    constexpr bool kDirect = std::is_same_v<T, A>;
    const Scratch<A> widened = io.Allocate<A>(kDirect ? 0 : static_cast<size_t>(g.out_channels * depth));
    const A* weights = nullptr;
    if constexpr (kDirect) {
      weights = weight.data;
    } else {
      io.ForEach(g.out_channels * depth, Widen<T>{weight.data, widened.data()});
      weights = widened.data();
    }

    // Blocks: whole images, as many as fit, or else runs of one image's positions.
    const int64_t rows = g.channels * taps;  // column rows of every group
    const int64_t per_position = (rows + g.out_channels) * static_cast<int64_t>(sizeof(A));
    int64_t items = 1, block = positions;
    if (positions <= kBlockBytes / per_position) {
      items = std::min(g.batch, kBlockBytes / per_position / positions);
    } else {
      const int64_t widest = std::max(kMinBlock, kBlockBytes / per_position);
      block = widest >= kBlockAlign ? widest / kBlockAlign * kBlockAlign : widest;
    }
    const Scratch<A> columns = io.Allocate<A>(static_cast<size_t>(items * rows * block));
    const Scratch<A> product = io.Allocate<A>(kDirect ? 0 : static_cast<size_t>(items * g.out_channels * block));

    for (int64_t first_item = 0; first_item < g.batch; first_item += items) {
      const int64_t count = std::min(items, g.batch - first_item);
      for (int64_t first_position = 0; first_position < positions; first_position += block) {
        const int64_t width = std::min(block, positions - first_position);
        io.ForEach(count * g.channels * width, ColumnElements<T>{.input = input.data,
                                                                 .offset = offset.data,
                                                                 .mask = mask,
                                                                 .columns = columns.data(),
                                                                 .first_item = first_item,
                                                                 .first_position = first_position,
                                                                 .block_width = width,
                                                                 .channels = g.channels,
                                                                 .height = g.height,
                                                                 .width = g.width,
                                                                 .out_w = g.out_w,
                                                                 .positions = positions,
                                                                 .kernel_h = g.kernel_h,
                                                                 .kernel_w = g.kernel_w,
                                                                 .deform_groups = conv.deform_groups,
                                                                 .per_deform_group = g.channels / conv.deform_groups,
                                                                 .stride_h = conv.stride[0],
                                                                 .stride_w = conv.stride[1],
                                                                 .pad_h = conv.padding[0],
                                                                 .pad_w = conv.padding[1],
                                                                 .dilation_h = conv.dilation[0],
                                                                 .dilation_w = conv.dilation[1]});
        // Group by group, one product per image of the block: straight into the output,
        // unless it holds float16.
        A* target = nullptr;
        int64_t target_ld = width, target_stride = g.out_channels * width;
        if constexpr (kDirect) {
          target = output + first_item * g.out_channels * positions + first_position;
          target_ld = positions;
          target_stride = g.out_channels * positions;
        } else {
          target = product.data();
        }
        for (int64_t group = 0; group < conv.groups; ++group) {
          device::Gemm(io, device::MatrixProduct<A>{.m = group_out,
                                                    .n = width,
                                                    .k = depth,
                                                    .a = weights + group * group_out * depth,
                                                    .lda = depth,
                                                    .stride_a = 0,
                                                    .b = columns.data() + group * depth * width,
                                                    .ldb = width,
                                                    .stride_b = rows * width,
                                                    .c = target + group * group_out * target_ld,
                                                    .ldc = target_ld,
                                                    .stride_c = target_stride,
                                                    .batch = count});
        }
        if (!kDirect || bias != nullptr) {
          io.ForEach(count * g.out_channels * width,
                     StoreOutput<T>{kDirect ? nullptr : product.data(), bias, output, first_item, first_position, width,
                                    g.out_channels, positions});
        }
      }
    }
  }
};

}  // namespace

// The element types of the CPU kernels (deform_conv.cc says why the compat ops are float32 only).
std::vector<OpPtr> MakeModulatedDevice(const OpDef& def) {
  return MakeOps<DeformConvDeviceKernel, Layout::kModulated, float>(def);
}
std::vector<OpPtr> MakeV1Device(const OpDef& def) { return MakeOps<DeformConvDeviceKernel, Layout::kV1, float>(def); }
std::vector<OpPtr> MakeDevice(const OpDef& def) {
  return MakeOps<DeformConvDeviceKernel, Layout::kOrtops, float, double, Half>(def);
}
std::vector<OpPtr> MakeMmdeployV1Device(const OpDef& def) {
  return MakeOps<DeformConvDeviceKernel, Layout::kMmdeployV1, float, double, Half>(def);
}

}  // namespace ortops::deform_conv
