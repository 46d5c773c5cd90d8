// Float16 inputs read in their compute type: kernels whose inner loops read each element
// many times (sampling taps) convert an input once, in parallel, rather than per read.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/half.h"
#include "core/half_convert.h"
#include "core/kernel_io.h"

namespace ortops {

// `tensor`'s elements as ComputeType<T>: its own memory when that is T (float, double),
// else a converted copy in `storage`, which must outlive the returned pointer.
template <typename T>
const ComputeType<T>* Upcast(const KernelIO& io, const ConstTensor<T>& tensor, Scratch<ComputeType<T>>& storage) {
  using A = ComputeType<T>;
  if constexpr (std::is_same_v<T, A>) {
    return tensor.data;
  } else {
    static_assert(std::is_same_v<T, Half>, "the only element type computed in another type is float16");
    const auto count = static_cast<size_t>(tensor.size());
    storage = io.Allocate<A>(count);
    constexpr size_t kBlock = size_t{1} << 16;
    A* out = storage.data();
    io.ParallelFor((count + kBlock - 1) / kBlock, [&](size_t block) {
      const size_t begin = block * kBlock, end = std::min(count, begin + kBlock);
      WidenHalves(tensor.data + begin, static_cast<int64_t>(end - begin), out + begin);
    });
    return out;
  }
}

}  // namespace ortops
