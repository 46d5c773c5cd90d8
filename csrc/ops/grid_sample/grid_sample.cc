// 2-D grid sampling with PyTorch's arithmetic (torch.nn.functional.grid_sample), as mmcv's
// and mmdeploy's grid_sampler.
#include "ops/grid_sample/grid_sample.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/upcast.h"
#include "math/cubic.h"

namespace ortops::grid_sample {
namespace {

constexpr IoSpec kInputs[] = {
    {"input", ElemType::kTypeParam, "`[N, C, H_in, W_in]` feature maps"},
    {"grid", ElemType::kTypeParam, "`[N, H_out, W_out, 2]` sampling points (x, y), -1 and 1 being the map's edges"},
};
constexpr IoSpec kOutputs[] = {
    {"output", ElemType::kTypeParam, "`[N, C, H_out, W_out]` sampled values"},
};
constexpr AttrSpec kAttributes[] = {
    {"interpolation_mode", AttrType::kInt, "0", "0 bilinear, 1 nearest, 2 bicubic"},
    {"padding_mode", AttrType::kInt, "0", "0 zeros, 1 border, 2 reflection"},
    {"align_corners", AttrType::kInt, "0",
     "1: -1 and 1 are the centres of the corner pixels; 0: they are the outer edges of the corner pixels"},
};

}  // namespace

constexpr OpSchema kSchema{
    .doc =
        "Samples `input` at the points of `grid`, with the arithmetic of "
        "`torch.nn.functional.grid_sample` (2-D): coordinates are unnormalized with or without "
        "`align_corners`; padding `zeros` reads 0 outside, `border` clamps to the edge, `reflection` "
        "mirrors at the edges; `nearest` rounds half to even; `bicubic` uses A = -0.75 and pads each of "
        "its 16 taps. A grid point with a NaN coordinate gives NaN; an infinite one reads as outside "
        "(zeros), the edge (border) or NaN (reflection, as its mirror position is undefined).",
    .inputs = kInputs,
    .outputs = kOutputs,
    .attributes = kAttributes,
};

namespace {

enum class Interpolation { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum class Padding { kZeros = 0, kBorder = 1, kReflection = 2 };

// Farther than this from the map, a coordinate is outside whatever the map's size; keeps
// float-to-integer conversions defined for huge finite coordinates.
constexpr double kFarOutside = 1e15;

template <typename T>
struct Axis {
  int64_t size;
  bool align_corners;
  Padding padding;

  T Unnormalize(T coord) const {
    const T n = static_cast<T>(size);
    return align_corners ? ((coord + 1) / 2) * (n - 1) : ((coord + 1) * n - 1) / 2;
  }
  T Clip(T coord) const { return std::min(static_cast<T>(size - 1), std::max(coord, T(0))); }
  // Mirrors coord into [twice_low / 2, twice_high / 2].
  static T Reflect(T coord, int64_t twice_low, int64_t twice_high) {
    if (twice_low == twice_high) return T(0);
    const T low = static_cast<T>(twice_low) / 2, span = static_cast<T>(twice_high - twice_low) / 2;
    coord = std::abs(coord - low);
    const T extra = std::fmod(coord, span);
    const auto flips = static_cast<int64_t>(std::floor(coord / span));
    return flips % 2 == 0 ? extra + low : span - extra + low;
  }
  // PyTorch's compute_coordinates: padding applied to an unnormalized coordinate.
  T Pad(T coord) const {
    if (padding == Padding::kBorder) return Clip(coord);
    if (padding == Padding::kReflection) {
      if (!std::isfinite(coord)) return std::numeric_limits<T>::quiet_NaN();
      coord = align_corners ? Reflect(coord, 0, 2 * (size - 1)) : Reflect(coord, -1, 2 * size - 1);
      return Clip(coord);
    }
    return coord;
  }
  bool Inside(int64_t i) const { return i >= 0 && i < size; }
};

// Where one output point reads, computed once and used for every channel.
template <typename T>
struct PointTaps {
  bool nan = false;  // the point's value is NaN
  int count = 0;     // bilinear / nearest: the valid taps, in PyTorch's summation order
  int64_t offset[4];
  T weight[4];
  // Bicubic: 4 x 4 taps read rows y[i], columns x[j]; -1 marks a tap that reads 0.
  int64_t row[4], column[4];
  T wy[4], wx[4];
};

// Bilinear and nearest points, compacted for the channel loop: up to four taps that are
// inside the map, in PyTorch's summation order; count -1 marks a NaN point.
template <typename T>
struct CompactTaps {
  int32_t offset[4];
  T weight[4];
  int32_t count;
};

// Elements of T are read as A = ComputeType<T> (float16 input converted once, up front) and
// all arithmetic is in A, so a float16 kernel computes what the float32 kernel does on the
// same values, then rounds once on store.
template <typename T>
class GridSampleKernel : public KernelBase {
 public:
  using Element = T;
  using A = ComputeType<T>;
  static constexpr const OpSchema& kSchema = grid_sample::kSchema;

  GridSampleKernel(const Attributes& attrs, const OpDef& def)
      : KernelBase(def),
        mode_(attrs.Int("interpolation_mode")),
        padding_(attrs.Int("padding_mode")),
        align_corners_(attrs.Int("align_corners")) {
    Check(mode_ >= 0 && mode_ <= 2,
          "attribute 'interpolation_mode' must be 0 (bilinear), 1 (nearest) or 2 (bicubic), got ", mode_);
    Check(padding_ >= 0 && padding_ <= 2,
          "attribute 'padding_mode' must be 0 (zeros), 1 (border) or 2 (reflection), got ", padding_);
    Check(align_corners_ == 0 || align_corners_ == 1, "attribute 'align_corners' must be 0 or 1, got ", align_corners_);
  }

  void Compute(const KernelIO& io) const {
    const ConstTensor<T> input = io.Input<T>(0, 4);
    const ConstTensor<T> grid = io.Input<T>(1, 4);
    const int64_t batch = input.dim(0), channels = input.dim(1), height = input.dim(2), width = input.dim(3);
    Check(grid.dim(0) == batch && grid.dim(3) == 2,
          "input 'grid' must have shape [N, H_out, W_out, 2] with N = ", batch, ", got ", ShapeText{grid.shape});
    const int64_t out_h = grid.dim(1), out_w = grid.dim(2);
    T* output = io.Output<T>(0, {batch, channels, out_h, out_w});
    if (batch * channels * out_h * out_w == 0) return;
    Check(height > 0 && width > 0, "input 'input' has an empty map (shape ", ShapeText{input.shape},
          ") to sample from");
    const Axis<A> x_axis{width, align_corners_ == 1, static_cast<Padding>(padding_)};
    const Axis<A> y_axis{height, align_corners_ == 1, static_cast<Padding>(padding_)};
    const int64_t plane = height * width, out_plane = out_h * out_w;
    Check(plane < (int64_t{1} << 31), "input 'input' has planes of ", height, " x ", width,
          " elements, more than this op supports (2^31)");
    // The taps of a chunk of output points are computed once, then each channel reads its
    // whole plane through them: one plane at a time stays in cache for the random reads.
    Scratch<A> converted;
    const A* values = Upcast(io, input, converted);
    const bool bicubic = static_cast<Interpolation>(mode_) == Interpolation::kBicubic;
    const int64_t chunk = std::min<int64_t>(out_plane, bicubic ? (1 << 16) : (1 << 20));
    const Scratch<PointTaps<A>> wide = io.Allocate<PointTaps<A>>(bicubic ? static_cast<size_t>(chunk) : 0);
    const Scratch<CompactTaps<A>> compact = io.Allocate<CompactTaps<A>>(bicubic ? 0 : static_cast<size_t>(chunk));
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t start = 0; start < out_plane; start += chunk) {
        const int64_t count = std::min(chunk, out_plane - start);
        const T* points = grid.data + (n * out_plane + start) * 2;
        io.ParallelForRanges(static_cast<size_t>(count), 64, [&](size_t begin, size_t end) {
          for (size_t i = begin; i < end; ++i) {
            const PointTaps<A> taps =
                Locate(static_cast<A>(points[2 * i]), static_cast<A>(points[2 * i + 1]), x_axis, y_axis);
            if (bicubic) {
              wide[i] = taps;
            } else {
              compact[i].count = taps.nan ? -1 : taps.count;
              for (int k = 0; k < taps.count; ++k) {
                compact[i].offset[k] = static_cast<int32_t>(taps.offset[k]);
                compact[i].weight[k] = taps.weight[k];
              }
            }
          }
        });
        io.ParallelFor(static_cast<size_t>(channels), [&](size_t c) {
          const A* map = values + (n * channels + static_cast<int64_t>(c)) * plane;
          T* out = output + (n * channels + static_cast<int64_t>(c)) * out_plane + start;
          if (bicubic) {
            for (int64_t i = 0; i < count; ++i) out[i] = static_cast<T>(Read(wide[i], map, width));
          } else {
            for (int64_t i = 0; i < count; ++i) out[i] = static_cast<T>(ReadCompact(compact[i], map));
          }
        });
      }
    }
  }

 private:
  PointTaps<A> Locate(A gx, A gy, const Axis<A>& x_axis, const Axis<A>& y_axis) const {
    PointTaps<A> p;
    if (std::isnan(gx) || std::isnan(gy)) {
      p.nan = true;
      return p;
    }
    const auto mode = static_cast<Interpolation>(mode_);
    if (mode == Interpolation::kBicubic) {
      LocateBicubic(x_axis.Unnormalize(gx), y_axis.Unnormalize(gy), x_axis, y_axis, p);
      return p;
    }
    const A x = x_axis.Pad(x_axis.Unnormalize(gx)), y = y_axis.Pad(y_axis.Unnormalize(gy));
    if (std::isnan(x) || std::isnan(y)) {
      p.nan = true;
      return p;
    }
    if (!(std::abs(x) < kFarOutside && std::abs(y) < kFarOutside)) return p;  // far outside: reads 0
    if (mode == Interpolation::kNearest) {
      const auto ix = static_cast<int64_t>(std::nearbyint(x)), iy = static_cast<int64_t>(std::nearbyint(y));
      if (x_axis.Inside(ix) && y_axis.Inside(iy)) Add(p, iy * x_axis.size + ix, A(1));
      return p;
    }
    const A x0 = std::floor(x), y0 = std::floor(y);
    const auto ix = static_cast<int64_t>(x0), iy = static_cast<int64_t>(y0);
    const A east = x - x0, west = (x0 + 1) - x, south = y - y0, north = (y0 + 1) - y;
    const int64_t w = x_axis.size;
    if (x_axis.Inside(ix) && y_axis.Inside(iy)) Add(p, iy * w + ix, west * north);
    if (x_axis.Inside(ix + 1) && y_axis.Inside(iy)) Add(p, iy * w + ix + 1, east * north);
    if (x_axis.Inside(ix) && y_axis.Inside(iy + 1)) Add(p, (iy + 1) * w + ix, west * south);
    if (x_axis.Inside(ix + 1) && y_axis.Inside(iy + 1)) Add(p, (iy + 1) * w + ix + 1, east * south);
    return p;
  }

  static void Add(PointTaps<A>& p, int64_t offset, A weight) {
    p.offset[p.count] = offset;
    p.weight[p.count] = weight;
    ++p.count;
  }

  void LocateBicubic(A x, A y, const Axis<A>& x_axis, const Axis<A>& y_axis, PointTaps<A>& p) const {
    if (!(std::abs(x) < kFarOutside && std::abs(y) < kFarOutside)) {
      // So far out that every tap is outside (zeros) or on the edge/mirror (otherwise).
      if (x_axis.padding == Padding::kZeros) {
        for (int i = 0; i < 4; ++i) p.row[i] = p.column[i] = -1, p.wx[i] = p.wy[i] = 0;
        return;
      }
      if (x_axis.padding == Padding::kReflection) {
        p.nan = true;
        return;
      }
      x = std::clamp(x, A(-kFarOutside), A(kFarOutside));
      y = std::clamp(y, A(-kFarOutside), A(kFarOutside));
    }
    const A x0 = std::floor(x), y0 = std::floor(y);
    CubicCoefficients(x - x0, p.wx);
    CubicCoefficients(y - y0, p.wy);
    for (int i = 0; i < 4; ++i) {
      p.column[i] = TapIndex(x_axis, x0 - 1 + static_cast<A>(i));
      p.row[i] = TapIndex(y_axis, y0 - 1 + static_cast<A>(i));
    }
  }

  // PyTorch's get_value_bounded: pad the tap's coordinate, then read it if inside.
  static int64_t TapIndex(const Axis<A>& axis, A coord) {
    const A padded = axis.Pad(coord);
    if (std::isnan(padded)) return -1;
    const auto i = static_cast<int64_t>(padded);
    return axis.Inside(i) ? i : -1;
  }

  static A ReadCompact(const CompactTaps<A>& p, const A* map) {
    A sum = 0;  // PyTorch accumulates from 0 over the taps inside the map, in this order
    if (p.count == 4) {
      sum += map[p.offset[0]] * p.weight[0];
      sum += map[p.offset[1]] * p.weight[1];
      sum += map[p.offset[2]] * p.weight[2];
      sum += map[p.offset[3]] * p.weight[3];
      return sum;
    }
    if (p.count < 0) return std::numeric_limits<A>::quiet_NaN();
    for (int k = 0; k < p.count; ++k) sum += map[p.offset[k]] * p.weight[k];
    return sum;
  }

  A Read(const PointTaps<A>& p, const A* map, int64_t width) const {
    if (p.nan) return std::numeric_limits<A>::quiet_NaN();
    if (static_cast<Interpolation>(mode_) == Interpolation::kBicubic) {
      A rows[4];
      for (int i = 0; i < 4; ++i) {
        A v[4];
        for (int j = 0; j < 4; ++j)
          v[j] = p.row[i] >= 0 && p.column[j] >= 0 ? map[p.row[i] * width + p.column[j]] : A(0);
        rows[i] = v[0] * p.wx[0] + v[1] * p.wx[1] + v[2] * p.wx[2] + v[3] * p.wx[3];
      }
      return rows[0] * p.wy[0] + rows[1] * p.wy[1] + rows[2] * p.wy[2] + rows[3] * p.wy[3];
    }
    A sum = 0;
    for (int k = 0; k < p.count; ++k) sum += map[p.offset[k]] * p.weight[k];
    return sum;
  }

  int64_t mode_, padding_, align_corners_;
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<GridSampleKernel, float, double, Half>(def); }

}  // namespace ortops::grid_sample
