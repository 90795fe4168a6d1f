// The depthwise Toeplitz forms' slow path for tiles whose sums are not all finite
// (common/toeplitz_guard.cuh): the direct tap loop.
#pragma once

#include <cstdint>

#include "common/cuda_math.cuh"
#include "common/toeplitz_guard.cuh"

namespace causalconv::detail {

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
