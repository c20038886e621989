// unroll<N>(f): f(std::integral_constant<int, 0>{}), ..., f(integral_constant<N - 1>)
// expanded by the front end. Kernels index their register arrays of accumulators
// with these constants: GCC 12 keeps a small array of vectors in registers only when
// every index is a constant before its early passes run. A `for` loop over the
// array that the optimizer unrolls later leaves the array on the stack, and loops
// around it then store every accumulator once per iteration (seen in the decode
// attention kernels: 8 to 16 stores per 8 to 16 FMAs).
#pragma once

#include <type_traits>
#include <utility>

namespace ember::cpu {

template <int N, class F>
[[gnu::always_inline]] inline void unroll(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) {
    (f(std::integral_constant<int, I>{}), ...);
  }(std::make_integer_sequence<int, N>{});
}

}  // namespace ember::cpu
