// A score threshold, optionally on sigmoid(score), as a single comparison on the raw score.
//
// Detection heads often emit logits and are thresholded on their sigmoid. Computing the
// sigmoid of every score (N boxes x C classes, most of them far below the threshold) costs
// an exp each; testing the logit against the logit of the threshold is cheap but, done in
// floating point, can disagree with the sigmoid test near the threshold and at 0 and 1 (a
// float sigmoid rounds to exactly 1 from about x = 17 on). ScoreCutoff finds, once, the
// smallest raw score whose computed Sigmoid passes: since Sigmoid never decreases, a score
// passes exactly when it is >= that cutoff, and the decision is the one computing Sigmoid
// and comparing would make, for every value of the element type.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/host_device.h"
#include "math/libm_exp.h"

namespace ortops {

// The logistic function as the score kernels compute it, in A (float or double).
template <typename A>
ORTOPS_HD inline A Sigmoid(A x) {
  return A(1) / (A(1) + LibmExp(-x));
}

namespace score_cutoff_detail {

template <typename A>
using Bits = std::conditional_t<sizeof(A) == 4, uint32_t, uint64_t>;

// An order-preserving map from the non-NaN values of A to unsigned integers (-0 just below +0).
template <typename A>
Bits<A> Key(A value) {
  constexpr Bits<A> kSign = Bits<A>(1) << (8 * sizeof(A) - 1);
  const Bits<A> bits = std::bit_cast<Bits<A>>(value);
  return (bits & kSign) ? ~bits : bits | kSign;
}

template <typename A>
A FromKey(Bits<A> key) {
  constexpr Bits<A> kSign = Bits<A>(1) << (8 * sizeof(A) - 1);
  return std::bit_cast<A>((key & kSign) ? key & ~kSign : ~key);
}

}  // namespace score_cutoff_detail

// The cutoff c for the test "score passes": `(sigmoid ? Sigmoid(x) : x) > threshold` (or
// `>=` when `strict` is false), compared in double. A score x (of type A) then passes exactly
// when `x >= c`: NaN never passes, and when no value passes c is NaN, which nothing reaches.
// `threshold` must not be NaN.
template <typename A>
A ScoreCutoff(double threshold, bool sigmoid, bool strict) {
  using namespace score_cutoff_detail;
  const auto passes = [&](A x) {
    const double score = static_cast<double>(sigmoid ? Sigmoid(x) : x);
    return strict ? score > threshold : score >= threshold;
  };
  constexpr A kInf = std::numeric_limits<A>::infinity();
  if (passes(-kInf)) return -kInf;
  if (!passes(kInf)) return std::numeric_limits<A>::quiet_NaN();
  // The predicate never turns false again once true: bisect for its first true key.
  Bits<A> low = Key(-kInf), high = Key(kInf);  // passes(low) is false, passes(high) true
  while (high - low > 1) {
    const Bits<A> middle = low + (high - low) / 2;
    (passes(FromKey<A>(middle)) ? high : low) = middle;
  }
  return FromKey<A>(high);
}

}  // namespace ortops
