// The b2b tensor-core forwards' slow path for tiles whose sums are not all finite
// (common/toeplitz_guard.cuh): the outputs by direct loops from global memory, every value in fp32.
#pragma once

#include <cstdint>

#include "b2b/b2b_kernels.h"
#include "common/cuda_math.cuh"
#include "common/toeplitz_guard.cuh"

namespace causalconv::detail {

// One channel's view for the slow path: x_c is row 3c of x (rows 3c + j x_row_stride apart), wp_c
// row 3c of the projection taps (rows wp_row_stride apart), wm_c the channel's mixer taps.
template <typename T>
struct B2BDirectChannel {
  const T* x_c;
  const T* wp_c;
  const T* wm_c;
  int64_t x_row_stride, wp_row_stride, wp_tap_stride, wm_tap_stride, length;
  int kp, km;
  float skip;

  __device__ __forceinline__ B2BDirectChannel(const B2BForwardParams& p, const T* x_row3c, int64_t c)
      : x_c(x_row3c),
        wp_c(static_cast<const T*>(p.weight_proj) + 3 * c * p.wp_stride[0]),
        wm_c(static_cast<const T*>(p.weight_mixer) + c * p.wm_stride[0]),
        x_row_stride(p.x_stride[1]),
        wp_row_stride(p.wp_stride[0]),
        wp_tap_stride(p.wp_stride[1]),
        wm_tap_stride(p.wm_stride[1]),
        length(p.length),
        kp(int(p.proj_width)),
        km(int(p.mixer_width)),
        skip(to_float(static_cast<const T*>(p.skip_bias)[c * p.skip_stride])) {}

  // Projection j at step t >= 0 (0: the gate x2, 1: x1, 2: v), terms before the row zero.
  __device__ __forceinline__ float projection(int j, int64_t t) const {
    const T* const row = x_c + j * x_row_stride;
    const T* const w = wp_c + j * wp_row_stride;
    float acc = 0.0f;
#pragma unroll 1
    for (int k = t >= kp - 1 ? 0 : int(kp - 1 - t); k < kp; ++k)
      acc = fmaf(to_float(w[int64_t(k) * wp_tap_stride]), to_float(row[t - (kp - 1 - k)]), acc);
    return acc;
  }

  // out at step t: x2(t) (sum_k wm[k] z(t - (Km-1-k)) + skip z(t)), z = x1 v.
  __device__ __forceinline__ float output(int64_t t) const {
    auto z = [&](int64_t s) { return projection(1, s) * projection(2, s); };
    float h = 0.0f;
#pragma unroll 1
    for (int k = t >= km - 1 ? 0 : int(km - 1 - t); k < km; ++k)
      h = fmaf(to_float(wm_c[int64_t(k) * wm_tap_stride]), z(t - (km - 1 - k)), h);
    return projection(0, t) * fmaf(skip, z(t), h);
  }
};

// out(i, value) for the outputs i < kOutputs of the tile at j0 (those inside the row), by the
// block's kThreads threads. Not inlined: its registers stay out of the fast path's.
template <int kOutputs, int kThreads, typename T, typename Out>
__device__ __noinline__ void b2b_direct_tile(const B2BDirectChannel<T> ch, int64_t j0, Out out) {
#pragma unroll 1
  for (int i = int(threadIdx.x); i < kOutputs && j0 + i < ch.length; i += kThreads) out(i, ch.output(j0 + i));
}

}  // namespace causalconv::detail
