// The b2b fp32 tensor-core forward's projections on the CUDA cores (b2b_forward_tf32_kernel.cuh):
// the three rows' taps staged in shared memory, and a projection's value over a staged x row.
#pragma once

#include <cstdint>

#include "b2b/b2b_kernels.h"
#include "common/cuda_math.cuh"

namespace causalconv::detail {

// wp_s[32 j + k] = tap k of projection row 3c + j (zero from Kp on), by the block's `threads`.
__device__ __forceinline__ void b2b_stage_projection_taps(float* wp_s, const B2BForwardParams& p, int64_t c,
                                                          int threads) {
  for (int i = int(threadIdx.x); i < 3 * 32; i += threads) {
    const int j = i >> 5, k = i & 31;
    wp_s[i] = k < int(p.proj_width)
                  ? static_cast<const float*>(p.weight_proj)[(3 * c + j) * p.wp_stride[0] + k * p.wp_stride[1]]
                  : 0.0f;
  }
}

// Projection value at local step s of a staged row (plain fp32): sum_k wp[k] x[s - (Kp-1-k)].
__device__ __forceinline__ float b2b_staged_projection(const float* x_s, const float* wp, int kp, int s) {
  float acc = 0.0f;
  for (int k = 0; k < kp; ++k) acc = fmaf(wp[k], x_s[s - (kp - 1 - k)], acc);
  return acc;
}

}  // namespace causalconv::detail
