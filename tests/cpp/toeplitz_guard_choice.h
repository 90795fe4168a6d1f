// Which guard instantiation (common/toeplitz_guard.cuh) an emulated test runs: the one the library
// builds (kToeplitzNonFiniteGuard), except for cases with NaN or infinities in the inputs, which need
// the guard. (Always the guarded one hid kernels that read the NaN the tests put between rows: the
// guard recomputed those tiles from global memory.)
#pragma once

#include <type_traits>

#include "common/toeplitz_guard.cuh"

namespace causalconv::test {

// Calls f(std::bool_constant<kGuard>{}).
template <typename F>
void with_guard_for(bool nonfinite_inputs, F&& f) {
  if (nonfinite_inputs || detail::kToeplitzNonFiniteGuard)
    f(std::true_type{});
  else
    f(std::false_type{});
}

}  // namespace causalconv::test
