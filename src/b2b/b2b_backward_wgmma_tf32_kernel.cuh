// Fused b2b_causal_conv1d backward for fp32 on Hopper's warpgroup MMA (sm_90a; Kp <= 4, any Km up
// to 256, any rows): the mixer's three products (h = M z, dz = M^T dh, and dwm) on tf32 operands split
// three ways (common/toeplitz_wgmma_tf32.cuh: ~2^-21 of each term), the projections, dx and dwp on the
// CUDA cores by 16-byte units (b2b_fp32_projections.cuh), as the fp32 forward
// (b2b_forward_wgmma_tf32_kernel.cuh).
//
// Why: the CUDA-core backward (b2b_backward_chunked_kernel's wide form) spends 3 Km FMAs a step on
// h, dz and dwm, ~1.46 ms at B1 D4096 L8192 Km128 on the H100, ~30 % of the FMA peak.
//
// A block owns channel c of batch b and walks 4096-step tiles y, y + gridDim.y, ... Tiles are
// independent (no carries): with H = mixer blocks - 1 and the tile at [j0, j0 + 4096),
//   1. staged (cp.async where 16-byte aligned, zero outside [0, L)): x's rows 3c + j over
//      [j0 - 64 H - 32, j0 + 4100 + 64 H) and dout over [j0, j0 + 4100 + 64 H);
//   2. z over [j0 - 64 H, j0 + 4096) into the z tile (tf32 hi / lo, the forward's layout), and
//      dh = dout * gate over [j0, j0 + 4096 + 64 H) into the dh tile in reversed time (tile step τ is
//      j0 + 4095 + 64 H - τ: the look-ahead dz = M^T dh becomes the causal product of the forward).
//      The dp rows past the tile that dx reaches (Kp - 1 <= 3 steps) are summed directly from the
//      staged rows meanwhile;
//   3. h and dz (wgmma_tf32x3_toeplitz over the z and the reversed dh tile; warpgroups 0 and 1 side
//      by side); the tile's own steps of dh copied into a transposed tile (dwm's B operand: a row
//      per step of a chunk, the chunks along K); dp0 = dout (h + skip z) into its own row,
//      dz' = dz + skip dh over the dh tile's place, dskip += dh z;
//   4. dp1 = dz' v and dp2 = dz' x1 by units (projections again from the staged rows), dwp's sums.
//      x's stage and dout's row are then free: the next tile's rows are copied while
//   5. dwm's lag blocks D_a[c][r] = sum_m z[m - a][c] dh[m][r] (m the tile's chunks, lag 64 a + r - c;
//      A = z from the z tile in registers, as any shift of it can be loaded; B = the transposed dh)
//      are computed by both warpgroups (a % 2), each summed along its diagonals through a padded
//      fp32 copy of half the block at a time (kDwmGroup: by a third warpgroup during steps 3-4), and
//   6. dx_j = P_j^T dp_j goes out by units.
// dp and dz' rows sit in 68-word chunk rows (WgmmaTf32Tile::output_offset): the accumulators'
// stores hit 32 distinct banks. The block's weight-gradient sums go out as one partial per
// (c, b, blockIdx.y) in the other backward kernels' layout, summed in a fixed order by
// b2b_weight_grad_reduce (bitwise reproducible).
//
// Accuracy: fp32 rows and sums; the mixer's products carry the tf32 split's ~2^-21 a term.
// Not guarded: a non-finite z or dh reaches the tile's other steps through the Toeplitz form's zero
// terms (0 * inf), as in the 16-bit wgmma backward.
#pragma once

#include "b2b/b2b_fp32_projections.cuh"
#include "b2b/b2b_kernels.h"
#include "b2b/b2b_tiling.cuh"
#include "common/cuda_math.cuh"
#include "common/sm90_primitives.cuh"
#include "common/toeplitz_wgmma_tf32.cuh"
#include "common/vector_access.cuh"

namespace causalconv::detail {

// The transposed dh tile (dwm's B operand, K-major): 64 rows (a chunk's steps r) of the tile's 64
// chunks m, as two half tiles (chunks 0-31, 32-63) of 128-byte rows under the 128-byte swizzle, as
// WgmmaTf32Tile's. Byte offset of (r, m).
constexpr int kB2BDhTransposedHalfBytes = 64 * 128;
__device__ __forceinline__ int b2b_dh_transposed_offset(int r, int m) {
  const int h = m >> 2;
  return (h >> 3) * kB2BDhTransposedHalfBytes + swizzled_unit_offset(r, h & 7) + 4 * (m & 3);
}

// Shared memory (bytes from the 1024-byte aligned start): the z and the reversed dh tiles (hi, lo),
// the transposed dh tile (hi, lo), the stage of x's three rows, dout's row and dp0's (68-word chunk
// rows), the two warpgroups' lag-block halves, the mixer's split lag filter and its plain taps, the
// projections' taps, the boundary sums. After step 3: dz' then dp1 over the dh tile's hi part, dp2
// over its lo part.
template <int kMixerBlocks>
struct B2BWgmmaTf32BackwardLayout {
  using Split = WgmmaTf32Tile<kMixerBlocks>;
  static constexpr int kHalo = kMixerBlocks - 1;
  static constexpr int kSteps = WgmmaToeplitzTile::kOutputs;  // 4096
  static constexpr int kReach = 32;                           // x steps before the z range: Kp - 1 <= 3, whole units
  static constexpr int kSpan = kSteps + 64 * kHalo;           // the z range and the dh range
  static constexpr int kPast = 4;        // steps staged past the dh range: the boundary's dz reaches 2
  static constexpr int kXSteps = kReach + 64 * kHalo + kSpan + kPast;  // x rows from j0 - 64 H - kReach
  static constexpr int kXUnits = kXSteps / 4;
  static constexpr int kDoutUnits = (kSpan + kPast) / 4;  // dout from j0, in 68-word chunk rows
  static constexpr int kRowBytes = 4 * Split::kOutRow;   // a 68-word chunk row
  static constexpr int kLagHalfBytes = 4 * 64 * 33;      // 64 rows of 32 lag-block columns, padded
  static constexpr int kZHi = 0;
  static constexpr int kZLo = Split::kBytes;
  static constexpr int kDhHi = 2 * Split::kBytes;
  static constexpr int kDhLo = 3 * Split::kBytes;
  static constexpr int kDhTHi = 4 * Split::kBytes;
  static constexpr int kDhTLo = kDhTHi + 2 * kB2BDhTransposedHalfBytes;
  static constexpr int kStage = kDhTLo + 2 * kB2BDhTransposedHalfBytes;
  static constexpr int kXBytes = 4 * kXSteps;
  static constexpr int kDout = kStage + 3 * kXBytes;
  static constexpr int kDp0 = kDout + kRowBytes * ((kDoutUnits + 15) / 16);
  static constexpr int kLagHalves = kDp0 + kRowBytes * 65;  // [warpgroup]
  static constexpr int kWm = kLagHalves + 2 * kLagHalfBytes;  // hi, then lo
  static constexpr int kWmPlain = kWm + 2 * 4 * Split::kLags;  // float [256]
  static constexpr int kWp = kWmPlain + 4 * 256;               // float [3][32]
  static constexpr int kBoundary = kWp + 4 * 3 * 32;           // float [8]
  static constexpr int kBytes = 1024 + kBoundary + 4 * 8;
  static_assert(kBytes <= 227 * 1024, "one block per SM");
  static_assert(kRowBytes * 65 <= Split::kBytes, "a dp row (4096 steps and the boundary) fits a tile part");
  static_assert(kDhTHi % 1024 == 0 && Split::kBytes % 1024 == 0, "tiles 1024-byte aligned");
};

#ifdef CAUSALCONV_SM90A
// D[c][r] = sum_m z[m - a][c] dh[m][r] over the tile's 64 chunks m (fp32 accumulators, complete on
// return): A[c][k] = z at step c of z tile row 8 ks + k - a + H, loaded into registers per k8 slice
// (the m16n8k8 tf32 layout: lane (g, q) of warp w takes steps 16w + g (+ 8) of rows + q (+ 4));
// B = the transposed dh tile (row r, K = the chunks), slice ks at 32 (ks % 4) of half ks / 4. The
// products w_lo x_hi, w_hi x_lo, w_hi x_hi (wgmma_tf32x3_slice), the register sets alternating as
// wgmma_tf32x3_toeplitz's. acc[4j + 2h + e] = D[16 warp + g + 8h][8j + 2q + e].
template <int kBlocks>
__device__ __forceinline__ void wgmma_tf32x3_lag_block(float (&acc)[32], int a, const unsigned char* z_hi_s,
                                                       const unsigned char* z_lo_s, uint32_t dht_hi, uint32_t dht_lo) {
  const int lane = int(threadIdx.x) & 31, warp = (int(threadIdx.x) >> 5) & 3;  // of its warpgroup
  const int c0 = 16 * warp + (lane >> 2), q = lane & 3;
  uint32_t a_hi[2][4], a_lo[2][4];
  const uint64_t hi_desc = sm90::smem_descriptor(dht_hi, 16, 1024), lo_desc = sm90::smem_descriptor(dht_lo, 16, 1024);
#pragma unroll
  for (int ks = 0; ks < 8; ++ks) {
    const int set = ks & 1, row = 8 * ks + q - a + kBlocks - 1;
    const int offset[4] = {wgmma_tf32_element_offset<kBlocks>(row, c0), wgmma_tf32_element_offset<kBlocks>(row, c0 + 8),
                           wgmma_tf32_element_offset<kBlocks>(row + 4, c0),
                           wgmma_tf32_element_offset<kBlocks>(row + 4, c0 + 8)};
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
      a_hi[set][reg] = *reinterpret_cast<const uint32_t*>(z_hi_s + offset[reg]);
      a_lo[set][reg] = *reinterpret_cast<const uint32_t*>(z_lo_s + offset[reg]);
    }
    const uint32_t b_offset = uint32_t((ks >> 2) * kB2BDhTransposedHalfBytes + 32 * (ks & 3));
    wgmma_tf32x3_slice(acc, a_hi[set], a_lo[set], sm90::descriptor_plus(hi_desc, b_offset),
                       sm90::descriptor_plus(lo_desc, b_offset), ks != 0);
  }
  sm90::wgmma_wait<0>();
  sm90::fence_registers(acc);
}
#endif

// Two warpgroups: the CUDA-core passes take all 256 threads; warpgroup 0 computes h and warpgroup 1
// dz, then they split dwm's lag blocks (a % 2). kDwmGroup: a third warpgroup computes every lag block
// of dwm while the other two compute h and dz and the dp rows (384 threads; the first and last
// passes on all of them). Block (b*D + c, y) walks tiles y, y + gridDim.y, ... of `tiles` 4096-step
// tiles; partials as b2b_backward_kernel's.
__host__ __device__ constexpr int b2b_wgmma_tf32_backward_threads(bool dwm_group) {
  return (dwm_group ? 3 : 2) * WgmmaToeplitzTile::kThreads;
}

template <int kMixerBlocks, bool kDwmGroup = false>
__global__ void __launch_bounds__(b2b_wgmma_tf32_backward_threads(kDwmGroup), 1)
    b2b_backward_wgmma_tf32x3_kernel(B2BBackwardParams p, int64_t tiles, float* partials) {
#ifdef CAUSALCONV_SM90A
  using Layout = B2BWgmmaTf32BackwardLayout<kMixerBlocks>;
  using Split = WgmmaTf32Tile<kMixerBlocks>;
  constexpr int kThreads = b2b_wgmma_tf32_backward_threads(kDwmGroup), kSteps = Layout::kSteps;
  constexpr int kSpan = Layout::kSpan;
  constexpr int kDpThreads = 2 * WgmmaToeplitzTile::kThreads;  // warpgroups 0 and 1: the dp pass
  // Named barriers: 1 + warpgroup (its lag-block halves), kDpBarrier (warpgroups 0 and 1, kDwmGroup),
  // kDhReadBarrier (the block, warpgroup 2 arriving: the dh tile is read).
  constexpr uint32_t kDpBarrier = 4, kDhReadBarrier = 5;
  constexpr int kHalo = kMixerBlocks - 1;
  constexpr int kFirst = Layout::kReach + 64 * kHalo;  // x's local step of j0
  constexpr int kTaps = kB2BUnitProjectionTaps;
  const int kp = int(p.proj_width), km = int(p.mixer_width);
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int group = tid >> 7, group_tid = tid & 127;  // warpgroup

  unsigned char* const smem = sm90::aligned_dynamic_shared();
  unsigned char* const z_hi_s = smem + Layout::kZHi;
  unsigned char* const z_lo_s = smem + Layout::kZLo;
  unsigned char* const dh_hi_s = smem + Layout::kDhHi;
  unsigned char* const dh_lo_s = smem + Layout::kDhLo;
  unsigned char* const dht_hi_s = smem + Layout::kDhTHi;
  unsigned char* const dht_lo_s = smem + Layout::kDhTLo;
  float* const dout_s = reinterpret_cast<float*>(smem + Layout::kDout);
  float* const dp0_s = reinterpret_cast<float*>(smem + Layout::kDp0);
  float* const dp1_s = reinterpret_cast<float*>(dh_hi_s);  // dz + skip dh first
  float* const dp2_s = reinterpret_cast<float*>(dh_lo_s);
  float* const half_s = reinterpret_cast<float*>(smem + Layout::kLagHalves + (group & 1) * Layout::kLagHalfBytes);
  uint32_t* const wm_hi_s = reinterpret_cast<uint32_t*>(smem + Layout::kWm);
  uint32_t* const wm_lo_s = wm_hi_s + Split::kLags;
  float* const wm_s = reinterpret_cast<float*>(smem + Layout::kWmPlain);
  float* const wp_s = reinterpret_cast<float*>(smem + Layout::kWp);  // row j's taps at wp_s + 32 j
  float* const boundary_s = reinterpret_cast<float*>(smem + Layout::kBoundary);
  auto x_stage = [&](int j) { return reinterpret_cast<float*>(smem + Layout::kStage + j * Layout::kXBytes); };
  auto row_at = [](const float* row_s, int i) { return row_s[Split::output_offset(i)]; };
  auto split_at = [](const unsigned char* hi_s, const unsigned char* lo_s, int m, int s) {
    const int offset = wgmma_tf32_element_offset<kMixerBlocks>(m, s);
    return __uint_as_float(*reinterpret_cast<const uint32_t*>(hi_s + offset)) +
           __uint_as_float(*reinterpret_cast<const uint32_t*>(lo_s + offset));
  };

  const int64_t b = div_nonneg(int64_t(blockIdx.x), p.dim);
  const int64_t c = int64_t(blockIdx.x) - b * p.dim;
  const int64_t n = p.length;
  const float* const x0 = static_cast<const float*>(p.x) + b * p.x_stride[0] + 3 * c * p.x_stride[1];
  const float* const dout = static_cast<const float*>(p.dout) + b * p.dout_stride[0] + c * p.dout_stride[1];
  float* const dx0 = static_cast<float*>(p.dx) + b * p.dx_stride[0] + 3 * c * p.dx_stride[1];
  auto aligned = [](const void* row) { return (reinterpret_cast<uintptr_t>(row) & 15) == 0; };
  auto stage = [&](int64_t tile) {  // by warpgroup 0 (the staging helpers stride by 128 threads)
    const int64_t j0 = tile * kSteps;
    for (int j = 0; j < 3; ++j) {
      const float* row = x0 + j * p.x_stride[1];
      toeplitz_stage_units<Layout::kXUnits>(reinterpret_cast<unsigned char*>(x_stage(j)), row, aligned(row),
                                            j0 - kFirst, Layout::kXUnits, n, [](int u) { return 16 * u; });
    }
    toeplitz_stage_units<Layout::kDoutUnits>(reinterpret_cast<unsigned char*>(dout_s), dout, aligned(dout), j0,
                                             Layout::kDoutUnits, n,
                                             [](int u) { return 4 * Split::output_offset(4 * u); });
  };

  const float* const wm = static_cast<const float*>(p.weight_mixer) + c * p.wm_stride[0];
  if (group == 0) {
    if (int64_t(blockIdx.y) < tiles) stage(blockIdx.y);
    wgmma_tf32_lag_filter<kMixerBlocks>(wm_hi_s, wm_lo_s, wm, p.wm_stride[1], km);
  }
  cp_async_commit();
  for (int k = tid; k < km; k += kThreads) wm_s[k] = wm[k * p.wm_stride[1]];
  b2b_stage_projection_taps(wp_s, p, c, kThreads);
  const float skip = static_cast<const float*>(p.skip_bias)[c * p.skip_stride];
  const int extra = kp - 1;  // dp steps past the tile that dx reads

  // This thread's sums over the block's tiles: dwp (w[j][k] order), dskip, and dwm's lags
  // 64 a + group_tid - 63 (group_tid < 127) of this warpgroup's lag blocks a.
  float dwp[3][kTaps] = {}, dskip = 0.0f, dwm[kMixerBlocks] = {};
  auto owns_lag_block = [&](int a) { return kDwmGroup ? group == 2 : (a & 1) == group; };
  // dwm's lag blocks first, first + step, ...: lag block a's diagonal r - c = group_tid - 63 (lag
  // 64 a + group_tid - 63) summed through the padded copy of one half (32 columns r) at a time, behind
  // the warpgroup's named barrier.
  auto lag_blocks = [&](int first, int step) {
#pragma unroll 1
    for (int a = first; a < kMixerBlocks; a += step) {
      float d[32];
      wgmma_tf32x3_lag_block<kMixerBlocks>(d, a, z_hi_s, z_lo_s, sm90::smem_u32(dht_hi_s), sm90::smem_u32(dht_lo_s));
      float total = 0.0f;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        sm90::named_barrier_sync(1 + group, 128);  // the copy before is read
        for_each_wgmma_tf32_output([&](int i, int r, int c_) {
          if ((r >> 5) == half) half_s[33 * c_ + r - 32 * half] = d[i];
        });
        sm90::named_barrier_sync(1 + group, 128);
        if (group_tid < 127) {
          const int diagonal = group_tid - 63;  // r - c, r = 32 half + column
          const int c_end = diagonal > 32 * half - 32 ? 32 * half + 32 - diagonal : 64;
          const float* at = half_s + diagonal - 32 * half;  // (c, c + diagonal) at 34 c
          float sum0 = 0.0f, sum1 = 0.0f;  // two chains
          int c_ = diagonal < 32 * half ? 32 * half - diagonal : 0;
          for (; c_ + 1 < c_end; c_ += 2) sum0 += at[34 * c_], sum1 += at[34 * c_ + 34];
          if (c_ < c_end) sum0 += at[34 * c_];
          total += sum0 + sum1;
        }
      }
#pragma unroll
      for (int i = 0; i < kMixerBlocks; ++i)  // (dwm stays in registers: no index unknown to the compiler)
        if (i == a) dwm[i] += total;
    }
  };
  // The transposed dh tile from the reversed one: its unit v (step r = v % 64 of chunks m0 = 4 (v / 64)
  // .. m0 + 3) gathers dh at tile steps 64 m + r, i.e. reversed row 63 + H - m, step 63 - r. A warp
  // reads 32 steps of one row and stores one unit to each of 32 rows: no bank conflicts either way
  // (written in the dh pass, each thread's 4 steps of one chunk were 8 scalar stores 8-way conflicted).
  auto transpose_dh = [&](int thread, int threads) {
#pragma unroll 1
    for (int v = thread; v < kSteps / 4; v += threads) {
      const int r = v & 63, m0 = 4 * (v >> 6);
      uint32_t hi[4], lo[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int offset = wgmma_tf32_element_offset<kMixerBlocks>(63 + kHalo - m0 - e, 63 - r);
        hi[e] = *reinterpret_cast<const uint32_t*>(dh_hi_s + offset);
        lo[e] = *reinterpret_cast<const uint32_t*>(dh_lo_s + offset);
      }
      const int at = b2b_dh_transposed_offset(r, m0);
      *reinterpret_cast<uint4*>(dht_hi_s + at) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
      *reinterpret_cast<uint4*>(dht_lo_s + at) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
    sm90::fence_proxy_async_shared();  // before the lag blocks' MMAs read it
  };

#pragma unroll 1
  for (int64_t tile = blockIdx.y; tile < tiles; tile += gridDim.y) {
    const int64_t j0 = tile * kSteps;  // < n
    cp_async_wait<0>();  // this tile's copies are done
    __syncthreads();     // ... every thread's; the filters are in place, the tiles free

    float w[3][kTaps];
    b2b_unit_projection_taps(wp_s, kp, w);
    // 2. z over [j0 - 64 H, j0 + 4096): unit u at x's local step kReach + 4u.
#pragma unroll 1
    for (int u = tid; u < kSpan / 4; u += kThreads)
      b2b_tf32_store_z_unit(z_hi_s, z_lo_s, wgmma_tf32_unit_offset<kMixerBlocks>(u), x_stage(1), x_stage(2), w, kp,
                            Layout::kReach + 4 * u);
    //    dh over [j0, j0 + 4096 + 64 H): unit u (steps j0 + 4u ..) is unit kSpan / 4 - 1 - u of the
    //    reversed tile, its steps in reverse.
#pragma unroll 1
    for (int u = tid; u < kSpan / 4; u += kThreads) {
      float gate[4];
      b2b_tf32_project_staged_unit(x_stage(0), kFirst + 4 * u, w[0], kp, gate);
      const float4 g = *reinterpret_cast<const float4*>(dout_s + Split::output_offset(4 * u));
      const float dh[4] = {g.x * gate[0], g.y * gate[1], g.z * gate[2], g.w * gate[3]};
      uint32_t hi[4], lo[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) tf32_split(dh[e], hi[e], lo[e]);
      const int offset = wgmma_tf32_unit_offset<kMixerBlocks>(kSpan / 4 - 1 - u);
      *reinterpret_cast<uint4*>(dh_hi_s + offset) = make_uint4(hi[3], hi[2], hi[1], hi[0]);
      *reinterpret_cast<uint4*>(dh_lo_s + offset) = make_uint4(lo[3], lo[2], lo[1], lo[0]);
    }
    //    The boundary: h and dz at the `extra` steps after the tile, summed directly from the staged
    //    rows (warp w takes sum w of [h_0, dz_0, h_1, dz_1, h_2, dz_2], its lanes the taps).
    if (warp < 2 * extra) {
      auto z_direct = [&](int i) {  // z at j0 + i
        return b2b_staged_projection(x_stage(1), wp_s + 32, kp, kFirst + i) *
               b2b_staged_projection(x_stage(2), wp_s + 64, kp, kFirst + i);
      };
      auto dh_direct = [&](int i) {  // dh at j0 + i
        return row_at(dout_s, i) * b2b_staged_projection(x_stage(0), wp_s, kp, kFirst + i);
      };
      const int i = kSteps + (warp >> 1);
      float acc = 0.0f;
      if (warp & 1) {
        for (int k = lane; k < km; k += 32) acc = fmaf(wm_s[k], dh_direct(i + km - 1 - k), acc);
      } else {
        for (int k = lane; k < km; k += 32) acc = fmaf(wm_s[k], z_direct(i - (km - 1 - k)), acc);
      }
      acc = warp_sum(acc);
      if (lane == 0) boundary_s[warp] = acc;
    }
    sm90::fence_proxy_async_shared();  // the tiles, before the MMAs read them
    __syncthreads();

    // 3. Warpgroup 0: h[i] at output (chunk, step) of for_each_wgmma_tf32_output, i.e. at j0 + 64 chunk
    //    + step (z tile row chunk + H); dp0 = dout (h + skip z), dskip += dh z. Warpgroup 1: dz[i] at
    //    reversed step 64 (chunk + H) + step, i.e. j0 + 4095 - 64 chunk - step (where the dh tile holds
    //    dh of that step); dz' = dz + skip dh, stored once every read of the dh tile is done. The
    //    transposed dh tile is written from the reversed one by warpgroups 0 and 1 after that (kDwmGroup:
    //    by warpgroup 2, which then computes dwm (step 5) meanwhile, up to the barrier after step 4).
    float acc[32];
    if (group == 0) {
      wgmma_tf32x3_toeplitz<kMixerBlocks>(acc, wm_hi_s, wm_lo_s, sm90::smem_u32(z_hi_s), sm90::smem_u32(z_lo_s));
      for_each_wgmma_tf32_output([&](int i, int chunk, int step) {
        const int o = 64 * chunk + step, tau = kSpan - 1 - o;
        const float z = split_at(z_hi_s, z_lo_s, chunk + kHalo, step);
        dskip = fmaf(split_at(dh_hi_s, dh_lo_s, tau >> 6, tau & 63), z, dskip);
        dp0_s[Split::output_offset(o)] = row_at(dout_s, o) * fmaf(skip, z, acc[i]);
      });
    } else if (group == 1) {
      wgmma_tf32x3_toeplitz<kMixerBlocks>(acc, wm_hi_s, wm_lo_s, sm90::smem_u32(dh_hi_s), sm90::smem_u32(dh_lo_s));
      for_each_wgmma_tf32_output(
          [&](int i, int chunk, int step) { acc[i] = fmaf(skip, split_at(dh_hi_s, dh_lo_s, chunk + kHalo, step), acc[i]); });
    } else if constexpr (kDwmGroup) {
      transpose_dh(group_tid, WgmmaToeplitzTile::kThreads);
      sm90::named_barrier_arrive(kDhReadBarrier, kThreads);  // its reads of the dh tile are done
      sm90::named_barrier_sync(1 + group, WgmmaToeplitzTile::kThreads);
      lag_blocks(0, 1);  // 5. (kDwmGroup): reads the z and the transposed dh tiles only
    }
    if (group < 2) {
      if constexpr (kDwmGroup) {
        sm90::named_barrier_sync(kDhReadBarrier, kThreads);  // every read of the dh tile is done
      } else {
        transpose_dh(tid, kDpThreads);
        __syncthreads();  // every read of the dh tile is done
      }
      if (group == 1)
        for_each_wgmma_tf32_output(
            [&](int i, int chunk, int step) { dp1_s[Split::output_offset(kSteps - 1 - 64 * chunk - step)] = acc[i]; });
      if constexpr (kDwmGroup)  // warpgroups 0 and 1 alone: the third is on dwm meanwhile
        sm90::named_barrier_sync(kDpBarrier, kDpThreads);
      else
        __syncthreads();

      // 4. dp1 = dz' v (in place) and dp2 = dz' x1 over the tile; dwp's sums; the boundary's dp at
      //    steps 4096 .. 4096 + Kp - 2.
#pragma unroll 1
      for (int u = tid; u < kSteps / 4; u += kDpThreads) {
        const int s = kFirst + 4 * u, at = Split::output_offset(4 * u);
        float xg[8], xa[8], xb[8], p1[4], p2[4];
        b2b_unit_window(x_stage(0), s, xg);
        b2b_unit_window(x_stage(1), s, xa);
        b2b_unit_window(x_stage(2), s, xb);
        b2b_tf32_project_unit(xa, w[1], kp, p1);
        b2b_tf32_project_unit(xb, w[2], kp, p2);
        const float4 dzu = *reinterpret_cast<const float4*>(dp1_s + at);
        const float4 dp0u = *reinterpret_cast<const float4*>(dp0_s + at);
        const float dzv[4] = {dzu.x, dzu.y, dzu.z, dzu.w};
        const float dp[3][4] = {{dp0u.x, dp0u.y, dp0u.z, dp0u.w},
                                {dzv[0] * p2[0], dzv[1] * p2[1], dzv[2] * p2[2], dzv[3] * p2[3]},
                                {dzv[0] * p1[0], dzv[1] * p1[1], dzv[2] * p1[2], dzv[3] * p1[3]}};
        *reinterpret_cast<float4*>(dp1_s + at) = make_float4(dp[1][0], dp[1][1], dp[1][2], dp[1][3]);
        *reinterpret_cast<float4*>(dp2_s + at) = make_float4(dp[2][0], dp[2][1], dp[2][2], dp[2][3]);
        const float* const xs[3] = {xg, xa, xb};
#pragma unroll
        for (int j = 0; j < 3; ++j)
#pragma unroll
          for (int k = 0; k < kTaps; ++k)
            if (k >= kTaps - kp)
#pragma unroll
              for (int e = 0; e < 4; ++e) dwp[j][k] = fmaf(dp[j][e], xs[j][e + 1 + k], dwp[j][k]);
      }
      if (tid < extra) {
        const int i = kSteps + tid, s = kFirst + i;
        const float p1 = b2b_staged_projection(x_stage(1), wp_s + 32, kp, s);
        const float v = b2b_staged_projection(x_stage(2), wp_s + 64, kp, s);
        const float gate = b2b_staged_projection(x_stage(0), wp_s, kp, s);
        const float g = row_at(dout_s, i);
        const float dzb = fmaf(skip, g * gate, boundary_s[2 * tid + 1]);
        dp0_s[Split::output_offset(i)] = g * fmaf(skip, p1 * v, boundary_s[2 * tid]);
        dp1_s[Split::output_offset(i)] = dzb * v;
        dp2_s[Split::output_offset(i)] = dzb * p1;
      }
    }
    __syncthreads();  // the dp rows are in place (kDwmGroup: and dwm's sums); the stage and dout's row are free
    if (group == 0 && tile + gridDim.y < tiles) stage(tile + gridDim.y);
    cp_async_commit();

    // 5. dwm: the two warpgroups take lag blocks a % 2 (kDwmGroup: the third took them all in step 3).
    if constexpr (!kDwmGroup) lag_blocks(group, 2);

    // 6. dx_j[t] = sum_k wp_j[k] dp_j[t + Kp - 1 - k]: w[j][k] takes dp_j at t + 3 - k.
    const float* const dps[3] = {dp0_s, dp1_s, dp2_s};
#pragma unroll 1
    for (int u = tid; u < kSteps / 4; u += kThreads) {
      const int64_t t = j0 + 4 * u;
      if (t >= n) break;
#pragma unroll
      for (int j = 0; j < 3; ++j) {
        float win[8];
        const float4 lo4 = *reinterpret_cast<const float4*>(dps[j] + Split::output_offset(4 * u));
        const float4 hi4 = *reinterpret_cast<const float4*>(dps[j] + Split::output_offset(4 * u + 4));
        win[0] = lo4.x, win[1] = lo4.y, win[2] = lo4.z, win[3] = lo4.w;
        win[4] = hi4.x, win[5] = hi4.y, win[6] = hi4.z, win[7] = hi4.w;
        float o[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float sum = 0.0f;
#pragma unroll
          for (int k = 0; k < kTaps; ++k)
            if (k >= kTaps - kp) sum = fmaf(w[j][k], win[e + 3 - k], sum);
          o[e] = sum;
        }
        float* const row = dx0 + j * p.dx_stride[1] + t;
        if (n - t >= 4 && aligned(row)) {
          store_raw16(row, make_uint4(__float_as_uint(o[0]), __float_as_uint(o[1]), __float_as_uint(o[2]),
                                      __float_as_uint(o[3])));
        } else {
          for (int e = 0; e < 4 && e < n - t; ++e) row[e] = o[e];
        }
      }
    }
  }

  // The block's sums in a fixed order: dwp and dskip by a shuffle tree per warp, then the warps in
  // order; dwm's lag l from lag block a's diagonal l - 64 a (a ascending). Over dp0's row (the last
  // tile's barrier is passed).
  cp_async_wait<0>();
  __syncthreads();
  constexpr int kRed = 3 * kTaps + 1;
  float* const red_s = dp0_s;                      // [8 warps][kRed]
  float* const lags_s = dp0_s + kThreads / 32 * kRed;  // [kMixerBlocks][128]
#pragma unroll
  for (int j = 0; j < 3; ++j)
#pragma unroll
    for (int k = 0; k < kTaps; ++k) {
      const float sum = warp_sum(dwp[j][k]);
      if (lane == 0) red_s[warp * kRed + j * kTaps + k] = sum;
    }
  {
    const float sum = warp_sum(dskip);
    if (lane == 0) red_s[warp * kRed + 3 * kTaps] = sum;
  }
#pragma unroll
  for (int a = 0; a < kMixerBlocks; ++a)
    if (owns_lag_block(a)) lags_s[128 * a + group_tid] = dwm[a];
  __syncthreads();
  const int slots = 3 * kp + km + 1;
  float* const part = partials + ((c * p.batch + b) * int64_t(gridDim.y) + blockIdx.y) * slots;
  for (int s = tid; s < slots; s += kThreads) {
    float sum = 0.0f;
    if (s < 3 * kp || s == slots - 1) {
      const int r = s < 3 * kp ? (s / kp) * kTaps + s % kp + kTaps - kp : 3 * kTaps;
      for (int w_ = 0; w_ < kThreads / 32; ++w_) sum += red_s[w_ * kRed + r];
    } else {
      const int lag = km - 1 - (s - 3 * kp);
      for (int a = 0; a < kMixerBlocks; ++a) {
        const int d = lag - 64 * a + 63;
        if (d >= 0 && d < 127) sum += lags_s[128 * a + d];
      }
    }
    part[s] = sum;
  }
#endif
}

}  // namespace causalconv::detail
