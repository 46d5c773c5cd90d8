// Compiled once per instruction-set level (core/isa.h).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/vector_lanes.h"
#include "ops/ms_deform_attn/sampling.h"

namespace ortops::ms_deform_attn::ORTOPS_ISA_NS {
namespace {

// 16 bytes of A, for the channels left after the level's widest vectors.
template <typename A>
struct NarrowLanes {
  typedef A Vector __attribute__((vector_size(16)));
  static constexpr int64_t kCount = 16 / static_cast<int64_t>(sizeof(A));
};

template <typename V, typename A>
V Load(const A* from) {
  V v;
  std::memcpy(&v, from, sizeof(V));
  return v;
}

// Channels [first, first + kVectors * lanes of V) of the sum, accumulated in registers (at
// most 8 vectors, so that none spill). Generic vectors rather than a plain loop over D: GCC's
// unroll-and-jam fuses the loop over taps into the loop over D, and leaves the fused loop
// scalar.
template <typename V, int kVectors, typename A>
void SumPanel(const Tap<A>* taps, size_t count, int64_t first, A* out) {
  constexpr auto kLanes = static_cast<int64_t>(sizeof(V) / sizeof(A));
  V sum[kVectors] = {};
  for (size_t t = 0; t < count; ++t) {
    const Tap<A>& tap = taps[t];
    const A* c0 = tap.corner[0] + first;
    const A* c1 = tap.corner[1] + first;
    const A* c2 = tap.corner[2] + first;
    const A* c3 = tap.corner[3] + first;
    // Unrolled whole, so that the sums stay in registers.
#pragma GCC unroll 8
    for (int i = 0; i < kVectors; ++i) {
      sum[i] += tap.weight[0] * Load<V>(c0 + i * kLanes) + tap.weight[1] * Load<V>(c1 + i * kLanes) +
                tap.weight[2] * Load<V>(c2 + i * kLanes) + tap.weight[3] * Load<V>(c3 + i * kLanes);
    }
  }
  std::memcpy(out + first, sum, sizeof(sum));
}

// Channels [first, first + n * lanes of V) for n < 8, as one panel; returns the next channel.
template <typename V, typename A>
int64_t SumShortPanel(const Tap<A>* taps, size_t count, int64_t first, int64_t vectors, A* out) {
  switch (vectors) {
    case 7: SumPanel<V, 7>(taps, count, first, out); break;
    case 6: SumPanel<V, 6>(taps, count, first, out); break;
    case 5: SumPanel<V, 5>(taps, count, first, out); break;
    case 4: SumPanel<V, 4>(taps, count, first, out); break;
    case 3: SumPanel<V, 3>(taps, count, first, out); break;
    case 2: SumPanel<V, 2>(taps, count, first, out); break;
    case 1: SumPanel<V, 1>(taps, count, first, out); break;
    default: break;
  }
  return first + vectors * static_cast<int64_t>(sizeof(V) / sizeof(A));
}

template <typename A>
void Sum(const Tap<A>* taps, size_t count, int64_t dim, A* out) {
  using Wide = typename Lanes<A>::Vector;
  using Narrow = typename NarrowLanes<A>::Vector;
  constexpr int64_t kWide = Lanes<A>::kCount, kNarrow = NarrowLanes<A>::kCount;
  int64_t first = 0;
  for (; first + 8 * kWide <= dim; first += 8 * kWide) SumPanel<Wide, 8>(taps, count, first, out);
  first = SumShortPanel<Wide>(taps, count, first, (dim - first) / kWide, out);
  first = SumShortPanel<Narrow>(taps, count, first, (dim - first) / kNarrow, out);
  for (int64_t d = first; d < dim; ++d) {
    A sum = 0;
    for (size_t t = 0; t < count; ++t) {
      const Tap<A>& tap = taps[t];
      sum += tap.weight[0] * tap.corner[0][d] + tap.weight[1] * tap.corner[1][d] + tap.weight[2] * tap.corner[2][d] +
             tap.weight[3] * tap.corner[3][d];
    }
    out[d] = sum;
  }
}

// The x and y of `lanes` (x, y) pairs in two vectors: two loads and two shuffles for a whole
// vector of pairs, zeros past `lanes`.
inline void Deinterleave(const float* pairs, int64_t lanes, Lanes<float>::Vector& x, Lanes<float>::Vector& y) {
  using V = Lanes<float>::Vector;
  typedef int32_t I __attribute__((vector_size(kVectorBytes)));
  constexpr int64_t kLanes = Lanes<float>::kCount;
  if (lanes == kLanes) {
    I even, odd;
    for (int i = 0; i < kLanes; ++i) {
      even[i] = 2 * i;
      odd[i] = 2 * i + 1;
    }
    const V low = Load<V>(pairs), high = Load<V>(pairs + kLanes);
    x = __builtin_shuffle(low, high, even);
    y = __builtin_shuffle(low, high, odd);
    return;
  }
  x = V{};
  y = V{};
  for (int64_t i = 0; i < lanes; ++i) {
    x[i] = pairs[2 * i];
    y[i] = pairs[2 * i + 1];
  }
}

}  // namespace

void LocateSamples(const float* location, const float* reference, const float* width, const float* height,
                   int64_t count, const SampleFloors& floors) {
  using V = Lanes<float>::Vector;
  typedef int32_t I __attribute__((vector_size(kVectorBytes)));
  constexpr int64_t kLanes = Lanes<float>::kCount;
  static_assert(kLocateLanes % kLanes == 0);
  for (int64_t first = 0; first < count; first += kLanes) {
    const int64_t lanes = std::min(kLanes, count - first);
    V gx, gy;
    Deinterleave(location + 2 * first, lanes, gx, gy);
    const V w = Load<V>(width + first), h = Load<V>(height + first);
    if (reference != nullptr) {
      V rx, ry;
      Deinterleave(reference + 2 * first, lanes, rx, ry);
      gx = rx + gx / w;
      gy = ry + gy / h;
    }
    V x = gx * w - 0.5f, y = gy * h - 0.5f;
    const I inside = (y > -1.0f) & (y < h) & (x > -1.0f) & (x < w);
    // Points outside (NaN included) are read as 0 here, so that every conversion is in range.
    x = inside ? x : V{};
    y = inside ? y : V{};
    // floor of a coordinate in (-1, size): truncate, then step down where that went up (a true
    // comparison is -1).
    I x0 = __builtin_convertvector(x, I), y0 = __builtin_convertvector(y, I);
    x0 += __builtin_convertvector(x0, V) > x;
    y0 += __builtin_convertvector(y0, V) > y;
    const V east = x - __builtin_convertvector(x0, V), south = y - __builtin_convertvector(y0, V);
    std::memcpy(floors.inside + first, &inside, sizeof(I));
    std::memcpy(floors.x0 + first, &x0, sizeof(I));
    std::memcpy(floors.y0 + first, &y0, sizeof(I));
    std::memcpy(floors.east + first, &east, sizeof(V));
    std::memcpy(floors.south + first, &south, sizeof(V));
  }
}

void SumTaps(const Tap<float>* taps, size_t count, int64_t dim, float* out) { Sum(taps, count, dim, out); }
void SumTaps(const Tap<double>* taps, size_t count, int64_t dim, double* out) { Sum(taps, count, dim, out); }

}  // namespace ortops::ms_deform_attn::ORTOPS_ISA_NS
