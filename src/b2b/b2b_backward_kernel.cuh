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

#include <cstring>

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
  return warp_sum(s);
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

// ---- The chunked kernel: Kp <= 4, any Km (Evo 2's Kp = 3 with Km = 7 or 128) ----
//
// The same quantities as b2b_backward_kernel, but each pass computes chunks of 4
// consecutive steps per thread from register windows (one float4 shared-memory read
// per 4 inputs instead of one read per FMA), with the filters zero-padded in front to
// kP / kM taps so the tap loops unroll at compile time. Per tile, three passes and
// three barriers:
//   1. z over [j0 - Am, j0 + T + Ap) and dh = dout * gate over [j0, j0 + T + Ap + Am);
//   2. h, dz, p1, p2 over [j0, j0 + T + Ap) -> dp0, dp1, dp2; on the tile's own
//      chunks also the weight-gradient terms, summed in registers across all the
//      block's tiles (one reduction per block, not per tile);
//   3. dx from the dp rows, while the next tile's loads are in flight.
// Rows are read and written as 4-element groups: one 8-byte (16-bit types) or 16-byte
// (fp32) access when the plan says the rows allow it, element by element otherwise.

template <typename T>
struct alignas(4 * sizeof(T)) B2BGroup {
  T v[4];
};

// One group access of a vectorised row. Under the CPU emulation through memcpy: GCC 13 at -O3
// merged the aligned access with the element path's four loads into one aligned SSE load on
// rows that are not 16-byte aligned (a fault in B2BKernelsEmulated.Float32MatchesReference).
template <typename T>
__device__ __forceinline__ B2BGroup<T> b2b_read_aligned_group(const T* at) {
#ifdef CAUSALCONV_CUDA_EMULATION
  B2BGroup<T> g;
  std::memcpy(&g, at, sizeof g);
  return g;
#else
  return *reinterpret_cast<const B2BGroup<T>*>(at);
#endif
}
template <typename T>
__device__ __forceinline__ void b2b_write_aligned_group(T* at, const B2BGroup<T>& g) {
#ifdef CAUSALCONV_CUDA_EMULATION
  std::memcpy(at, &g, sizeof g);
#else
  *reinterpret_cast<B2BGroup<T>*>(at) = g;
#endif
}

// Elements [t, t + 4) of row (time 0 at row[0]), zero outside [0, n); t is a multiple of 4.
template <typename T>
__device__ __forceinline__ B2BGroup<T> b2b_load_group(const T* row, int64_t t, int64_t n, bool vectorised) {
  B2BGroup<T> g;
  if (t >= 0 && t + 4 <= n) {
    if (vectorised) return b2b_read_aligned_group(row + t);
#pragma unroll
    for (int i = 0; i < 4; ++i) g.v[i] = row[t + i];
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) g.v[i] = (t + i >= 0 && t + i < n) ? row[t + i] : from_float<T>(0.0f);
  }
  return g;
}

template <typename T>
__device__ __forceinline__ void b2b_store_group(T* row, int64_t t, int64_t n, const float (&v)[4], bool vectorised) {
  B2BGroup<T> g;
#pragma unroll
  for (int i = 0; i < 4; ++i) g.v[i] = from_float<T>(v[i]);
  if (t + 4 <= n) {
    if (vectorised) {
      b2b_write_aligned_group(row + t, g);
      return;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) row[t + i] = g.v[i];
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (t + i < n) row[t + i] = g.v[i];
  }
}

// w[i] = s[i] for i < N (N a multiple of 4, s 16-byte aligned).
template <int N>
__device__ __forceinline__ void b2b_load_window(const float* s, float (&w)[N]) {
  static_assert(N % 4 == 0, "windows are whole chunks");
#pragma unroll
  for (int i = 0; i < N / 4; ++i) {
    const float4 q = reinterpret_cast<const float4*>(s)[i];
    w[4 * i] = q.x;
    w[4 * i + 1] = q.y;
    w[4 * i + 2] = q.z;
    w[4 * i + 3] = q.w;
  }
}

// w[0..4) = s[0..4) (s 16-byte aligned): one step of a sliding window.
__device__ __forceinline__ void b2b_load_quad(const float* s, float* w) {
  const float4 q = *reinterpret_cast<const float4*>(s);
  w[0] = q.x;
  w[1] = q.y;
  w[2] = q.z;
  w[3] = q.w;
}

__device__ __forceinline__ void b2b_store_chunk(float* s, const float (&v)[4]) {
  *reinterpret_cast<float4*>(s) = make_float4(v[0], v[1], v[2], v[3]);
}

// The kernel's mixer width: kM = 8 or 16 (a compile-time padded width, unrolled tap
// loops, dwm sums in registers), or 0 for any width up to 256 (padded to a multiple of
// 4 at run time, tap loops over blocks of 4 taps, dwm in a separate pass into shared
// slots). Pass 2 of kM = 16 holds windows of z and dh (20 values each), x windows and
// 29 register sums at once, and the wide kernel holds up to 11 staged groups of the next
// tile through pass 3: both need more than the 128 registers of 4 blocks per SM to run
// without spilling, so they run 3 blocks per SM.
template <int kM>
constexpr int b2b_chunk_min_blocks() {
  return kM == 8 ? 4 : 3;
}

__host__ __device__ constexpr int b2b_chunk_mixer_taps(int km) { return (km + 3) / 4 * 4; }

template <typename T, int kM>
__global__ void __launch_bounds__(B2BBackwardChunkTile::kThreads, b2b_chunk_min_blocks<kM>())
    b2b_backward_chunked_kernel(B2BBackwardParams p, B2BTiling tiling, bool vectorised, float* partials) {
  constexpr bool kWide = kM == 0;
  constexpr int kP = 4, kHp = B2BChunkLayout::kHp, kAp = B2BChunkLayout::kAp, kT = B2BChunkLayout::kT;
  constexpr int kThreads = B2BBackwardChunkTile::kThreads;
  const int kp = int(p.proj_width), km = int(p.mixer_width);
  const int mt = kWide ? b2b_chunk_mixer_taps(km) : kM;  // the padded mixer's taps (a multiple of 4)
  const B2BChunkLayout lay(mt, kWide);                   // folds to constants when kM > 0
  const int am = lay.am, hm = mt - 1;
  // Staging: the rows x0, x1, x2, dout as one flat run of 4-element groups; each thread
  // keeps its groups of the next tile in registers while pass 3 runs.
  constexpr int kStageIters =
      (B2BChunkLayout(kWide ? kB2BChunkMaxMixerWidth : kM, kWide).staged_floats / 4 + kThreads - 1) / kThreads;
  const int groups = lay.staged_floats / 4;
  const int g1 = lay.x1 / 4, g2 = lay.x2 / 4, g3 = lay.g / 4;
  float* smem = b2b_shared_floats();
  float* x0_s = smem + lay.x0;  // x[3c]   at time j0 - Ap + i
  float* x1_s = smem + lay.x1;  // x[3c+1] at time j0 - Am - Ap + i
  float* x2_s = smem + lay.x2;  // x[3c+2] at time j0 - Am - Ap + i
  float* g_s = smem + lay.g;    // dout    at time j0 + i
  float* dh_s = smem + lay.dh;  // dh      at time j0 + i
  float* z_s = smem + lay.z;    // z       at time j0 - Am + i
  float* dp_s = smem + lay.dp;  // dp_j    at time j0 + i: dp_s[j * dp_len + i]
  float* red_s = smem + lay.red;
  float* dwm_s = smem + lay.dwm;  // wide: [segment][tap], each slot owned by one thread
  float* wp_s = smem + lay.w;     // [3][kP]: padded projection rows 3c, 3c+1, 3c+2
  float* wm_s = wp_s + 3 * kP;    // [mt]: padded mixer
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  const int64_t b = div_nonneg(int64_t(blockIdx.x), p.dim);
  const int64_t c = int64_t(blockIdx.x) - b * p.dim;
  const int64_t n = p.length;
  const T* x0 = static_cast<const T*>(p.x) + b * p.x_stride[0] + 3 * c * p.x_stride[1];
  const T* x1 = x0 + p.x_stride[1];
  const T* x2 = x1 + p.x_stride[1];
  const T* g = static_cast<const T*>(p.dout) + b * p.dout_stride[0] + c * p.dout_stride[1];
  T* dx0 = static_cast<T*>(p.dx) + b * p.dx_stride[0] + 3 * c * p.dx_stride[1];

  // Padded filters in shared memory (read as broadcasts, so they hold no registers
  // across the passes): tap k of the padded filter is tap k - (width - real width).
  for (int i = threadIdx.x; i < 3 * kP + mt; i += kThreads) {
    if (i < 3 * kP) {
      const int j = i / kP, k = i - j * kP - (kP - kp);
      wp_s[i] = k >= 0 ? to_float(static_cast<const T*>(p.weight_proj)[(3 * c + j) * p.wp_stride[0] + k * p.wp_stride[1]])
                       : 0.0f;
    } else {
      const int k = i - 3 * kP - (mt - km);
      wm_s[i - 3 * kP] =
          k >= 0 ? to_float(static_cast<const T*>(p.weight_mixer)[c * p.wm_stride[0] + k * p.wm_stride[1]]) : 0.0f;
    }
  }
  if constexpr (kWide)
    for (int i = threadIdx.x; i < kB2BChunkDwmSegments * mt; i += kThreads) dwm_s[i] = 0.0f;
  const float skip = to_float(static_cast<const T*>(p.skip_bias)[c * p.skip_stride]);
  float dwp[3][kP] = {}, dskip = 0.0f;  // this thread's sums over all its tiles
  float dwm[kWide ? 1 : kM] = {};       // (wide: in dwm_s)

  // Group q of the staged run: its row and the time of its first element.
  auto group_source = [&](int q, int64_t j0, const T*& row, int64_t& t) {
    if (q < g1) {
      row = x0, t = j0 - kAp + 4 * q;
    } else if (q < g3) {
      row = q < g2 ? x1 : x2, t = j0 - am - kAp + 4 * (q < g2 ? q - g1 : q - g2);
    } else {
      row = g, t = j0 + 4 * (q - g3);
    }
  };
  B2BGroup<T> staged[kStageIters];
  auto load_tile = [&](int64_t j0) {
#pragma unroll
    for (int i = 0; i < kStageIters; ++i) {
      const int q = threadIdx.x + i * kThreads;
      if (q < groups) {
        const T* row;
        int64_t t;
        group_source(q, j0, row, t);
        staged[i] = b2b_load_group(row, t, n, vectorised);
      }
    }
  };
  auto store_tile = [&] {
#pragma unroll
    for (int i = 0; i < kStageIters; ++i) {
      const int q = threadIdx.x + i * kThreads;
      if (q < groups) {
        float v[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] = to_float(staged[i].v[e]);
        b2b_store_chunk(smem + 4 * q, v);
      }
    }
  };

  load_tile(int64_t(blockIdx.y) * kT);  // blockIdx.y < tiles
  store_tile();

#pragma unroll 1
  for (int64_t tile = blockIdx.y; tile < tiling.tiles; tile += gridDim.y) {
    const int64_t j0 = tile * kT;  // < n
    __syncthreads();               // this tile's rows are staged; pass 3 of the last tile is done with dp

    // 1. Chunk q: z at time j0 - Am + 4q + r, dh at time j0 + 4q + r (r < 4). p at time t
    //    reads x at t - Hp + k: x1_s / x0_s index 4q + r + Ap - Hp + k.
    float wpr[3][kP];  // the projection in registers for the pass (not reloaded per chunk)
#pragma unroll
    for (int i = 0; i < 3 * kP; ++i) wpr[i / kP][i % kP] = wp_s[i];
#pragma unroll 1
    for (int q = threadIdx.x; q < lay.z_len / 4; q += kThreads) {
      float xa[kAp + 4], xb[kAp + 4], xg[kAp + 4], g4[4];
      b2b_load_window(x1_s + 4 * q, xa);
      b2b_load_window(x2_s + 4 * q, xb);
      b2b_load_window(x0_s + 4 * q, xg);
      b2b_load_window(g_s + 4 * q, g4);
      float a[4] = {}, v[4] = {}, gate[4] = {};
#pragma unroll
      for (int k = 0; k < kP; ++k) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          a[r] = fmaf(wpr[1][k], xa[r + kAp - kHp + k], a[r]);
          v[r] = fmaf(wpr[2][k], xb[r + kAp - kHp + k], v[r]);
          gate[r] = fmaf(wpr[0][k], xg[r + kAp - kHp + k], gate[r]);
        }
      }
      float z[4], dh[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        z[r] = a[r] * v[r];
        dh[r] = g4[r] * gate[r];
      }
      b2b_store_chunk(z_s + 4 * q, z);
      b2b_store_chunk(dh_s + 4 * q, dh);
    }
    __syncthreads();

    // 2. Chunk q at time t = j0 + 4q + r over [j0, j0 + T + Ap):
    //    h  = skip z[t] + sum_k wm[k] z[t - Hm + k]     (z_s index 4q + r + Am - Hm + k)
    //    dz = skip dh[t] + sum_k wm[k] dh[t + Hm - k]   (dh_s index 4q + r + Hm - k)
    //    x1 / x2 at t - Hp + k: x{1,2}_s index 4q + Am + r + Ap - Hp + k.
#pragma unroll 1
    for (int q = threadIdx.x; q < lay.dp_len / 4; q += kThreads) {
      float h[4], dz[4];
      float zw[kWide ? 8 : kM + 4], dw[kWide ? 8 : kM + 4];  // short: the whole windows (Am = kM)
      if constexpr (!kWide) {
        b2b_load_window(z_s + 4 * q, zw);
        b2b_load_window(dh_s + 4 * q, dw);
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          h[r] = skip * zw[r + kM];
          dz[r] = skip * dw[r];
        }
#pragma unroll
        for (int k = 0; k < kM; ++k) {
          const float w = wm_s[k];
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            h[r] = fmaf(w, zw[r + kM - hm + k], h[r]);
            dz[r] = fmaf(w, dw[r + hm - k], dz[r]);
          }
        }
      } else {
        // Taps in blocks of 4, windows sliding by one float4: for block i (h: taps 4i..4i+3;
        // dz: taps of block nb-1-i), zw / dw hold z_s / dh_s [4q + 4i, 4q + 4i + 8), and
        // the terms sit at zw[1 + kk + r] and dw[3 + r - kk].
        float zs[4];
        b2b_load_quad(z_s + 4 * q + am, zs);  // z at t
        b2b_load_quad(dh_s + 4 * q, dw);
        b2b_load_quad(z_s + 4 * q, zw);
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          h[r] = skip * zs[r];
          dz[r] = skip * dw[r];
        }
        const int nb = mt / 4;
#pragma unroll 1
        for (int i = 0; i < nb; ++i) {
          b2b_load_quad(z_s + 4 * q + 4 * i + 4, zw + 4);
          b2b_load_quad(dh_s + 4 * q + 4 * i + 4, dw + 4);
          float wh[4], wd[4];
          b2b_load_window(wm_s + 4 * i, wh);
          b2b_load_window(wm_s + 4 * (nb - 1 - i), wd);
#pragma unroll
          for (int kk = 0; kk < 4; ++kk)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
              h[r] = fmaf(wh[kk], zw[1 + kk + r], h[r]);
              dz[r] = fmaf(wd[kk], dw[3 + r - kk], dz[r]);
            }
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            zw[e] = zw[e + 4];
            dw[e] = dw[e + 4];
          }
        }
      }
      float xa[kAp + 4], xb[kAp + 4], g4[4];
      b2b_load_window(x1_s + 4 * q + am, xa);
      b2b_load_window(x2_s + 4 * q + am, xb);
      b2b_load_window(g_s + 4 * q, g4);
      float a[4] = {}, v[4] = {};
#pragma unroll
      for (int k = 0; k < kP; ++k) {
        const float w1 = wp_s[kP + k], w2 = wp_s[2 * kP + k];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          a[r] = fmaf(w1, xa[r + kAp - kHp + k], a[r]);
          v[r] = fmaf(w2, xb[r + kAp - kHp + k], v[r]);
        }
      }
      float dp0[4], dp1[4], dp2[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        dp0[r] = g4[r] * h[r];
        dp1[r] = dz[r] * v[r];
        dp2[r] = dz[r] * a[r];
      }
      b2b_store_chunk(dp_s + 4 * q, dp0);
      b2b_store_chunk(dp_s + lay.dp_len + 4 * q, dp1);
      b2b_store_chunk(dp_s + 2 * lay.dp_len + 4 * q, dp2);
      if (4 * q < kT) {  // a chunk of the tile itself (not the look-ahead): its weight-gradient terms
        float xg[kAp + 4], d4[4], z4[4];    // dh and z at t
        b2b_load_window(x0_s + 4 * q, xg);  // x0 at t - Hp + k: index 4q + r + Ap - Hp + k
        if constexpr (kWide) {               // (the tap loop's windows have moved on)
          b2b_load_quad(dh_s + 4 * q, d4);
          b2b_load_quad(z_s + 4 * q + am, z4);
        } else {
#pragma unroll
          for (int r = 0; r < 4; ++r) d4[r] = dw[r], z4[r] = zw[r + kM];
        }
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          if constexpr (!kWide) {
#pragma unroll
            for (int k = 0; k < kM; ++k) dwm[k] = fmaf(d4[r], zw[r + kM - hm + k], dwm[k]);
          }
          dskip = fmaf(d4[r], z4[r], dskip);
#pragma unroll
          for (int k = 0; k < kP; ++k) {
            dwp[0][k] = fmaf(dp0[r], xg[r + kAp - kHp + k], dwp[0][k]);
            dwp[1][k] = fmaf(dp1[r], xa[r + kAp - kHp + k], dwp[1][k]);
            dwp[2][k] = fmaf(dp2[r], xb[r + kAp - kHp + k], dwp[2][k]);
          }
        }
      }
    }

    // 2b. Wide mixers: dwm[k] += sum over the tile of dh[t] z[t - Hm + k]. Unit u (tap block
    //     tb = u % nb, a run of 32 chunks seg = u / nb) always falls to the same thread, which
    //     alone adds into dwm_s[seg][4 tb ..]; lanes of a warp take neighbouring tap blocks, so
    //     they read one dh chunk (a broadcast) and neighbouring float4s of z.
    if constexpr (kWide) {
      const int nb = mt / 4;
      constexpr int kSegChunks = kT / 4 / kB2BChunkDwmSegments;
#pragma unroll 1
      for (int u = threadIdx.x; u < nb * kB2BChunkDwmSegments; u += kThreads) {
        const int seg = u / nb, tb = u - seg * nb;
        float acc[4] = {}, zw[8];
        const int q0 = seg * kSegChunks;
        b2b_load_quad(z_s + 4 * q0 + 4 * tb, zw);
#pragma unroll 2
        for (int q = q0; q < q0 + kSegChunks; ++q) {
          float d4[4];
          b2b_load_quad(z_s + 4 * q + 4 * tb + 4, zw + 4);
          b2b_load_window(dh_s + 4 * q, d4);
#pragma unroll
          for (int kk = 0; kk < 4; ++kk)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[kk] = fmaf(d4[r], zw[1 + kk + r], acc[kk]);
#pragma unroll
          for (int e = 0; e < 4; ++e) zw[e] = zw[e + 4];
        }
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) dwm_s[seg * mt + 4 * tb + kk] += acc[kk];
      }
    }
    __syncthreads();

    // 3. The next tile's loads go out first (x and dout rows are free: pass 2 is done),
    //    then dx over the tile: dx_j[t] = sum_k wp[j][k] dp_j[t + Hp - k] (index 4q + r + Hp - k).
    const int64_t next = tile + gridDim.y;
    if (next < tiling.tiles) load_tile(next * kT);
#pragma unroll
    for (int i = 0; i < 3 * kP; ++i) wpr[i / kP][i % kP] = wp_s[i];  // (not live through pass 2)
#pragma unroll 1
    for (int q = threadIdx.x; q < kT / 4; q += kThreads) {
#pragma unroll
      for (int j = 0; j < 3; ++j) {
        float dw[kAp + 4], o[4] = {};
        b2b_load_window(dp_s + j * lay.dp_len + 4 * q, dw);
#pragma unroll
        for (int k = 0; k < kP; ++k)
#pragma unroll
          for (int r = 0; r < 4; ++r) o[r] = fmaf(wpr[j][k], dw[r + kHp - k], o[r]);
        b2b_store_group(dx0 + j * p.dx_stride[1], j0 + 4 * q, n, o, vectorised);
      }
    }
    if (next < tiling.tiles) store_tile();
  }

  // The block's sums in a fixed order: a shuffle tree per warp, then the warps in order
  // (wide dwm: the segments in order). Slots in the general kernel's layout (real taps
  // only): dwp rows, dwm, dskip.
  const int slots = 3 * kp + km + 1;
  constexpr int kRed = B2BChunkLayout::kRegSlots;
#pragma unroll
  for (int j = 0; j < 3; ++j)
#pragma unroll
    for (int k = 0; k < kP; ++k)
      if (k >= kP - kp) {  // uniform across the block
        const float sum = warp_sum(dwp[j][k]);
        if (lane == 0) red_s[warp * kRed + j * kp + k - (kP - kp)] = sum;
      }
  if constexpr (!kWide) {
#pragma unroll
    for (int k = 0; k < kM; ++k)
      if (k >= kM - km) {
        const float sum = warp_sum(dwm[k]);
        if (lane == 0) red_s[warp * kRed + 3 * kp + k - (kM - km)] = sum;
      }
  }
  {
    const float sum = warp_sum(dskip);
    if (lane == 0) red_s[warp * kRed + (kWide ? 3 * kp : 3 * kp + km)] = sum;
  }
  __syncthreads();
  float* part = partials + ((c * p.batch + b) * int64_t(gridDim.y) + blockIdx.y) * slots;
  for (int s = threadIdx.x; s < slots; s += kThreads) {
    float sum = 0.0f;
    if (kWide && s >= 3 * kp && s < 3 * kp + km) {
      const int k = s - 3 * kp + (mt - km);  // the padded tap
      for (int seg = 0; seg < kB2BChunkDwmSegments; ++seg) sum += dwm_s[seg * mt + k];
    } else {
      const int r = kWide && s == 3 * kp + km ? 3 * kp : s;  // wide: dskip sits after dwp
      for (int w = 0; w < kThreads / 32; ++w) sum += red_s[w * kRed + r];
    }
    part[s] = sum;
  }
}

// Channel c's weight gradients: the sum of its partials (batch-major, then block along
// time), in that order. One thread per (channel, slot), kB2BReduceThreads to a block: a block
// per channel left all but 3Kp + Km + 1 of its threads idle (D = 4096 blocks at Km 7).
constexpr int kB2BReduceThreads = 256;

inline int64_t b2b_weight_grad_reduce_blocks(const B2BBackwardParams& p) {
  return (p.dim * (3 * p.proj_width + p.mixer_width + 1) + kB2BReduceThreads - 1) / kB2BReduceThreads;
}

template <typename T>
__global__ void __launch_bounds__(kB2BReduceThreads)
    b2b_weight_grad_reduce(B2BBackwardParams p, int64_t parts_per_channel, const float* partials) {
  const int kp = int(p.proj_width), km = int(p.mixer_width);
  const int slots = 3 * kp + km + 1;
  const int64_t i = int64_t(blockIdx.x) * kB2BReduceThreads + threadIdx.x;
  if (i >= p.dim * slots) return;
  const int64_t c = i / slots;
  const int s = int(i - c * slots);
  const float sum = sum_in_order(partials + c * parts_per_channel * slots + s, parts_per_channel, slots);
  if (s < 3 * kp) {
    const int j = s / kp, k = s - j * kp;
    static_cast<T*>(p.dweight_proj)[(3 * c + j) * p.dwp_stride[0] + k * p.dwp_stride[1]] = from_float<T>(sum);
  } else if (s < 3 * kp + km) {
    static_cast<T*>(p.dweight_mixer)[c * p.dwm_stride[0] + (s - 3 * kp) * p.dwm_stride[1]] = from_float<T>(sum);
  } else {
    static_cast<T*>(p.dskip_bias)[c * p.dskip_stride] = from_float<T>(sum);
  }
}

}  // namespace causalconv::detail
