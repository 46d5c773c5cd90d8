// Compiled once per instruction-set level (core/isa.h).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "ops/cummax/scan_rows.h"

#if defined(__AVX512F__)
// GCC 12's AVX-512 intrinsics start some results from an undefined vector, which
// -Wmaybe-uninitialized reports at the header's lines once inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#elif defined(__AVX2__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ortops::scan::ORTOPS_ISA_NS {
namespace {

// Steps [first_step, length) of one contiguous line (in scan order), continuing from the
// running extreme `best` at `best_index`; the running state is kept in registers.
template <typename T, bool kMax>
void LineSteps(const T* in, T* out, int64_t* index, int64_t length, bool reverse, int64_t first_step, T best,
               int64_t best_index) {
  const int64_t step = reverse ? -1 : 1;
  int64_t position = reverse ? length - 1 - first_step : first_step;
  for (int64_t s = first_step; s < length; ++s, position += step) {
    const T candidate = in[position];
    const bool take = rule::Takes<T, kMax>(candidate, best);
    best = rule::Pick(take, candidate, best);
    best_index = take ? position : best_index;
    out[position] = best;
    if (index) index[position] = best_index;
  }
}

// A whole line: its first element takes over (Takes(x, x) holds), as from an identity.
template <typename T, bool kMax>
void Line(const T* in, T* out, int64_t* index, int64_t length, bool reverse) {
  const int64_t first = reverse ? length - 1 : 0;
  LineSteps<T, kMax>(in, out, index, length, reverse, 0, in[first], first);
}

#if defined(__AVX512F__)
// A float line 16 positions at a time: a running extreme is a prefix scan with the operator
// "the later of two unless the earlier wins" (Takes), which is associative (it picks by a
// total order: NaN highest, then value, ties by position), so a scan within the vector in
// four shift-and-select steps, then a select against the extreme carried in from the
// previous 16, picks the same element, bits and position, as the sequential loop. Only
// selects, no arithmetic, so every bit is the input's.
template <bool kMax>
struct FloatLanes {
  // Lanes where the running extreme stays `earlier` instead of moving to `later`: later is
  // not NaN and not at least as good (a NaN `earlier` is better than every non-NaN).
  static __mmask16 KeepsEarlier(__mmask16 lanes, __m512 later, __m512 earlier) {
    const __mmask16 ordered = _mm512_mask_cmp_ps_mask(lanes, later, later, _CMP_ORD_Q);
    return _mm512_mask_cmp_ps_mask(ordered, later, earlier, kMax ? _CMP_NGE_UQ : _CMP_NLE_UQ);
  }
};

// Lanes in `lanes`: the running extreme of `earlier` then `later` when `earlier` is not NaN:
// VMAXPS / VMINPS return their second operand unless the first is strictly better, and
// whenever either is NaN, which is Takes(later, earlier) exactly when earlier is not NaN.
// Other lanes: `src`.
template <bool kMax>
__m512 MaskedExtremeOf(__m512 src, __mmask16 lanes, __m512 earlier, __m512 later) {
  return kMax ? _mm512_mask_max_ps(src, lanes, earlier, later) : _mm512_mask_min_ps(src, lanes, earlier, later);
}

// Masked loads and stores only for a line's partial block: on AMD Zen 4 and 5 a masked
// 512-bit store is slow even with every lane set (corner pooling along W of 1x256x200x200
// took 7.2 ms with masked stores throughout and 2.1 ms without, on Zen 5).
inline void StoreBlock(float* out, __mmask16 valid, __m512 v) {
  if (valid == 0xffff) {
    _mm512_storeu_ps(out, v);
  } else {
    _mm512_mask_storeu_ps(out, valid, v);
  }
}

template <bool kMax>
void FloatLine(const float* in, float* out, int64_t* index, int64_t length, bool reverse) {
  // Lane l's earlier neighbour at distance d: l - d (forward) or l + d (reverse).
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  // Lanes past the line's end (forward) or before its start (reverse) read the operator's
  // identity, which every value replaces: -inf for the maximum, +inf for the minimum.
  const __m512 identity = _mm512_set1_ps(kMax ? -__builtin_inff() : __builtin_inff());
  __m512i from[4];
  __mmask16 has[4];
  for (int s = 0; s < 4; ++s) {
    const int d = 1 << s;
    from[s] = reverse ? _mm512_add_epi32(lane, _mm512_set1_epi32(d)) : _mm512_sub_epi32(lane, _mm512_set1_epi32(d));
    has[s] = static_cast<__mmask16>(reverse ? 0xffffu >> d : (0xffffu << d) & 0xffffu);
  }
  __m512 carry = identity;
  __m512i carry_index = _mm512_setzero_si512();
  bool nan_seen = false;
  const int64_t blocks = (length + 15) / 16;
  for (int64_t b = 0; b < blocks; ++b) {
    // Forward: blocks from the line's start, the last one partial. Reverse: from its end,
    // the last block visited (positions 0 up) partial, its missing lanes at the top.
    const int64_t count = std::min<int64_t>(16, length - 16 * b);
    const int64_t base = reverse ? length - 16 * b - count : 16 * b;  // position of lane 0
    const auto valid = static_cast<__mmask16>(0xffffu >> (16 - count));
    __m512 v = valid == 0xffff ? _mm512_loadu_ps(in + base) : _mm512_mask_loadu_ps(identity, valid, in + base);
    if (index == nullptr && !nan_seen) {
      nan_seen = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) != 0;
      if (!nan_seen) {
        // No NaN so far (ExtremeOf's condition): one max or min per step.
        for (int s = 0; s < 4; ++s) v = MaskedExtremeOf<kMax>(v, has[s], _mm512_permutexvar_ps(from[s], v), v);
        if (b > 0) v = MaskedExtremeOf<kMax>(v, 0xffff, carry, v);
        StoreBlock(out + base, valid, v);
        carry = _mm512_permutexvar_ps(_mm512_set1_epi32(reverse ? 0 : static_cast<int>(count) - 1), v);
        continue;
      }
    }
    __m512i local = lane;  // each lane's winner, as a lane of this block
    for (int s = 0; s < 4; ++s) {
      const __m512 earlier = _mm512_permutexvar_ps(from[s], v);
      const __mmask16 keep = FloatLanes<kMax>::KeepsEarlier(has[s], v, earlier);
      v = _mm512_mask_mov_ps(v, keep, earlier);
      if (index) local = _mm512_mask_mov_epi32(local, keep, _mm512_permutexvar_epi32(from[s], local));
    }
    const __mmask16 keep_carry = b == 0 ? __mmask16{0} : FloatLanes<kMax>::KeepsEarlier(0xffff, v, carry);
    v = _mm512_mask_mov_ps(v, keep_carry, carry);
    StoreBlock(out + base, valid, v);
    if (index) {
      // Positions of the block's own winners, and the carried position where it stays.
      const __m512i low =
          _mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(local)), _mm512_set1_epi64(base));
      const __m512i high =
          _mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(local, 1)), _mm512_set1_epi64(base));
      const __m512i low_out = _mm512_mask_mov_epi64(low, static_cast<__mmask8>(keep_carry), carry_index);
      const __m512i high_out = _mm512_mask_mov_epi64(high, static_cast<__mmask8>(keep_carry >> 8), carry_index);
      if (valid == 0xffff) {
        _mm512_storeu_si512(index + base, low_out);
        _mm512_storeu_si512(index + base + 8, high_out);
      } else {
        _mm512_mask_storeu_epi64(index + base, static_cast<__mmask8>(valid), low_out);
        _mm512_mask_storeu_epi64(index + base + 8, static_cast<__mmask8>(valid >> 8), high_out);
      }
      // The carried position: lane 0's (reverse) or the last valid lane's (forward), taken
      // from the registers (a load of what was just stored would wait for the store).
      const int last = reverse ? 0 : static_cast<int>(count) - 1;
      carry_index = _mm512_permutexvar_epi64(_mm512_set1_epi64(last % 8), last < 8 ? low_out : high_out);
    }
    carry = _mm512_permutexvar_ps(_mm512_set1_epi32(reverse ? 0 : static_cast<int>(count) - 1), v);
  }
}
#endif

#if !defined(__AVX512F__) && (defined(__AVX2__) || defined(__SSE2__))
// The lane operations the in-vector scan of PrefixLine needs, for 8 (AVX2) or 4 (SSE2) floats.
#if defined(__AVX2__)
struct FloatLanes {
  using F = __m256;
  static constexpr int kWidth = 8;
  static F Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, F v) { _mm256_storeu_ps(p, v); }
  // Lane l receives lane l - d (forward) or l + d (reverse); lanes without one are masked
  // out by Has.
  template <int d, bool kReverse>
  static F Earlier(F v) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_permutevar8x32_ps(
        v, kReverse ? _mm256_add_epi32(lane, _mm256_set1_epi32(d)) : _mm256_sub_epi32(lane, _mm256_set1_epi32(d)));
  }
  template <int d, bool kReverse>
  static F Has() {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_castsi256_ps(kReverse ? _mm256_cmpgt_epi32(_mm256_set1_epi32(kWidth - d), lane)
                                        : _mm256_cmpgt_epi32(lane, _mm256_set1_epi32(d - 1)));
  }
  static F Ordered(F v) { return _mm256_cmp_ps(v, v, _CMP_ORD_Q); }
  static F NotGreaterEqual(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_NGE_UQ); }
  static F NotLessEqual(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_NLE_UQ); }
  static F And(F a, F b) { return _mm256_and_ps(a, b); }
  static F Select(F mask, F yes, F no) { return _mm256_blendv_ps(no, yes, mask); }
  template <int l>
  static F Broadcast(F v) {
    return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(l));
  }
  static float First(F v) { return _mm256_cvtss_f32(v); }
  // MAXPS / MINPS: the second operand unless the first is strictly better, or either is NaN.
  static F Max(F a, F b) { return _mm256_max_ps(a, b); }
  static F Min(F a, F b) { return _mm256_min_ps(a, b); }
  static F Splat(float x) { return _mm256_set1_ps(x); }
  static bool AnyNaN(F v) { return _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0; }

  // Indices: each lane's winner as a lane of the block (32-bit), moved by the same selects.
  using I = __m256i;
  static I Lanes() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
  template <int d, bool kReverse>
  static I Earlier(I v) {
    return _mm256_castps_si256(Earlier<d, kReverse>(_mm256_castsi256_ps(v)));
  }
  static I Select(F mask, I yes, I no) {
    return _mm256_castps_si256(Select(mask, _mm256_castsi256_ps(yes), _mm256_castsi256_ps(no)));
  }
  // index[l] = carried where the carried extreme stays, base + lane's winner otherwise.
  static void StoreIndices(int64_t* index, I winner, int64_t base, F carried, int64_t carried_index) {
    const __m256i offset = _mm256_set1_epi64x(base), carry = _mm256_set1_epi64x(carried_index);
    const __m256i mask = _mm256_castps_si256(carried);
    for (int half = 0; half < 2; ++half) {
      const __m128i lanes = half == 0 ? _mm256_castsi256_si128(winner) : _mm256_extracti128_si256(winner, 1);
      const __m128i keep = half == 0 ? _mm256_castsi256_si128(mask) : _mm256_extracti128_si256(mask, 1);
      const __m256i own = _mm256_add_epi64(_mm256_cvtepi32_epi64(lanes), offset);
      const __m256i out = _mm256_blendv_epi8(own, carry, _mm256_cvtepi32_epi64(keep));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(index + 4 * half), out);
    }
  }
};
#else
struct FloatLanes {
  using F = __m128;
  static constexpr int kWidth = 4;
  static F Load(const float* p) { return _mm_loadu_ps(p); }
  static void Store(float* p, F v) { _mm_storeu_ps(p, v); }
  template <int d, bool kReverse>
  static F Earlier(F v) {
    const __m128i bits = _mm_castps_si128(v);
    return _mm_castsi128_ps(kReverse ? _mm_srli_si128(bits, 4 * d) : _mm_slli_si128(bits, 4 * d));
  }
  template <int d, bool kReverse>
  static F Has() {
    const __m128i ones = _mm_set1_epi32(-1);
    return _mm_castsi128_ps(kReverse ? _mm_srli_si128(ones, 4 * d) : _mm_slli_si128(ones, 4 * d));
  }
  static F Ordered(F v) { return _mm_cmpord_ps(v, v); }
  static F NotGreaterEqual(F a, F b) { return _mm_cmpnge_ps(a, b); }
  static F NotLessEqual(F a, F b) { return _mm_cmpnle_ps(a, b); }
  static F And(F a, F b) { return _mm_and_ps(a, b); }
  static F Select(F mask, F yes, F no) { return _mm_or_ps(_mm_and_ps(mask, yes), _mm_andnot_ps(mask, no)); }
  template <int l>
  static F Broadcast(F v) {
    return _mm_shuffle_ps(v, v, _MM_SHUFFLE(l, l, l, l));
  }
  static float First(F v) { return _mm_cvtss_f32(v); }
  // MAXPS / MINPS: the second operand unless the first is strictly better, or either is NaN.
  static F Max(F a, F b) { return _mm_max_ps(a, b); }
  static F Min(F a, F b) { return _mm_min_ps(a, b); }
  static F Splat(float x) { return _mm_set1_ps(x); }
  static bool AnyNaN(F v) { return _mm_movemask_ps(_mm_cmpunord_ps(v, v)) != 0; }

  // Indices: each lane's winner as a lane of the block (32-bit), moved by the same selects.
  using I = __m128i;
  static I Lanes() { return _mm_setr_epi32(0, 1, 2, 3); }
  template <int d, bool kReverse>
  static I Earlier(I v) {
    return kReverse ? _mm_srli_si128(v, 4 * d) : _mm_slli_si128(v, 4 * d);
  }
  static I Select(F mask, I yes, I no) {
    const __m128i m = _mm_castps_si128(mask);
    return _mm_or_si128(_mm_and_si128(m, yes), _mm_andnot_si128(m, no));
  }
  // index[l] = carried where the carried extreme stays, base + lane's winner otherwise.
  static void StoreIndices(int64_t* index, I winner, int64_t base, F carried, int64_t carried_index) {
    const __m128i offset = _mm_set1_epi64x(base), carry = _mm_set1_epi64x(carried_index);
    const __m128i mask = _mm_castps_si128(carried), zero = _mm_setzero_si128();
    for (int half = 0; half < 2; ++half) {
      // Lanes are 0..3: widened with zeros; the masks widened with themselves.
      const __m128i lanes = half == 0 ? _mm_unpacklo_epi32(winner, zero) : _mm_unpackhi_epi32(winner, zero);
      const __m128i keep = half == 0 ? _mm_unpacklo_epi32(mask, mask) : _mm_unpackhi_epi32(mask, mask);
      const __m128i own = _mm_add_epi64(lanes, offset);
      const __m128i out = _mm_or_si128(_mm_and_si128(keep, carry), _mm_andnot_si128(keep, own));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(index + 2 * half), out);
    }
  }
};
#endif

// Lanes where the running extreme stays `earlier`: `later` is not NaN and not at least as
// good (a NaN `earlier` is better than every non-NaN).
template <bool kMax>
FloatLanes::F KeepsEarlier(FloatLanes::F later, FloatLanes::F earlier) {
  using L = FloatLanes;
  return L::And(L::Ordered(later), kMax ? L::NotGreaterEqual(later, earlier) : L::NotLessEqual(later, earlier));
}

// A block's values and their winners' lanes after one step of the in-vector scan (passed and
// returned by value: no local's address is taken, which under AddressSanitizer would bring
// exception cleanups, and a weak personality symbol, into the per-level object).
struct Scanned {
  FloatLanes::F value;
  FloatLanes::I winner;
};

template <bool kMax, bool kReverse, int d>
Scanned ScanStep(Scanned s, bool with_index) {
  using L = FloatLanes;
  const L::F earlier = L::template Earlier<d, kReverse>(s.value);
  const L::F keep = L::And(L::template Has<d, kReverse>(), KeepsEarlier<kMax>(s.value, earlier));
  s.value = L::Select(keep, earlier, s.value);
  if (with_index) s.winner = L::Select(keep, L::template Earlier<d, kReverse>(s.winner), s.winner);
  return s;
}

// A float line, kWidth positions at a time, by the same associative select as the AVX-512
// FloatLine above: an in-vector prefix scan, then the carried extreme; the positions left
// over (fewer than kWidth, at the line's end in scan order) continue one by one from the last
// extreme. Indices (may be null) follow the same selects as lanes of the block.
template <bool kMax, bool kReverse>
void PrefixLine(const float* in, float* out, int64_t* index, int64_t length) {
  using L = FloatLanes;
  using F = L::F;
  constexpr int kWidth = L::kWidth;
  const auto keeps_earlier = KeepsEarlier<kMax>;
  const int64_t blocks = length / kWidth;
  F carry{};
  int64_t carry_index = 0;
  // Until the line's first NaN, and without indices, a step is one max or min: MAXPS / MINPS
  // return their second operand unless the first is strictly better or either is NaN, which
  // is Takes(later, earlier) exactly when `earlier` is not NaN. Lanes without an earlier one
  // in the block take the identity, -inf (maximum) or +inf (minimum).
  const F identity = L::Splat(kMax ? -__builtin_inff() : __builtin_inff());
  const auto extreme_of = [](F earlier, F later) { return kMax ? L::Max(earlier, later) : L::Min(earlier, later); };
  bool nan_seen = false;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t base = kReverse ? length - kWidth * (b + 1) : kWidth * b;
    if (index == nullptr && !nan_seen) {
      F v = L::Load(in + base);
      nan_seen = L::AnyNaN(v);
      if (!nan_seen) {
        v = extreme_of(L::Select(L::template Has<1, kReverse>(), L::template Earlier<1, kReverse>(v), identity), v);
        v = extreme_of(L::Select(L::template Has<2, kReverse>(), L::template Earlier<2, kReverse>(v), identity), v);
        if constexpr (kWidth == 8) {
          v = extreme_of(L::Select(L::template Has<4, kReverse>(), L::template Earlier<4, kReverse>(v), identity), v);
        }
        if (b > 0) v = extreme_of(carry, v);
        L::Store(out + base, v);
        carry = L::template Broadcast<kReverse ? 0 : kWidth - 1>(v);
        continue;
      }
    }
    Scanned s{L::Load(in + base), L::Lanes()};
    s = ScanStep<kMax, kReverse, 1>(s, index != nullptr);
    s = ScanStep<kMax, kReverse, 2>(s, index != nullptr);
    if constexpr (kWidth == 8) s = ScanStep<kMax, kReverse, 4>(s, index != nullptr);
    F v = s.value;
    const L::I winner = s.winner;
    const F keep_carry = b > 0 ? keeps_earlier(v, carry) : F{};
    v = L::Select(keep_carry, carry, v);
    L::Store(out + base, v);
    carry = L::template Broadcast<kReverse ? 0 : kWidth - 1>(v);
    if (index) {
      L::StoreIndices(index + base, winner, base, keep_carry, carry_index);
      carry_index = index[kReverse ? base : base + kWidth - 1];
    }
  }
  const int64_t done = blocks * kWidth;
  if (done == length) return;
  if (blocks == 0) {
    Line<float, kMax>(in, out, index, length, kReverse);
  } else {
    LineSteps<float, kMax>(in, out, index, length, kReverse, done, L::First(carry), carry_index);
  }
}
#endif

template <typename T, bool kMax>
void Lines(const ScanArgs<T>& a, int64_t begin, int64_t end) {
  const int64_t length = a.layout.length;
  for (int64_t line = begin; line < end; ++line) {
    const int64_t base = line * length;
    int64_t* index = a.indices ? a.indices + base : nullptr;
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>) {
      FloatLine<kMax>(a.input + base, a.values + base, index, length, a.reverse);
      continue;
    }
#elif defined(__AVX2__) || defined(__SSE2__)
    if constexpr (std::is_same_v<T, float>) {
      if (a.reverse) {
        PrefixLine<kMax, true>(a.input + base, a.values + base, index, length);
      } else {
        PrefixLine<kMax, false>(a.input + base, a.values + base, index, length);
      }
      continue;
    }
#endif
    Line<T, kMax>(a.input + base, a.values + base, index, length, a.reverse);
  }
}

template <typename T, bool kMax>
void Columns(const ScanArgs<T>& a, int64_t o, int64_t begin, int64_t end) {
  const Layout& layout = a.layout;
  const int64_t base = o * layout.length * layout.inner;
  const T* previous = nullptr;
  const int64_t* previous_index = nullptr;
  for (int64_t step = 0; step < layout.length; ++step) {
    const int64_t position = a.reverse ? layout.length - 1 - step : step;
    const int64_t row = base + position * layout.inner;
    const T* in = a.input + row;
    T* out = a.values + row;
    int64_t* index = a.indices ? a.indices + row : nullptr;
    if (previous == nullptr) {
      for (int64_t k = begin; k < end; ++k) out[k] = in[k];
      if (index) std::fill(index + begin, index + end, position);
    } else if (index) {
      for (int64_t k = begin; k < end; ++k) {
        const bool take = rule::Takes<T, kMax>(in[k], previous[k]);
        out[k] = rule::Pick(take, in[k], previous[k]);
        index[k] = take ? position : previous_index[k];
      }
    } else {
      for (int64_t k = begin; k < end; ++k)
        out[k] = rule::Pick(rule::Takes<T, kMax>(in[k], previous[k]), in[k], previous[k]);
    }
    previous = out;
    previous_index = index;
  }
}

}  // namespace

#define ORTOPS_SCAN_DEFINE(T)                                                                          \
  void ScanLines(const ScanArgs<T>& args, int64_t begin, int64_t end) {                                \
    args.max ? Lines<T, true>(args, begin, end) : Lines<T, false>(args, begin, end);                   \
  }                                                                                                    \
  void ScanColumns(const ScanArgs<T>& args, int64_t outer, int64_t begin, int64_t end) {               \
    args.max ? Columns<T, true>(args, outer, begin, end) : Columns<T, false>(args, outer, begin, end); \
  }
ORTOPS_SCAN_DEFINE(float)
ORTOPS_SCAN_DEFINE(double)
ORTOPS_SCAN_DEFINE(int64_t)
ORTOPS_SCAN_DEFINE(Half)
#undef ORTOPS_SCAN_DEFINE

}  // namespace ortops::scan::ORTOPS_ISA_NS
