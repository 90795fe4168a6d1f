// The direct tap loop of a depthwise output: the direct kernel's, and the Toeplitz forms' slow path
// for tiles whose sums are not all finite (common/toeplitz_guard.cuh).
#pragma once

#include <cstdint>

#include "common/cuda_math.cuh"
#include "common/toeplitz_guard.cuh"

namespace causalconv::detail {

// Output t of one row by the direct tap loop: bias + sum_k w[k] x[t - (K-1-k) d] (terms before
// the row are zero), through silu when asked; x: the row, x_step: its time stride, w: the
// channel's taps. The direct kernel's output (depthwise_forward.cu) and the Toeplitz guard's.
template <typename T>
__device__ __forceinline__ float depthwise_direct_output(const T* x, int64_t x_step, const T* w, int64_t w_stride,
                                                         int64_t width, int64_t dilation, int64_t t, float bias,
                                                         bool apply_silu) {
  float acc = bias;
  // Tap k reads x[t - (K-1-k) d]; taps before the sequence start read the zero padding.
  const int64_t reach = div_nonneg(t, dilation);
#pragma unroll 1  // (unrolled, the guard's out-of-line slow path needed more registers than the fast path)
  for (int64_t k = width - 1 - (reach < width - 1 ? reach : width - 1); k < width; ++k)
    acc = fmaf(to_float(w[k * w_stride]), to_float(x[(t - (width - 1 - k) * dilation) * x_step]), acc);
  return apply_silu ? silu<T>(acc) : acc;
}

// The guard's slow path: out(i, value) for the outputs i < kOutputs of the tile at j0 (those
// inside the row of unit time stride, dilation 1: j0 is negative for a shifted walk's first tile),
// by the block's kThreads threads. Not inlined: inlined, its registers were the fast path's too
// (fp32 tensor-core form: 98 -> 127 registers; out of line, 85).
template <int kOutputs, int kThreads, typename T, typename Out>
__device__ __noinline__ void depthwise_direct_tile(const T* x, const T* w, int64_t w_stride, int width, int64_t j0,
                                                      int64_t n, float bias, bool apply_silu, Out out) {
#pragma unroll 1
  for (int i = int(threadIdx.x); i < kOutputs && j0 + i < n; i += kThreads)
    if (j0 + i >= 0) out(i, depthwise_direct_output(x, 1, w, w_stride, width, 1, j0 + i, bias, apply_silu));
}

// The depthwise Toeplitz forwards' walk tail (common/toeplitz_mma.cuh, toeplitz_walk_length): the
// outputs of a shifted walk past its `tiles` whole tiles of tile_outputs steps, row steps
// [tiles * tile_outputs - lead, length) (at most 7), by the block that walked tile tiles - 1 (the
// tile loop's stride: gridDim.y), after its stores. Output o takes threads 16 o .. 16 o + 15; thread
// `part` sums taps part, part + 16, ... in order (the loads unrolled, so that they are in flight
// together), then a fixed xor tree over the 16 lanes: the same bits at every run. dilation 1, unit
// time stride. Not inlined: inlined, it raised the tile loops' registers (mma.sync 54 -> 69, wgmma
// 114 -> 120, tf32 114 -> 128 with a spill; sm_90a).
template <int kThreads, typename T>
__device__ __noinline__ void depthwise_walk_tail(const T* x, T* y, const T* w, int64_t w_stride, int width,
                                                    int64_t tiles, int64_t tile_outputs, int lead, int64_t length,
                                                    float bias, bool apply_silu) {
  static_assert(kThreads >= 16 * 8, "an output per 16 threads, up to 8 outputs");
  const int64_t first = tiles * tile_outputs - lead;
  if (tiles <= 0 || first >= length || (tiles - 1) % int64_t(gridDim.y) != int64_t(blockIdx.y)) return;
  const int o = int(threadIdx.x) >> 4, part = int(threadIdx.x) & 15;
  const int64_t t = first + o;
  float acc = 0.0f;
  if (o < 8 && t < length) {
#pragma unroll 4
    for (int k = part; k < width; k += 16) {
      const int64_t src = t - (width - 1 - k);
      if (src >= 0) acc = fmaf(to_float(w[k * w_stride]), to_float(x[src]), acc);
    }
  }
#pragma unroll
  for (int offset = 8; offset >= 1; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  if (o < 8 && part == 0 && t < length) {
    const float v = acc + bias;
    y[t] = from_float<T>(apply_silu ? silu<T>(v) : v);
  }
}

}  // namespace causalconv::detail
