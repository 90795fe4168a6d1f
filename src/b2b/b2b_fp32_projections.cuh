// The b2b fp32 tensor-core forwards' projections on the CUDA cores (b2b_forward_tf32_kernel.cuh,
// b2b_forward_wgmma_tf32_kernel.cuh): the three rows' taps staged in shared memory, a projection's
// value over a staged x row, and z's tf32 parts and the gate by 16-byte units.
#pragma once

#include <cstdint>

#include "b2b/b2b_kernels.h"
#include "common/cuda_math.cuh"
#include "common/toeplitz_tf32.cuh"

namespace causalconv::detail {

// wp_s[32 j + k] = tap k of projection row 3c + j (zero from Kp on), by the block's `threads`
// (Params: B2BForwardParams or B2BBackwardParams).
template <typename Params>
__device__ __forceinline__ void b2b_stage_projection_taps(float* wp_s, const Params& p, int64_t c, int threads) {
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

// z and the gate by 16-byte units, Kp <= kB2BUnitProjectionTaps (the kernels' kUnitProjections): the
// thread's z units u < z_units (steps 4u .. 4u + 3 of the z range, at local steps s = 4u + kReach ..
// of the staged plain fp32 rows) go split to z_unit_offset(u) of z_hi_s and z_lo_s, and where 4u >=
// out_first (output steps i = 4u - out_first ..) the gate goes to gate_s + gate_offset(i) (4 words,
// 16-byte aligned). The taps sit in registers: w[j][k] multiplies x_j[s - 3 + k]; the taps before
// 4 - Kp are skipped, not zero (0 * inf would put NaN where the projection has no term). Same
// products in the same order as b2b_staged_projection. A step-by-step tap loop over shared memory
// took ~115 sm_90a instructions a z step at Kp 3; this ~25. A warp's units are consecutive: its
// 16-byte loads from the rows are conflict-free.
constexpr int kB2BUnitProjectionTaps = 4;

// The three rows' taps in registers for b2b_tf32_project_unit: w[j][k] multiplies x_j[s - 3 + k]
// (taps before 4 - Kp are never read).
__device__ __forceinline__ void b2b_unit_projection_taps(const float* wp_s, int kp,
                                                         float (&w)[3][kB2BUnitProjectionTaps]) {
  constexpr int kTaps = kB2BUnitProjectionTaps;
#pragma unroll
  for (int j = 0; j < 3; ++j)
#pragma unroll
    for (int k = 0; k < kTaps; ++k) w[j][k] = wp_s[32 * j + (k >= kTaps - kp ? k - (kTaps - kp) : 0)];
}

// xs[i] = x_s[s - 4 + i] (s a multiple of 4, x_s 16-byte aligned): the window a unit's projection reads.
__device__ __forceinline__ void b2b_unit_window(const float* x_s, int s, float (&xs)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(x_s + s - 4), b = *reinterpret_cast<const float4*>(x_s + s);
  xs[0] = a.x, xs[1] = a.y, xs[2] = a.z, xs[3] = a.w, xs[4] = b.x, xs[5] = b.y, xs[6] = b.z, xs[7] = b.w;
}

// A row's projection at steps s .. s + 3 from its window xs (b2b_unit_window).
__device__ __forceinline__ void b2b_tf32_project_unit(const float (&xs)[8], const float (&wj)[kB2BUnitProjectionTaps],
                                                      int kp, float (&out)[4]) {
  constexpr int kTaps = kB2BUnitProjectionTaps;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < kTaps; ++k)
      if (k >= kTaps - kp) acc = fmaf(wj[k], xs[i + 1 + k], acc);
    out[i] = acc;
  }
}

// A staged row's projection at steps s .. s + 3 (its window, then b2b_tf32_project_unit).
__device__ __forceinline__ void b2b_tf32_project_staged_unit(const float* x_s, int s,
                                                             const float (&wj)[kB2BUnitProjectionTaps], int kp,
                                                             float (&out)[4]) {
  float xs[8];
  b2b_unit_window(x_s, s, xs);
  b2b_tf32_project_unit(xs, wj, kp, out);
}

// z = x1 v at steps s .. s + 3 of the staged rows x1_s, v_s, split into its tf32 parts at byte
// `offset` of z_hi_s and z_lo_s (w: b2b_unit_projection_taps).
__device__ __forceinline__ void b2b_tf32_store_z_unit(unsigned char* z_hi_s, unsigned char* z_lo_s, int offset,
                                                      const float* x1_s, const float* v_s,
                                                      const float (&w)[3][kB2BUnitProjectionTaps], int kp, int s) {
  float p1[4], p2[4];
  b2b_tf32_project_staged_unit(x1_s, s, w[1], kp, p1);
  b2b_tf32_project_staged_unit(v_s, s, w[2], kp, p2);
  uint4 hi, lo;
  tf32_split(p1[0] * p2[0], hi.x, lo.x);
  tf32_split(p1[1] * p2[1], hi.y, lo.y);
  tf32_split(p1[2] * p2[2], hi.z, lo.z);
  tf32_split(p1[3] * p2[3], hi.w, lo.w);
  *reinterpret_cast<uint4*>(z_hi_s + offset) = hi;
  *reinterpret_cast<uint4*>(z_lo_s + offset) = lo;
}

template <int kReach, typename ZUnitOffset, typename GateOffset>
__device__ __forceinline__ void b2b_tf32_unit_projections(unsigned char* z_hi_s, unsigned char* z_lo_s,
                                                          float* gate_s, const float* x0_s, const float* x1_s,
                                                          const float* v_s, const float* wp_s, int kp, int z_units,
                                                          int out_first, int threads, ZUnitOffset z_unit_offset,
                                                          GateOffset gate_offset) {
  static_assert(kReach >= 4 && kReach % 4 == 0, "the unit before the z range is staged");
  float w[3][kB2BUnitProjectionTaps];
  b2b_unit_projection_taps(wp_s, kp, w);
#pragma unroll 1
  for (int u = int(threadIdx.x); u < z_units; u += threads) {
    const int s = 4 * u + kReach;
    b2b_tf32_store_z_unit(z_hi_s, z_lo_s, z_unit_offset(u), x1_s, v_s, w, kp, s);
    const int i = 4 * u - out_first;
    if (i >= 0) {
      float g[4];
      b2b_tf32_project_staged_unit(x0_s, s, w[0], kp, g);
      *reinterpret_cast<float4*>(gate_s + gate_offset(i)) = make_float4(g[0], g[1], g[2], g[3]);
    }
  }
}

}  // namespace causalconv::detail
