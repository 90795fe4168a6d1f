// The Toeplitz forms' guard for values that are not finite (the depthwise and b2b tensor-core
// kernels).
//
// A Toeplitz (or Hankel) block multiplies every input of its chunks, also those at lags outside the
// filter whose weight is zero. An infinity or NaN there gives 0 x inf = NaN, or 0 x NaN = NaN, in
// outputs that do not depend on it: outputs up to a chunk before it in time (not causal), and
// outputs past the filter's reach. A right-padded batch with garbage in its padding would poison the
// last valid steps. Without such an input every product is finite. So each form checks its tile's
// fp32 sums. When all are finite nothing of the kind happened. Otherwise the block recomputes the
// tile's outputs by direct loops from global memory (fp32 FMAs in tap order, as the CUDA-core
// kernels), which propagate infinities and NaN exactly as IEEE sums of the contract's terms do.
// That is slow, but it runs only for tiles with such values (or with sums that overflow).
#pragma once

#include <cstdint>

#include "common/cuda_math.cuh"

namespace causalconv::detail {

// Off: the Toeplitz forms keep their measured instruction streams (and the bug above). Written in
// session 29 without a GPU; the emulated tests run the guarded forms on inputs with NaN or infinities
// (tests/cpp/toeplitz_guard_choice.h), the unguarded ones otherwise. On once the H200 has run the
// suite on it and timed it against the unguarded forms (docs/performance.md).
constexpr bool kToeplitzNonFiniteGuard = false;

// True when v is infinite or NaN.
__device__ __forceinline__ bool nonfinite(float v) { return !(fabsf(v) <= 3.402823466e38f); }

// True when some accumulator is infinite or NaN.
template <int kCount>
__device__ __forceinline__ bool any_nonfinite(const float* acc) {
  bool any = false;
#pragma unroll
  for (int i = 0; i < kCount; ++i) any = any || nonfinite(acc[i]);
  return any;
}

// The barrier after a tile's outputs went to shared memory (__syncthreads); with the guard, true
// (for the whole block) when some thread voted (any_nonfinite of its sums).
template <bool kGuard>
__device__ __forceinline__ bool guarded_tile_barrier(bool vote) {
  if constexpr (kGuard) {
    return __syncthreads_or(vote) != 0;
  } else {
    __syncthreads();
    return false;
  }
}

}  // namespace causalconv::detail
