// Fused b2b_causal_conv1d forward, one launch.
//
// A block owns channel c of batch b and walks 2048-step time tiles [j0, j0+T).
// Per tile, with Hp = Kp-1 and Hm = Km-1, it stages in shared memory (fp32):
//   x row 3c   over [j0-Hp, j0+T)          (the gate projection x2 needs Hp steps back)
//   x rows 3c+1, 3c+2 over [j0-Hm-Hp, j0+T) (z over [j0-Hm, j0+T) needs Hp more)
// then computes z = x1 * v over [j0-Hm, j0+T) into shared memory, and per output
//   out[t] = x2[t] * (sum_k wm[k] z[t-(Hm-k)] + skip * z[t]).
// Times before 0 read zero, so p and z are zero there as the causal padding asks.
// Nothing but x and the weights is read from HBM, and only out is written.
#pragma once

#include "b2b/b2b_kernels.h"
#include "b2b/b2b_tiling.cuh"
#include "common/cuda_math.cuh"

namespace causalconv::detail {

template <typename T>
__global__ void __launch_bounds__(B2BForwardTile::kThreads, 4) b2b_forward_kernel(B2BForwardParams p, B2BTiling tiling) {
  using Tile = B2BForwardTile;
  constexpr int kT = Tile::kOutputs;
  float* smem = b2b_shared_floats();
  const int kp = int(p.proj_width), km = int(p.mixer_width);
  const int hp = kp - 1, hm = km - 1;
  float* wp_s = smem;                // [3][Kp]: projection rows 3c, 3c+1, 3c+2
  float* wm_s = wp_s + 3 * kp;       // [Km]
  float* x0_s = wm_s + km;           // x[3c]   at time j0 - Hp + i
  float* x1_s = x0_s + hp + kT;      // x[3c+1] at time j0 - Hm - Hp + i
  float* x2_s = x1_s + hm + hp + kT; // x[3c+2] at time j0 - Hm - Hp + i
  float* z_s = x2_s + hm + hp + kT;  // z        at time j0 - Hm + i

  const int64_t b = div_nonneg(int64_t(blockIdx.x), p.dim);
  const int64_t c = int64_t(blockIdx.x) - b * p.dim;
  const int64_t n = p.length;
  const T* x0 = static_cast<const T*>(p.x) + b * p.x_stride[0] + 3 * c * p.x_stride[1];
  const T* x1 = x0 + p.x_stride[1];
  const T* x2 = x1 + p.x_stride[1];
  T* out = static_cast<T*>(p.out) + b * p.out_stride[0] + c * p.out_stride[1];

  const T* wp = static_cast<const T*>(p.weight_proj);
  for (int i = threadIdx.x; i < 3 * kp; i += Tile::kThreads) {
    const int j = i / kp, k = i - j * kp;
    wp_s[i] = to_float(wp[(3 * c + j) * p.wp_stride[0] + k * p.wp_stride[1]]);
  }
  const T* wm = static_cast<const T*>(p.weight_mixer);
  for (int k = threadIdx.x; k < km; k += Tile::kThreads) wm_s[k] = to_float(wm[c * p.wm_stride[0] + k * p.wm_stride[1]]);
  const float skip = to_float(static_cast<const T*>(p.skip_bias)[c * p.skip_stride]);

#pragma unroll 1
  for (int64_t tile = blockIdx.y; tile < tiling.tiles; tile += gridDim.y) {
    const int64_t j0 = tile * kT;  // < n: tiles = ceil(n / T)
    __syncthreads();               // the previous tile is done with the buffers (and the weights are in)
    b2b_stage_row<Tile>(x0_s, x0, j0, n, hp, 0);
    b2b_stage_row<Tile>(x1_s, x1, j0, n, hm + hp, 0);
    b2b_stage_row<Tile>(x2_s, x2, j0, n, hm + hp, 0);
    __syncthreads();

    // z = x1 * v over [j0 - Hm, j0 + T): p at time j0 - Hm + i reads x at j0 - Hm + i - Hp + k.
    const float* w1 = wp_s + kp;
    const float* w2 = wp_s + 2 * kp;
    for (int i = threadIdx.x; i < hm + kT; i += Tile::kThreads) {
      float a = 0.0f, v = 0.0f;
      for (int k = 0; k < kp; ++k) {
        a = fmaf(w1[k], x1_s[i + k], a);
        v = fmaf(w2[k], x2_s[i + k], v);
      }
      z_s[i] = a * v;
    }
    __syncthreads();

    // h at tile position o = threadIdx.x + e * kThreads: z_s[o + k] is z at t - (Hm - k).
    float h[Tile::kPerThread];
#pragma unroll
    for (int e = 0; e < Tile::kPerThread; ++e) h[e] = skip * z_s[hm + threadIdx.x + e * Tile::kThreads];
#pragma unroll 1
    for (int k = 0; k < km; ++k) {
      const float wk = wm_s[k];
      const float* zk = z_s + k + threadIdx.x;
#pragma unroll
      for (int e = 0; e < Tile::kPerThread; ++e) h[e] = fmaf(wk, zk[e * Tile::kThreads], h[e]);
    }
    // The gate x2 = p[3c]: x0_s[o + k] is x[3c] at t - (Hp - k).
    float gate[Tile::kPerThread] = {};
#pragma unroll 1
    for (int k = 0; k < kp; ++k) {
      const float wk = wp_s[k];
      const float* xk = x0_s + k + threadIdx.x;
#pragma unroll
      for (int e = 0; e < Tile::kPerThread; ++e) gate[e] = fmaf(wk, xk[e * Tile::kThreads], gate[e]);
    }
#pragma unroll
    for (int e = 0; e < Tile::kPerThread; ++e) h[e] *= gate[e];
    b2b_store_tile<Tile>(out, j0, n, h);
  }
}

}  // namespace causalconv::detail
