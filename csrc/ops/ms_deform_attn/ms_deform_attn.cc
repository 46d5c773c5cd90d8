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
#include "ops/ms_deform_attn/sum_taps.h"

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
    const ScratchVector<A> zeros = io.Vector<A>(static_cast<size_t>(dim));
    // Contiguous ranges of queries, so that neighbouring queries (which sample near one
    // another) share the cache.
    io.ParallelForRanges(static_cast<size_t>(rows), 256, [&](size_t begin, size_t end) {
      ScratchVector<Tap<A>> taps(static_cast<size_t>(samples), io.Allocator<Tap<A>>());
      // float16 sums in A, then rounds once into the output.
      ScratchVector<A> sums(std::is_same_v<T, A> ? 0 : static_cast<size_t>(dim), io.Allocator<A>());
      for (auto row = static_cast<int64_t>(begin); row < static_cast<int64_t>(end); ++row) {
        const A* batch_values = values + (row / queries) * keys * channels;
        for (int64_t h = 0; h < heads; ++h) {
          const T* location = in.locations.data + (row * heads + h) * samples * 2;
          const T* weight = in.weights.data + (row * heads + h) * samples;
          const T* reference = in.references == nullptr ? nullptr : in.references + row * levels * 2;
          const size_t count =
              Gather(table, batch_values + h * dim, channels, zeros.data(), location, reference, weight, taps.data());
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
  // The taps of one query and head: its samples that read anything, in (level, point) order.
  // `head_values` is the head's D-vector at the batch item's first pixel; `stride` (H * D)
  // separates neighbouring pixels. `location` holds the samples' locations, or for the
  // FromOffsets node their offsets from the query's reference points, `reference` ([L, 2]).
  static size_t Gather(const ScratchVector<Level<A>>& table, const A* head_values, int64_t stride, const A* zeros,
                       const T* location, const T* reference, const T* weight, Tap<A>* taps) {
    size_t count = 0;
    for (const Level<A>& level : table) {
      const A* level_values = head_values + level.start * stride;
      for (int64_t p = 0; p < level.points; ++p, location += 2, ++weight) {
        const ZeroPaddedSample<A> s =
            kNode == Node::kFromOffsets ? SampleAt(level, location, reference) : SampleAt(level, location);
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
      if constexpr (kNode == Node::kFromOffsets) reference += 2;
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
