// 2-D grid sampling with PyTorch's arithmetic (torch.nn.functional.grid_sample), as mmcv's
// and mmdeploy's grid_sampler.
#include "ops/grid_sample/grid_sample.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/channels_last.h"
#include "core/half_convert.h"
#include "core/upcast.h"
#include "ops/grid_sample/grid_points.h"
#include "ops/grid_sample/sample.h"

namespace ortops::grid_sample {

namespace {

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
struct GridSampleKernel : OpKernel<T, kSchema, GridSampleAttributes> {
  using OpKernel<T, kSchema, GridSampleAttributes>::OpKernel;
  using A = ComputeType<T>;

  void Compute(const KernelIO& io, const GridSampleAttributes& attributes) const {
    const GridSampleCall<T> call = PrepareCall<T>(io);
    if (call.empty) return;
    const ConstTensor<T>& input = call.input;
    const ConstTensor<T>& grid = call.grid;
    T* output = call.output;
    const int64_t batch = call.batch(), channels = call.channels(), height = call.height(), width = call.width();
    const Axis<A> x_axis = attributes.AxisOf<A>(width), y_axis = attributes.AxisOf<A>(height);
    const int64_t plane = height * width, out_plane = call.out_plane();
    if constexpr (std::is_same_v<A, float>) {
      if (LocatesInVectors(x_axis, y_axis) && CopyPays(plane, out_plane)) {
        ComputeBlocked(io, input, grid, output);
        return;
      }
    }
    const bool bicubic = attributes.interpolation() == Interpolation::kBicubic;
    if (!bicubic && ChannelsLastPays(channels, plane, out_plane)) {
      ComputeChannelsLast(io, input, grid, x_axis, y_axis, output);
      return;
    }
    Scratch<A> converted;
    const A* values = Upcast(io, input, converted);
    // The taps of a chunk of output points are computed once, then each channel reads its
    // whole plane through them: one plane at a time stays in cache for the random reads.
    const int64_t chunk = std::min<int64_t>(out_plane, bicubic ? (1 << 16) : (1 << 20));
    const Scratch<PointTaps<A>> wide = io.Allocate<PointTaps<A>>(bicubic ? static_cast<size_t>(chunk) : 0);
    const Scratch<CompactTaps<A>> compact = io.Allocate<CompactTaps<A>>(bicubic ? 0 : static_cast<size_t>(chunk));
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t start = 0; start < out_plane; start += chunk) {
        const int64_t count = std::min(chunk, out_plane - start);
        const T* points = grid.data + (n * out_plane + start) * 2;
        io.ParallelForRanges(static_cast<size_t>(count), 64, [&](size_t begin, size_t end) {
          for (size_t i = begin; i < end; ++i) {
            const auto gx = static_cast<A>(points[2 * i]), gy = static_cast<A>(points[2 * i + 1]);
            if (bicubic) {
              wide[i] = LocateBicubic(gx, gy, x_axis, y_axis);
              continue;
            }
            CompactTaps<A>& taps = compact[i];
            int32_t inside = 0;
            const bool number =
                LocateLinear(attributes.interpolation(), gx, gy, x_axis, y_axis, [&](int64_t offset, A weight) {
                  taps.offset[inside] = static_cast<int32_t>(offset);
                  taps.weight[inside] = weight;
                  ++inside;
                });
            taps.count = number ? inside : -1;
          }
        });
        io.ParallelFor(static_cast<size_t>(channels), [&](size_t c) {
          const A* map = values + (n * channels + static_cast<int64_t>(c)) * plane;
          T* out = output + (n * channels + static_cast<int64_t>(c)) * out_plane + start;
          if (bicubic) {
            for (int64_t i = 0; i < count; ++i) out[i] = static_cast<T>(ReadBicubic(wide[i], map, width));
          } else {
            for (int64_t i = 0; i < count; ++i) out[i] = static_cast<T>(ReadCompact(compact[i], map));
          }
        });
      }
    }
  }

 private:
  // Whether sampling from a channels-last copy (of blocks of channels, or of all of them)
  // pays for making it: each point then reads every channel of its four pixels in runs
  // (vectorised), where the planar loop below reads them one at a time, one plane after
  // another; the copy costs about one pass over the input, whatever the number of points.
  // Blocks pay from one channel on (at 1 to 3 channels of 256 x 256 on Zen 5, half the
  // planar loop's time); the copy of all channels from 4.
  static bool CopyPays(int64_t plane, int64_t out_plane) { return 2 * out_plane >= plane; }
  static bool ChannelsLastPays(int64_t channels, int64_t plane, int64_t out_plane) {
    return channels >= 4 && CopyPays(plane, out_plane);
  }

  // Bilinear sampling with zeros padding (the common case) on maps below 2^24 a side, where
  // the dispatched loops locate a vector of points at a time (their floor is exact there).
  bool LocatesInVectors(const Axis<A>& x_axis, const Axis<A>& y_axis) const {
    const GridSampleAttributes& attributes = this->attributes();
    constexpr int64_t kVectorSide = int64_t{1} << 24;
    return attributes.interpolation() == Interpolation::kBilinear && x_axis.padding == Padding::kZeros &&
           x_axis.size < kVectorSide && y_axis.size < kVectorSide;
  }

  // Bilinear sampling with zeros padding (the common case) in float, and in float16 through
  // float: the taps of every point are located once (dispatched, in vectors), then each
  // block of a few channels of an image (BlockChannels: 4 or 8) is copied channels-last, and
  // every point reads its four pixels of the block as four vectors. Against reading planes,
  // this touches a fraction of the cache lines per sample (two per channel there) and needs
  // no gathers; against one channels-last copy of all channels, the block stays close to the
  // core. Float16 is widened by the block copy and the samples rounded on store.
  void ComputeBlocked(const KernelIO& io, const ConstTensor<T>& input, const ConstTensor<T>& grid, T* output) const {
    const GridSampleAttributes& attributes = this->attributes();
    Scratch<float> converted_grid;
    const float* coordinates = Upcast(io, grid, converted_grid);
    const int64_t batch = input.dim(0), channels = input.dim(1), height = input.dim(2), width = input.dim(3);
    const int64_t plane = height * width, out_plane = grid.dim(1) * grid.dim(2);
    const int64_t image_taps = TapArraysSize(out_plane);
    const auto size = static_cast<size_t>(batch * image_taps);
    const Scratch<int32_t> corner = io.Allocate<int32_t>(size);
    const Scratch<float> east = io.Allocate<float>(size);
    const Scratch<float> south = io.Allocate<float>(size);
    const Scratch<uint8_t> flags = io.Allocate<uint8_t>(size);
    const auto taps_of = [&](int64_t n, int64_t first) {
      const int64_t at = n * image_taps + first;
      return TapArrays{corner.data() + at, east.data() + at, south.data() + at, flags.data() + at};
    };
    const int64_t tasks = (out_plane + kTaskPoints - 1) / kTaskPoints;
    io.ParallelFor(static_cast<size_t>(batch * tasks), [&](size_t task) {
      const int64_t n = static_cast<int64_t>(task) / tasks, first = static_cast<int64_t>(task) % tasks * kTaskPoints;
      ORTOPS_ISA_CALL(LocateTaps, coordinates + (n * out_plane + first) * 2, std::min(kTaskPoints, out_plane - first),
                      width, height, attributes.align_corners == 1, taps_of(n, first));
    });
    const int64_t block_channels = ORTOPS_ISA_CALL(BlockChannels);
    const int64_t blocks = (channels + block_channels - 1) / block_channels;
    const auto block_size = static_cast<size_t>((plane + 1) * block_channels);
    const auto output_of = [&](int64_t n, int64_t c) { return output + (n * channels + c) * out_plane; };
    if (OwnBlocksPay(batch * blocks)) {
      // Each task copies and samples one block of one image: no phases that wait for each
      // other, and each core's caches hold its own block.
      io.ParallelFor(static_cast<size_t>(batch * blocks), [&](size_t pair) {
        const int64_t n = static_cast<int64_t>(pair) / blocks, c = static_cast<int64_t>(pair) % blocks * block_channels;
        const int64_t count = std::min(block_channels, channels - c);
        const Scratch<float> block = io.Allocate<float>(block_size);
        ScratchVector<float> widened = io.Vector<float>(std::is_same_v<T, float> ? 0 : count * kChannelsLastTile);
        ToChannelsLastTiles(input.data + (n * channels + c) * plane, count, plane, 0,
                            (plane + kChannelsLastTile - 1) / kChannelsLastTile, widened.data(), block.data());
        SampleBlock(io, block.data(), count, width, taps_of(n, 0), 0, out_plane, output_of(n, c), out_plane);
      });
      return;
    }
    // Too few blocks to keep every core busy: all threads copy, then sample, each block.
    const Scratch<float> block = io.Allocate<float>(block_size);
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t c = 0; c < channels; c += block_channels) {
        const int64_t count = std::min(block_channels, channels - c);
        ToChannelsLast(io, input.data + (n * channels + c) * plane, count, plane, block.data());
        io.ParallelFor(static_cast<size_t>(tasks), [&](size_t task) {
          const int64_t first = static_cast<int64_t>(task) * kTaskPoints;
          SampleBlock(io, block.data(), count, width, taps_of(n, first), 0, std::min(kTaskPoints, out_plane - first),
                      output_of(n, c) + first, out_plane);
        });
      }
    }
  }

  // Tasks own a block of an image where there are at least four such pairs for each core
  // (so that giving out whole pairs leaves no core idle for long); 64 channels of one image
  // are 8 pairs, which on 2 cores take 1.2 ms against 1.5 ms when both cores share each
  // block (Zen 5, 256 x 256 maps, 65536 points).
  static bool OwnBlocksPay(int64_t pairs) { return pairs >= 4 * KernelIO::HardwareThreads(); }

  // Points in tasks of this many (a multiple of kTapLanes).
  static constexpr int64_t kTaskPoints = 1024;
  static_assert(kTaskPoints % kTapLanes == 0);

  // Points [first, first + count) of one image's taps sampled from a block into `count`
  // channels of out (planes out_stride apart); float16 rounded from float, kTaskPoints at a
  // time.
  static void SampleBlock(const KernelIO& io, const float* block, int64_t count, int64_t width, const TapArrays& taps,
                          int64_t first, int64_t points, T* out, int64_t out_stride) {
    if constexpr (std::is_same_v<T, float>) {
      ORTOPS_ISA_CALL(SampleBlock, block, count, width, taps, first, points, out, out_stride);
    } else {
      ScratchVector<float> samples = io.Vector<float>(static_cast<size_t>(count * std::min(points, kTaskPoints)));
      for (int64_t start = first; start < first + points; start += kTaskPoints) {
        const int64_t run = std::min(kTaskPoints, first + points - start);
        ORTOPS_ISA_CALL(SampleBlock, block, count, width, taps, start, run, samples.data(), run);
        for (int64_t k = 0; k < count; ++k) {
          NarrowToHalves(samples.data() + k * run, run, out + k * out_stride + (start - first));
        }
      }
    }
  }

  // Bilinear and nearest sampling through a channels-last copy of each image with two pixels
  // appended, one of zeros (read with weight 0 by the taps outside the map) and one of NaN
  // (read with weight 1 by NaN points), so that every point sums four products without
  // branches (sample.h says why the bits are PyTorch's). Points go in tiles:
  // their [tile, C] values are transposed into the [C, H_out * W_out] output.
  void ComputeChannelsLast(const KernelIO& io, const ConstTensor<T>& input, const ConstTensor<T>& grid,
                           const Axis<A>& x_axis, const Axis<A>& y_axis, T* output) const {
    const GridSampleAttributes& attributes = this->attributes();
    const int64_t batch = input.dim(0), channels = input.dim(1), plane = input.dim(2) * input.dim(3);
    const int64_t out_plane = grid.dim(1) * grid.dim(2);
    const int64_t zero_pixel = plane, nan_pixel = plane + 1;
    const Scratch<A> image = io.Allocate<A>(static_cast<size_t>((plane + 2) * channels));
    std::fill(image.data() + zero_pixel * channels, image.data() + nan_pixel * channels, A(0));
    std::fill(image.data() + nan_pixel * channels, image.data() + (nan_pixel + 1) * channels,
              std::numeric_limits<A>::quiet_NaN());
    constexpr int64_t kPointTile = 64, kPointsPerTask = 1024;
    const bool vector_location = LocatesInVectors(x_axis, y_axis);
    for (int64_t n = 0; n < batch; ++n) {
      // (float16 is widened on the way, a tile at a time.)
      ToChannelsLast(io, input.data + n * channels * plane, channels, plane, image.data());
      const T* points = grid.data + n * out_plane * 2;
      T* out = output + n * channels * out_plane;
      const auto tasks = static_cast<size_t>((out_plane + kPointsPerTask - 1) / kPointsPerTask);
      io.ParallelForRanges(static_cast<size_t>(out_plane), tasks, [&](size_t begin, size_t end) {
        ScratchVector<PointTap<A>> taps = io.Vector<PointTap<A>>(kPointTile);
        ScratchVector<A> rows = io.Vector<A>(static_cast<size_t>(kPointTile * channels));
        ScratchVector<A> coordinates = io.Vector<A>(std::is_same_v<T, A> ? 0 : 2 * kPointTile);
        for (auto start = static_cast<int64_t>(begin); start < static_cast<int64_t>(end); start += kPointTile) {
          const int64_t count = std::min(kPointTile, static_cast<int64_t>(end) - start);
          if (vector_location) {
            const A* xy = nullptr;
            if constexpr (std::is_same_v<T, A>) {
              xy = points + 2 * start;
            } else {
              for (int64_t i = 0; i < 2 * count; ++i) coordinates[static_cast<size_t>(i)] = points[2 * start + i];
              xy = coordinates.data();
            }
            ORTOPS_ISA_CALL(LocateBilinearZeros, xy, count, x_axis.size, y_axis.size, x_axis.align_corners, zero_pixel,
                            nan_pixel, taps.data());
          }
          for (int64_t i = 0; i < (vector_location ? 0 : count); ++i) {
            const int64_t p = start + i;
            PointTap<A>& tap = taps[static_cast<size_t>(i)];
            int inside = 0;
            const bool number =
                LocateLinear(attributes.interpolation(), static_cast<A>(points[2 * p]),
                             static_cast<A>(points[2 * p + 1]), x_axis, y_axis, [&](int64_t offset, A weight) {
                               tap.pixel[inside] = offset;
                               tap.weight[inside] = weight;
                               ++inside;
                             });
            for (int k = inside; k < 4; ++k) {
              tap.pixel[k] = zero_pixel;
              tap.weight[k] = A(0);
            }
            if (!number) {
              tap.pixel[0] = nan_pixel;
              tap.weight[0] = A(1);
            }
          }
          ORTOPS_ISA_CALL(SampleRows, image.data(), channels, taps.data(), count, rows.data());
          if constexpr (std::is_same_v<T, A>) {
            ORTOPS_ISA_CALL(RowsToPlanes, rows.data(), count, channels, out + start, out_plane);
          } else {
            for (int64_t c = 0; c < channels; ++c) {
              for (int64_t i = 0; i < count; ++i) {
                out[c * out_plane + start + i] = static_cast<T>(rows[static_cast<size_t>(i * channels + c)]);
              }
            }
          }
        }
      });
    }
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
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<GridSampleKernel, float, double, Half>(def); }

}  // namespace ortops::grid_sample
