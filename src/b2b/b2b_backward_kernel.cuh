// Fused b2b_causal_conv1d backward: one kernel recomputes the forward intermediates
// of a tile in shared memory and writes dx plus per-block fp32 partials of the
// weight gradients; a second kernel sums the partials of each channel in a fixed
// order, so dweight_proj, dweight_mixer and dskip_bias are bitwise deterministic.
//
// With g = dout, Hp = Kp-1, Hm = Km-1, for channel c, batch b and the tile [j0, j0+T):
//   dh  = g * x2                     needed over [j0, j0+T+Hp+Hm)   (x2 = p[3c])
//   dz  = sum_k wm[k] dh[t+Hm-k] + skip * dh[t]          over [j0, j0+T+Hp)
//   dp0 = g * h,  dp1 = dz * v,  dp2 = dz * x1            over [j0, j0+T+Hp)
//   dx[3c+j][t] = sum_k wp[3c+j][k] dp_j[t+Hp-k]          over the tile
//   dwp[3c+j][k] += sum_t dp_j[t] x[3c+j][t-(Hp-k)],  dwm[c][k] += sum_t dh[t] z[t-(Hm-k)],
//   dskip[c] += sum_t dh[t] z[t]                           over the tile
// h over [j0, j0+T+Hp) needs z over [j0-Hm, j0+T+Hp), which needs x[3c+1], x[3c+2] over
// [j0-Hm-Hp, j0+T+Hp); x2 over [j0, j0+T+Hp+Hm) needs x[3c] over [j0-Hp, j0+T+Hp+Hm).
// Inputs past L are staged as zero, so g, dh and every dp are zero there and the
// tile sums need no masking.
#pragma once

#include "b2b/b2b_kernels.h"
#include "b2b/b2b_tiling.cuh"
#include "common/cuda_math.cuh"

namespace causalconv::detail {

using B2BBwdTile = B2BBackwardTile;
constexpr int kB2BBackwardWarps = B2BBwdTile::kThreads / 32;

// The tile's sum over positions o of a[o] * b[o + shift] for this thread's
// interleaved positions, then a fixed shuffle tree; lane 0 keeps the warp's sum.
__device__ __forceinline__ float b2b_tile_dot(const float* a, const float* b) {
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < B2BBwdTile::kPerThread; ++e) {
    const int o = threadIdx.x + e * B2BBwdTile::kThreads;
    s = fmaf(a[o], b[o], s);
  }
  return b2b_warp_sum(s);
}

template <typename T>
__global__ void __launch_bounds__(B2BBwdTile::kThreads, 4)
    b2b_backward_kernel(B2BBackwardParams p, B2BTiling tiling, float* partials) {
  float* smem = b2b_shared_floats();
  constexpr int kT = B2BBwdTile::kOutputs;
  const int kp = int(p.proj_width), km = int(p.mixer_width);
  const int hp = kp - 1, hm = km - 1;
  const int slots = 3 * kp + km + 1;  // dwp rows 3c..3c+2, dwm, dskip
  const int ext = kT + hp;            // the dp range: [j0, j0 + T + Hp)
  const int xlen = kT + 2 * hp + hm;  // each staged x row
  const int glen = kT + hp + hm;      // the dh range: [j0, j0 + T + Hp + Hm)
  float* wp_s = smem;                 // [3][Kp]
  float* wm_s = wp_s + 3 * kp;        // [Km]
  float* x0_s = wm_s + km;            // x[3c]   at time j0 - Hp + i
  float* x1_s = x0_s + xlen;          // x[3c+1] at time j0 - Hm - Hp + i
  float* x2_s = x1_s + xlen;          // x[3c+2] at time j0 - Hm - Hp + i
  float* g_s = x2_s + xlen;           // dout, then dh, at time j0 + i
  float* z_s = g_s + glen;            // z at time j0 - Hm + i
  float* p1_s = z_s + glen;           // x1, then dp1, at time j0 + i
  float* p2_s = p1_s + ext;           // v, then dp2
  float* dp0_s = p2_s + ext;          // dp0 = dout * h
  float* red_s = dp0_s + ext;         // [kB2BBackwardWarps][slots]
  float* acc_s = red_s + kB2BBackwardWarps * slots;  // [slots]: this block's sums over its tiles
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  const int64_t b = div_nonneg(int64_t(blockIdx.x), p.dim);
  const int64_t c = int64_t(blockIdx.x) - b * p.dim;
  const int64_t n = p.length;
  const T* x0 = static_cast<const T*>(p.x) + b * p.x_stride[0] + 3 * c * p.x_stride[1];
  const T* x1 = x0 + p.x_stride[1];
  const T* x2 = x1 + p.x_stride[1];
  const T* g = static_cast<const T*>(p.dout) + b * p.dout_stride[0] + c * p.dout_stride[1];
  T* dx0 = static_cast<T*>(p.dx) + b * p.dx_stride[0] + 3 * c * p.dx_stride[1];

  const T* wp = static_cast<const T*>(p.weight_proj);
  for (int i = threadIdx.x; i < 3 * kp; i += B2BBwdTile::kThreads) {
    const int j = i / kp, k = i - j * kp;
    wp_s[i] = to_float(wp[(3 * c + j) * p.wp_stride[0] + k * p.wp_stride[1]]);
  }
  const T* wm = static_cast<const T*>(p.weight_mixer);
  for (int k = threadIdx.x; k < km; k += B2BBwdTile::kThreads) wm_s[k] = to_float(wm[c * p.wm_stride[0] + k * p.wm_stride[1]]);
  for (int s = threadIdx.x; s < slots; s += B2BBwdTile::kThreads) acc_s[s] = 0.0f;  // read and written by thread s only
  const float skip = to_float(static_cast<const T*>(p.skip_bias)[c * p.skip_stride]);

#pragma unroll 1
  for (int64_t tile = blockIdx.y; tile < tiling.tiles; tile += gridDim.y) {
    const int64_t j0 = tile * kT;  // < n
    __syncthreads();               // the previous tile is done with the buffers (and the weights are in)
    b2b_stage_row<B2BBwdTile>(x0_s, x0, j0, n, hp, hp + hm);
    b2b_stage_row<B2BBwdTile>(x1_s, x1, j0, n, hm + hp, hp);
    b2b_stage_row<B2BBwdTile>(x2_s, x2, j0, n, hm + hp, hp);
    b2b_stage_row<B2BBwdTile>(g_s, g, j0, n, 0, hp + hm);
    __syncthreads();

    // 1. x1, v and z = x1 * v over [j0 - Hm, j0 + T + Hp); keep x1 and v from j0 on.
    {
      const float* w1 = wp_s + kp;
      const float* w2 = wp_s + 2 * kp;
      for (int i = threadIdx.x; i < hm + ext; i += B2BBwdTile::kThreads) {
        float a = 0.0f, v = 0.0f;
        for (int k = 0; k < kp; ++k) {
          a = fmaf(w1[k], x1_s[i + k], a);
          v = fmaf(w2[k], x2_s[i + k], v);
        }
        z_s[i] = a * v;
        if (i >= hm) {
          p1_s[i - hm] = a;
          p2_s[i - hm] = v;
        }
      }
    }
    __syncthreads();

    // 2. Over [j0, j0 + T + Hp + Hm): dh = dout * x2 (in place of dout); over
    //    [j0, j0 + T + Hp) also h and dp0 = dout * h.
    for (int i = threadIdx.x; i < glen; i += B2BBwdTile::kThreads) {
      float gate = 0.0f;
      for (int k = 0; k < kp; ++k) gate = fmaf(wp_s[k], x0_s[i + k], gate);
      const float gi = g_s[i];
      if (i < ext) {
        float h = skip * z_s[i + hm];
        for (int k = 0; k < km; ++k) h = fmaf(wm_s[k], z_s[i + k], h);
        dp0_s[i] = gi * h;
      }
      g_s[i] = gi * gate;
    }
    __syncthreads();

    // 3. dz over [j0, j0 + T + Hp); dp1 = dz * v and dp2 = dz * x1 in place of x1 and v.
    for (int i = threadIdx.x; i < ext; i += B2BBwdTile::kThreads) {
      float dz = skip * g_s[i];
      for (int k = 0; k < km; ++k) dz = fmaf(wm_s[k], g_s[i + hm - k], dz);
      const float a = p1_s[i], v = p2_s[i];
      p1_s[i] = dz * v;
      p2_s[i] = dz * a;
    }
    __syncthreads();

    // 4. dx rows 3c, 3c+1, 3c+2 over the tile: dp_j[o + Hp - k] is dp_j at t + (Hp - k).
#pragma unroll 1
    for (int j = 0; j < 3; ++j) {
      const float* dp = j == 0 ? dp0_s : (j == 1 ? p1_s : p2_s);
      const float* w = wp_s + j * kp;
      float acc[B2BBwdTile::kPerThread] = {};
#pragma unroll 1
      for (int k = 0; k < kp; ++k) {
        const float wk = w[k];
        const float* dk = dp + hp - k + threadIdx.x;
#pragma unroll
        for (int e = 0; e < B2BBwdTile::kPerThread; ++e) acc[e] = fmaf(wk, dk[e * B2BBwdTile::kThreads], acc[e]);
      }
      b2b_store_tile<B2BBwdTile>(dx0 + j * p.dx_stride[1], j0, n, acc);
    }

    // 5. Tile sums of the weight gradients, in a fixed order: each thread over its
    //    positions, a shuffle tree per warp, then the warps in order.
    //    Slot j*Kp + k: dwp[3c+j][k]; x0_s[o + k] and x{1,2}_s[o + Hm + k] are x at t - (Hp - k).
#pragma unroll 1
    for (int s = 0; s < 3 * kp; ++s) {
      const int j = s / kp, k = s - j * kp;
      const float* dp = j == 0 ? dp0_s : (j == 1 ? p1_s : p2_s);
      const float* xs = j == 0 ? x0_s + k : (j == 1 ? x1_s : x2_s) + hm + k;
      const float sum = b2b_tile_dot(dp, xs);
      if (lane == 0) red_s[warp * slots + s] = sum;
    }
    //    Slot 3Kp + k: dwm[c][k], z_s[o + k] is z at t - (Hm - k); slot 3Kp + Km: dskip.
#pragma unroll 1
    for (int k = 0; k <= km; ++k) {
      const float sum = b2b_tile_dot(g_s, z_s + (k < km ? k : hm));
      if (lane == 0) red_s[warp * slots + 3 * kp + k] = sum;
    }
    __syncthreads();
    for (int s = threadIdx.x; s < slots; s += B2BBwdTile::kThreads) {
      float sum = 0.0f;
      for (int w = 0; w < kB2BBackwardWarps; ++w) sum += red_s[w * slots + s];
      acc_s[s] += sum;
    }
  }

  if (partials) {
    float* part = partials + ((c * p.batch + b) * int64_t(gridDim.y) + blockIdx.y) * slots;
    for (int s = threadIdx.x; s < slots; s += B2BBwdTile::kThreads) part[s] = acc_s[s];
  }
}

// Channel c's weight gradients: the sum of its partials (batch-major, then block
// along time), in that order.
template <typename T>
__global__ void __launch_bounds__(B2BBwdTile::kThreads)
    b2b_weight_grad_reduce(B2BBackwardParams p, int64_t parts_per_channel, const float* partials) {
  const int64_t c = blockIdx.x;
  const int kp = int(p.proj_width), km = int(p.mixer_width);
  const int slots = 3 * kp + km + 1;
  const float* part = partials + c * parts_per_channel * slots;
  for (int s = threadIdx.x; s < slots; s += B2BBwdTile::kThreads) {
    float sum = 0.0f;
    for (int64_t q = 0; q < parts_per_channel; ++q) sum += part[q * slots + s];
    if (s < 3 * kp) {
      const int j = s / kp, k = s - j * kp;
      static_cast<T*>(p.dweight_proj)[(3 * c + j) * p.dwp_stride[0] + k * p.dwp_stride[1]] = from_float<T>(sum);
    } else if (s < 3 * kp + km) {
      static_cast<T*>(p.dweight_mixer)[c * p.dwm_stride[0] + (s - 3 * kp) * p.dwm_stride[1]] = from_float<T>(sum);
    } else {
      static_cast<T*>(p.dskip_bias)[c * p.dskip_stride] = from_float<T>(sum);
    }
  }
}

}  // namespace causalconv::detail
