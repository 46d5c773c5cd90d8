// Multi-scale deformable attention (Deformable DETR; mmcv's ms_deform_attn): for each query
// and head, the attention-weighted sum of bilinear samples of every level's value map.
//
// The work is one D-vector per (batch, query, head): the samples' four neighbours are
// D-vectors that lie contiguous in `value` ([B, S, H, D]), so the inner loop is a sum of
// vectors over D, kept in registers.
#include "ops/ms_deform_attn/ms_deform_attn.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/upcast.h"
#include "math/bilinear.h"
#include "ops/ms_deform_attn/attention_inputs.h"
#include "ops/ms_deform_attn/sampling.h"

namespace ortops::ms_deform_attn {

namespace {

// Elements of T are read as A = ComputeType<T> (float16 `value` converted once, up front)
// and all arithmetic is in A, so a float16 kernel computes what the float32 kernel does on
// the same values, then rounds once on store.
template <typename T, Node kNode>
struct MsDeformAttnKernel : OpKernel<T, kSchemaOf<kNode>, ParsedWith<PointsPerLevel, kNode>> {
  // im2col_step (mmdeploy) is ignored; the adapter has checked its type.
  using OpKernel<T, kSchemaOf<kNode>, ParsedWith<PointsPerLevel, kNode>>::OpKernel;
  using A = ComputeType<T>;

  void Compute(const KernelIO& io, const PointsPerLevel& points_per_level) const {
    const Inputs<T> in = CheckedInputs<T, kNode>(io, points_per_level);
    const int64_t batch = in.batch, keys = in.keys, heads = in.heads, dim = in.dim, levels = in.levels;
    const int64_t queries = in.queries, samples = in.samples, channels = in.channels;
    ScratchVector<Level<A>> table(static_cast<size_t>(levels), io.Allocator<Level<A>>());
    CheckLevels(in, table.data());

    T* output = io.Output<T>(0, {batch, queries, channels});
    const int64_t rows = batch * queries;
    if (rows == 0 || channels == 0) return;
    if (levels == 0 || samples == 0) {
      std::fill_n(output, rows * channels, T(0));
      return;
    }
    Scratch<A> converted;
    const A* values = Upcast(io, in.value, converted);
    // Each head's values as one [S, D] plane ([B, H, S, D]): in `value`'s [B, S, H, D] a head's
    // pixels lie H * D apart, a stride at which they share a few cache sets and evict one
    // another; in the plane, neighbouring pixels are neighbouring lines. Worth the copy where
    // the samples outnumber the pixels (an encoder's queries: its pixels), not where a few
    // hundred queries read a few of them (a decoder's).
    Scratch<A> planes;
    const bool in_planes = heads > 1 && queries * samples >= keys;
    if (in_planes) {
      planes = HeadPlanes(io, values, batch, keys, heads, dim);
      values = planes.data();
    }
    // Where a head's values start in a batch item's, and how far apart its pixels lie.
    const int64_t head_stride = in_planes ? keys * dim : dim;
    const int64_t pixel_stride = in_planes ? dim : channels;
    const ScratchVector<A> zeros = io.Vector<A>(static_cast<size_t>(dim));
    // float32 samples are located a vector at a time (LocateSamples), with each sample's level
    // size in an array; levels of 2^31 pixels or more a side take the scalar SampleAt.
    const bool vectorised = std::is_same_v<T, float> && std::all_of(table.begin(), table.end(), [](const Level<A>& l) {
                              return l.height < (int64_t{1} << 31) && l.width < (int64_t{1} << 31);
                            });
    const size_t padded = vectorised ? static_cast<size_t>(LocateSize(samples)) : 0;
    ScratchVector<float> sample_width = io.Vector<float>(padded, 1.0f), sample_height = io.Vector<float>(padded, 1.0f);
    if (vectorised) {
      size_t s = 0;
      for (const Level<A>& level : table) {
        for (int64_t p = 0; p < level.points; ++p, ++s) {
          sample_width[s] = static_cast<float>(level.width_f);
          sample_height[s] = static_cast<float>(level.height_f);
        }
      }
    }
    // Contiguous ranges of queries, so that neighbouring queries (which sample near one
    // another) share the cache.
    io.ParallelForRanges(static_cast<size_t>(rows), 256, [&](size_t begin, size_t end) {
      ScratchVector<Tap<A>> taps(static_cast<size_t>(samples), io.Allocator<Tap<A>>());
      // float16 sums in A, then rounds once into the output.
      ScratchVector<A> sums(std::is_same_v<T, A> ? 0 : static_cast<size_t>(dim), io.Allocator<A>());
      // The vectorised location's arrays: the floors, and for the FromOffsets node each sample's
      // reference point (its level's, for the row).
      ScratchVector<int32_t> floor_ints = io.Vector<int32_t>(3 * padded);
      ScratchVector<float> floor_fractions = io.Vector<float>(2 * padded);
      ScratchVector<float> sample_reference = io.Vector<float>(in.references != nullptr ? 2 * padded : 0);
      const SampleFloors floors = {floor_ints.data(), floor_ints.data() + padded, floor_ints.data() + 2 * padded,
                                   floor_fractions.data(), floor_fractions.data() + padded};
      for (auto row = static_cast<int64_t>(begin); row < static_cast<int64_t>(end); ++row) {
        const A* batch_values = values + (row / queries) * keys * channels;
        const T* reference = in.references == nullptr ? nullptr : in.references + row * levels * 2;
        if (vectorised && reference != nullptr) {
          size_t s = 0;
          for (const Level<A>& level : table) {
            for (int64_t p = 0; p < level.points; ++p, ++s) {
              sample_reference[2 * s] = static_cast<float>(reference[0]);
              sample_reference[2 * s + 1] = static_cast<float>(reference[1]);
            }
            reference += 2;
          }
          reference = in.references + row * levels * 2;
        }
        for (int64_t h = 0; h < heads; ++h) {
          const T* location = in.locations.data + (row * heads + h) * samples * 2;
          const T* weight = in.weights.data + (row * heads + h) * samples;
          size_t count = 0;
          if constexpr (std::is_same_v<T, float>) {
            if (vectorised) {
              ORTOPS_ISA_CALL(LocateSamples, location, reference == nullptr ? nullptr : sample_reference.data(),
                              sample_width.data(), sample_height.data(), samples, floors);
              count = Gather(table, batch_values + h * head_stride, pixel_stride, zeros.data(), weight, taps.data(),
                             [&](const Level<A>& level, int64_t, int64_t s) {
                               return floors.inside[s]
                                          ? ZeroPaddedAtFloor<A>(floors.y0[s], floors.x0[s], floors.south[s],
                                                                 floors.east[s], level.height, level.width)
                                          : ZeroPaddedSample<A>{};
                             });
            }
          }
          if (!vectorised) {
            count = Gather(table, batch_values + h * head_stride, pixel_stride, zeros.data(), weight, taps.data(),
                           [&](const Level<A>& level, int64_t l, int64_t s) {
                             if constexpr (kNode == Node::kFromOffsets) {
                               return SampleAt(level, location + 2 * s, reference + 2 * l);
                             } else {
                               return SampleAt(level, location + 2 * s);
                             }
                           });
          }
          T* out = output + row * channels + h * dim;
          if constexpr (std::is_same_v<T, A>) {
            ORTOPS_ISA_CALL(SumTaps, taps.data(), count, dim, out);
          } else {
            ORTOPS_ISA_CALL(SumTaps, taps.data(), count, dim, sums.data());
            std::transform(sums.data(), sums.data() + dim, out, [](A sum) { return static_cast<T>(sum); });
          }
        }
      }
    });
  }

 private:
  // [B, S, H, D] values as [B, H, S, D].
  static Scratch<A> HeadPlanes(const KernelIO& io, const A* values, int64_t batch, int64_t keys, int64_t heads,
                               int64_t dim) {
    Scratch<A> planes = io.Allocate<A>(static_cast<size_t>(batch * keys * heads * dim));
    io.ParallelForRanges(static_cast<size_t>(batch * keys), 1024, [&](size_t begin, size_t end) {
      for (auto pixel = static_cast<int64_t>(begin); pixel < static_cast<int64_t>(end); ++pixel) {
        const int64_t b = pixel / keys, s = pixel % keys;
        for (int64_t h = 0; h < heads; ++h) {
          std::copy_n(values + (pixel * heads + h) * dim, dim, planes.data() + ((b * heads + h) * keys + s) * dim);
        }
      }
    });
    return planes;
  }

  // The taps of one query and head: its samples that read anything, in (level, point) order.
  // `head_values` is the head's D-vector at the batch item's first pixel; `stride` (H * D)
  // separates neighbouring pixels. sample_of(level, l, s) is where sample s, of level l, reads.
  template <typename SampleOf>
  static size_t Gather(const ScratchVector<Level<A>>& table, const A* head_values, int64_t stride, const A* zeros,
                       const T* weight, Tap<A>* taps, SampleOf&& sample_of) {
    size_t count = 0;
    int64_t index = 0;
    for (int64_t l = 0; l < static_cast<int64_t>(table.size()); ++l) {
      const Level<A>& level = table[static_cast<size_t>(l)];
      const A* level_values = head_values + level.start * stride;
      for (int64_t p = 0; p < level.points; ++p, ++index, ++weight) {
        const ZeroPaddedSample<A> s = sample_of(level, l, index);
        if (!s.inside) continue;
        const auto attention = static_cast<A>(*weight);
        Tap<A>& tap = taps[count++];
        if (s.valid[0] && s.valid[3]) {  // all four neighbours in the map: the common case
          const A* corner = level_values + (s.y0 * level.width + s.x0) * stride;
          const int64_t row = level.width * stride;
          tap = {{corner, corner + stride, corner + row, corner + row + stride},
                 {s.weight[0] * attention, s.weight[1] * attention, s.weight[2] * attention, s.weight[3] * attention}};
          continue;
        }
        for (int k = 0; k < 4; ++k) {
          if (s.valid[k]) {
            tap.corner[k] = level_values + ((s.y0 + k / 2) * level.width + s.x0 + k % 2) * stride;
            tap.weight[k] = s.weight[k] * attention;
          } else {
            tap.corner[k] = zeros;
            tap.weight[k] = A(0);
          }
        }
      }
    }
    return count;
  }
};

}  // namespace

std::vector<OpPtr> Make(const OpDef& def) {
  return MakeOps<MsDeformAttnKernel, Node::kLocations, float, double, Half>(def);
}
std::vector<OpPtr> MakeFromOffsets(const OpDef& def) {
  return MakeOps<MsDeformAttnKernel, Node::kFromOffsets, float, double, Half>(def);
}
std::vector<OpPtr> MakeMmdeploy(const OpDef& def) {
  return MakeOps<MsDeformAttnKernel, Node::kMmdeploy, float, double, Half>(def);
}

}  // namespace ortops::ms_deform_attn
