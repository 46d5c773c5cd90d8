// RoIAlign over [N, C, H, W] features and [R, 5] rois, Detectron style (mmcv's MMCVRoiAlign).
#include "ops/roi_align/roi_align.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/upcast.h"
#include "math/bilinear.h"
#include "ops/roi_align/roi_pooling.h"

namespace ortops::roi_align {
namespace {

constexpr IoSpec kInputs[] = {
    {"input", ElemType::kTypeParam, "`[N, C, H, W]` feature maps"},
    {"rois", ElemType::kTypeParam, "`[R, 5]` rois as (batch_index, x1, y1, x2, y2) in input-image coordinates"},
};
constexpr IoSpec kOutputs[] = {
    {"output", ElemType::kTypeParam, "`[R, C, output_height, output_width]` pooled features"},
};
constexpr AttrSpec kAttributes[] = {
    {"output_height", AttrType::kInt, "1", "height of each pooled output"},
    {"output_width", AttrType::kInt, "1", "width of each pooled output"},
    {"spatial_scale", AttrType::kFloat, "1.0", "multiplies roi coordinates to give feature-map coordinates"},
    {"sampling_ratio", AttrType::kInt, "0",
     "samples per bin along each axis; 0 or less: adaptive, ceil(roi size / output size)"},
    {"mode", AttrType::kString, "avg", "`avg` (mean of the samples) or `max` (largest sample)"},
    {"aligned", AttrType::kInt, "1",
     "1: shift the scaled roi by -0.5 pixel (true alignment); 0: legacy, no shift and roi sides of at least 1"},
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
};

namespace {

// Elements of T are read as A = ComputeType<T> and all arithmetic is in A, so a float16
// kernel computes what the float32 kernel does on the same values, then rounds once on store.
template <typename T>
class RoiAlignKernel : public KernelBase {
 public:
  using Element = T;
  using A = ComputeType<T>;
  static constexpr const OpSchema& kSchema = roi_align::kSchema;

  RoiAlignKernel(const Attributes& attrs, const OpDef& def) : KernelBase(def), pooling_(attrs) {
    const std::string mode = attrs.String("mode");
    Check(mode == "avg" || mode == "max", "attribute 'mode' must be \"avg\" or \"max\", got \"", mode, "\"");
    max_mode_ = mode == "max";
    // mmcv's kernel started its running max at -10000; ortops' own op starts at -infinity.
    max_start_ = def.compat ? A(-10000) : -std::numeric_limits<A>::infinity();
    empty_bin_max_ = def.compat ? A(-10000) : A(0);
  }

  void Compute(const KernelIO& io) const {
    const ConstTensor<T> input = io.Input<T>(0, 4);
    const ConstTensor<T> roi_input = io.Input<T>(1, 2);
    Scratch<A> roi_storage;
    const ConstTensor<A> rois{Upcast(io, roi_input, roi_storage), roi_input.shape};
    roi_pooling::CheckRois(rois, 5, "(batch_index, x1, y1, x2, y2)", input.shape);
    const int64_t channels = input.dim(1), height = input.dim(2), width = input.dim(3);
    const int64_t roi_count = rois.dim(0);

    const int64_t bins = pooling_.bins();
    T* output = io.Output<T>(0, {roi_count, channels, pooling_.output_height, pooling_.output_width});
    if (roi_count == 0 || channels == 0) return;
    const int64_t plane = height * width;
    const bool channels_last =
        plane > 0 && roi_pooling::ChannelsLastPays(roi_count, bins, pooling_.sampling_ratio, channels, input.shape);
    const Scratch<A> nhwc = channels_last ? roi_pooling::ToChannelsLast<A>(io, input) : Scratch<A>();
    io.ParallelForRanges(static_cast<size_t>(roi_count), 256, [&](size_t begin, size_t end) {
      ScratchVector<BilinearTap<A>> taps(io.Allocator<BilinearTap<A>>());
      ScratchVector<A> value = io.Vector<A>(channels_last ? static_cast<size_t>(channels) : 0);
      ScratchVector<A> acc = io.Vector<A>(value.size());
      for (auto r = static_cast<int64_t>(begin); r < static_cast<int64_t>(end); ++r) {
        const A* roi = rois.data + 5 * r;
        const Geometry g = RoiGeometry(roi);
        taps.resize(static_cast<size_t>(bins * g.grid_h * g.grid_w));
        size_t t = 0;
        for (int64_t ph = 0; ph < pooling_.output_height; ++ph) {
          for (int64_t pw = 0; pw < pooling_.output_width; ++pw) {
            for (int64_t iy = 0; iy < g.grid_h; ++iy) {
              const A y = g.start_h + static_cast<A>(ph) * g.bin_h +
                          static_cast<A>(static_cast<A>(iy) + A(0.5)) * g.bin_h / static_cast<A>(g.grid_h);
              for (int64_t ix = 0; ix < g.grid_w; ++ix) {
                const A x = g.start_w + static_cast<A>(pw) * g.bin_w +
                            static_cast<A>(static_cast<A>(ix) + A(0.5)) * g.bin_w / static_cast<A>(g.grid_w);
                taps[t++] = RoiAlignTap(y, x, height, width);
              }
            }
          }
        }
        const int64_t per_bin = g.grid_h * g.grid_w;
        const auto image = static_cast<int64_t>(roi[0]);
        T* out = output + r * channels * bins;
        if (channels_last) {
          const A* source = nhwc.data() + image * plane * channels;
          if (max_mode_) {
            roi_pooling::PoolChannelsLast<A, true>(source, channels, taps.data(), bins, per_bin, max_start_,
                                                   empty_bin_max_, out, value.data(), acc.data());
          } else {
            roi_pooling::PoolChannelsLast<A, false>(source, channels, taps.data(), bins, per_bin, A(0), A(0), out,
                                                    value.data(), acc.data());
          }
          continue;
        }
        for (int64_t c = 0; c < channels; ++c) {
          const T* map = plane == 0 ? nullptr : input.data + (image * channels + c) * plane;
          if (!max_mode_) {
            roi_pooling::AveragePool(map, taps.data(), bins, per_bin, out + c * bins);
            continue;
          }
          const BilinearTap<A>* tap = taps.data();
          for (int64_t bin = 0; bin < bins; ++bin) {
            A best = max_start_;
            for (int64_t s = 0; s < per_bin; ++s, ++tap) {
              const A v = map ? tap->Read(map) : A(0);
              if (v > best) best = v;
            }
            out[c * bins + bin] = static_cast<T>(per_bin == 0 ? empty_bin_max_ : best);
          }
        }
      }
    });
  }

 private:
  struct Geometry {
    A start_h, start_w, bin_h, bin_w;
    int64_t grid_h, grid_w;
  };

  Geometry RoiGeometry(const A* roi) const {
    const A scale = static_cast<A>(pooling_.spatial_scale);
    const A shift = pooling_.aligned ? A(0.5) : A(0);
    Geometry g;
    g.start_w = roi[1] * scale - shift;
    g.start_h = roi[2] * scale - shift;
    A roi_width = roi[3] * scale - shift - g.start_w;
    A roi_height = roi[4] * scale - shift - g.start_h;
    if (!pooling_.aligned) {
      roi_width = std::max(roi_width, A(1));
      roi_height = std::max(roi_height, A(1));
    }
    g.bin_h = roi_height / static_cast<A>(pooling_.output_height);
    g.bin_w = roi_width / static_cast<A>(pooling_.output_width);
    g.grid_h = roi_pooling::GridSize(pooling_.sampling_ratio, roi_height, pooling_.output_height);
    g.grid_w = roi_pooling::GridSize(pooling_.sampling_ratio, roi_width, pooling_.output_width);
    roi_pooling::CheckTapCount(g.grid_h, g.grid_w, pooling_.bins());
    return g;
  }

  roi_pooling::PoolingAttributes pooling_;
  bool max_mode_ = false;
  A max_start_, empty_bin_max_;
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<RoiAlignKernel, float, double, Half>(def); }

}  // namespace ortops::roi_align
