// Multi-scale deformable attention (Deformable DETR; mmcv's ms_deform_attn): for each query
// and head, the attention-weighted sum of bilinear samples of every level's value map.
//
// The work is one D-vector per (batch, query, head): the samples' four neighbours are
// D-vectors that lie contiguous in `value` ([B, S, H, D]), so the inner loop is a sum of
// vectors over D, kept in registers.
#include "ops/ms_deform_attn/ms_deform_attn.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/upcast.h"
#include "math/bilinear.h"
#include "ops/ms_deform_attn/attention_inputs.h"

namespace ortops::ms_deform_attn {

namespace {

// One sample's contribution: four neighbour D-vectors and their bilinear weights times the
// attention weight. A neighbour outside the map points at a vector of zeros, with weight 0,
// so that the sum needs no branches and a NaN or infinity elsewhere in `value` stays out.
template <typename A>
struct Tap {
  const A* corner[4];
  A weight[4];
};

// 16 bytes of A as a generic vector (a GCC and Clang extension, not intrinsics): the
// compiler lowers it to the target's 128-bit SIMD (SSE2, NEON) or to scalars. Plain loops
// over D are not enough: GCC's unroll-and-jam fuses the loop over taps into the loop over
// D, and the fused loop is left scalar.
template <typename A>
struct Lanes {
  typedef A Vector __attribute__((vector_size(16)));
  static constexpr int64_t kCount = 16 / sizeof(A);
};

// Channels [first, first + kVectors * lanes) of the sum over taps of w0 c0 + w1 c1 + w2 c2
// + w3 c3, accumulated in registers (at most 8 vectors, so that none spill).
template <typename A, typename T, int kVectors>
void SumPanel(const Tap<A>* taps, size_t count, int64_t first, T* out) {
  using V = typename Lanes<A>::Vector;
  constexpr int64_t kLanes = Lanes<A>::kCount;
  V sum[kVectors] = {};
  for (size_t t = 0; t < count; ++t) {
    const Tap<A>& tap = taps[t];
    for (int i = 0; i < kVectors; ++i) {
      V c[4];
      for (int k = 0; k < 4; ++k) std::memcpy(&c[k], tap.corner[k] + first + i * kLanes, sizeof(V));
      sum[i] += tap.weight[0] * c[0] + tap.weight[1] * c[1] + tap.weight[2] * c[2] + tap.weight[3] * c[3];
    }
  }
  for (int i = 0; i < kVectors; ++i) {
    for (int64_t j = 0; j < kLanes; ++j) out[first + i * kLanes + j] = static_cast<T>(sum[i][j]);
  }
}

// out[d] for d in [0, dim): panels of up to 8 vectors, then the channels left over (fewer
// than one vector's lanes) one at a time.
template <typename A, typename T>
void SumTaps(const Tap<A>* taps, size_t count, int64_t dim, T* out) {
  constexpr int64_t kLanes = Lanes<A>::kCount;
  int64_t first = 0;
  for (; first + 8 * kLanes <= dim; first += 8 * kLanes) SumPanel<A, T, 8>(taps, count, first, out);
  switch ((dim - first) / kLanes) {
    case 7: SumPanel<A, T, 7>(taps, count, first, out); break;
    case 6: SumPanel<A, T, 6>(taps, count, first, out); break;
    case 5: SumPanel<A, T, 5>(taps, count, first, out); break;
    case 4: SumPanel<A, T, 4>(taps, count, first, out); break;
    case 3: SumPanel<A, T, 3>(taps, count, first, out); break;
    case 2: SumPanel<A, T, 2>(taps, count, first, out); break;
    case 1: SumPanel<A, T, 1>(taps, count, first, out); break;
    default: break;
  }
  for (int64_t d = dim - dim % kLanes; d < dim; ++d) {
    A sum = 0;
    for (size_t t = 0; t < count; ++t) {
      const Tap<A>& tap = taps[t];
      sum += tap.weight[0] * tap.corner[0][d] + tap.weight[1] * tap.corner[1][d] + tap.weight[2] * tap.corner[2][d] +
             tap.weight[3] * tap.corner[3][d];
    }
    out[d] = static_cast<T>(sum);
  }
}

// Elements of T are read as A = ComputeType<T> (float16 `value` converted once, up front)
// and all arithmetic is in A, so a float16 kernel computes what the float32 kernel does on
// the same values, then rounds once on store.
template <typename T, bool kMmdeploy>
struct MsDeformAttnKernel : OpKernel<T, kSchemaOf<kMmdeploy>, ParsedWith<PointsPerLevel, kMmdeploy>> {
  // im2col_step (mmdeploy) is ignored; the adapter has checked its type.
  using OpKernel<T, kSchemaOf<kMmdeploy>, ParsedWith<PointsPerLevel, kMmdeploy>>::OpKernel;
  using A = ComputeType<T>;

  void Compute(const KernelIO& io, const PointsPerLevel& points_per_level) const {
    const Inputs<T> in = CheckedInputs<T>(io, points_per_level);
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
      for (auto row = static_cast<int64_t>(begin); row < static_cast<int64_t>(end); ++row) {
        const A* batch_values = values + (row / queries) * keys * channels;
        for (int64_t h = 0; h < heads; ++h) {
          const T* location = in.locations.data + (row * heads + h) * samples * 2;
          const T* weight = in.weights.data + (row * heads + h) * samples;
          const size_t count =
              Gather(table, batch_values + h * dim, channels, zeros.data(), location, weight, taps.data());
          SumTaps(taps.data(), count, dim, output + row * channels + h * dim);
        }
      }
    });
  }

 private:
  // The taps of one query and head: its samples that read anything, in (level, point) order.
  // `head_values` is the head's D-vector at the batch item's first pixel; `stride` (H * D)
  // separates neighbouring pixels.
  static size_t Gather(const ScratchVector<Level<A>>& table, const A* head_values, int64_t stride, const A* zeros,
                       const T* location, const T* weight, Tap<A>* taps) {
    size_t count = 0;
    for (const Level<A>& level : table) {
      const A* level_values = head_values + level.start * stride;
      for (int64_t p = 0; p < level.points; ++p, location += 2, ++weight) {
        const ZeroPaddedSample<A> s = SampleAt(level, location);
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

std::vector<OpPtr> Make(const OpDef& def) { return MakeOps<MsDeformAttnKernel, false, float, double, Half>(def); }
std::vector<OpPtr> MakeMmdeploy(const OpDef& def) {
  return MakeOps<MsDeformAttnKernel, true, float, double, Half>(def);
}

}  // namespace ortops::ms_deform_attn
