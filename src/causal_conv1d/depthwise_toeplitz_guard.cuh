// The depthwise Toeplitz forms' guard for values that are not finite.
//
// A Toeplitz block multiplies every input of its chunks, also those at lags outside [0, K) whose
// weight is zero. An infinity or NaN there gives 0 x inf = NaN, or 0 x NaN = NaN, in outputs that do
// not depend on it: outputs up to a chunk before it in time (not causal), and outputs past the
// filter's reach. A right-padded batch with garbage in its padding would poison the last valid
// steps. Without such an input every product is finite. So each form checks its tile's fp32
// accumulators before bias and silu. When all are finite nothing of the kind happened. Otherwise
// the block recomputes the tile's outputs by the direct tap loop from global memory (fp32 FMAs in
// tap order, as the CUDA-core kernels), which propagates infinities and NaN exactly as IEEE sums of
// the contract's terms do. That is slow, but it runs only for tiles with such values (or with
// sums that overflow).
#pragma once

#include <cstdint>

#include "common/cuda_math.cuh"

namespace causalconv::detail {

// Off: the Toeplitz forms keep their measured instruction streams (and the bug above). Written in
// session 29 without a GPU; the emulated tests run the guarded forms. On once the H200 has run the
// suite on it and timed it against the unguarded forms (docs/performance.md).
constexpr bool kToeplitzNonFiniteGuard = false;

// True when some accumulator is infinite or NaN.
template <int kCount>
__device__ __forceinline__ bool any_nonfinite(const float* acc) {
  bool finite = true;
#pragma unroll
  for (int i = 0; i < kCount; ++i) finite = finite && fabsf(acc[i]) <= 3.402823466e38f;  // false for NaN
  return !finite;
}

// The barrier after a tile's outputs went to shared memory (__syncthreads); with the guard, true
// (for the whole block) when some thread voted (any_nonfinite of its accumulators).
template <bool kGuard>
__device__ __forceinline__ bool guarded_tile_barrier(bool vote) {
  if constexpr (kGuard) {
    return __syncthreads_or(vote) != 0;
  } else {
    __syncthreads();
    return false;
  }
}

// Output t of one row by the direct tap loop: bias + sum_k w[k] x[t - (K-1-k)] (terms before the
// row are zero), through silu when asked; x: the row (unit time stride), w: the channel's taps.
template <typename T>
__device__ __forceinline__ float depthwise_direct_output(const T* x, const T* w, int64_t w_stride, int width,
                                                         int64_t t, float bias, bool apply_silu) {
  float acc = bias;
  const int first_tap = t >= width - 1 ? 0 : int(width - 1 - t);
#pragma unroll 1  // the slow path: few registers, so that the fast path keeps its allocation
  for (int k = first_tap; k < width; ++k)
    acc = fmaf(to_float(w[int64_t(k) * w_stride]), to_float(x[t - (width - 1 - k)]), acc);
  return apply_silu ? silu<T>(acc) : acc;
}

// The guard's slow path: out(i, value) for the outputs i < kOutputs of the tile at j0 (those
// inside the row), by the block's kThreads threads. Not inlined: inlined, its registers were the
// fast path's too (fp32 tensor-core form: 98 -> 127 registers; out of line, 85).
template <int kOutputs, int kThreads, typename T, typename Out>
__device__ __noinline__ void depthwise_direct_tile(const T* x, const T* w, int64_t w_stride, int width, int64_t j0,
                                                      int64_t n, float bias, bool apply_silu, Out out) {
#pragma unroll 1
  for (int i = int(threadIdx.x); i < kOutputs && j0 + i < n; i += kThreads)
    out(i, depthwise_direct_output(x, w, w_stride, width, j0 + i, bias, apply_silu));
}

}  // namespace causalconv::detail
