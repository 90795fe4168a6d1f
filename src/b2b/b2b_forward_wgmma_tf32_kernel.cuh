// Fused b2b_causal_conv1d forward for fp32 with wide mixers on Hopper's warpgroup MMA (sm_90a;
// Km >= 65 (kB2BWgmmaTf32MinMixerWidth), Kp <= 4, any rows): b2b_forward_tf32_kernel.cuh's
// structure with 4096-step tiles, the mixer as the 64-step-chunk Toeplitz form on tf32 operands split
// three ways (common/toeplitz_wgmma_tf32.cuh), the projections on the CUDA cores by 16-byte units.
//
// Why: the mma.sync form's mixer costs ~115 instructions a warp per 16-step Toeplitz block (sm_90a,
// 24 of them MMAs); here one wgmma reads a 64 x 64 B operand once for the warpgroup. History: written
// in session 31 with the projections a step at a time (b2b_staged_projection), it lost to the
// mma.sync form on the H100 (session 33: flat ~600 us up to Km65, Km128 634 against 582 us) and was
// deleted; the flat cost was the projections' tap loop (~115 instructions a z step, 4096 + 64 H
// steps a tile over 128 threads at 2 blocks per SM), which b2b_tf32_unit_projections cuts to ~25.
//
// A block owns channel c of batch b and walks 4096-step tiles (64 chunks of 64). With H = mixer
// blocks - 1, per tile starting at step j0:
//   1. rows 3c, 3c+1, 3c+2 of x over steps [j0 - 64 H - kReach, j0 + 4096) are in the stage (plain
//      fp32 rows, cp.async where 16-byte aligned, zero outside [0, L));
//   2. z = x1 v over the z range [j0 - 64 H, j0 + 4096) and the gate over the tile's own steps
//      (b2b_tf32_unit_projections), z split into tf32 hi / lo tiles in the MMA's layout. The stage
//      is then free, and the next tile's rows are copied into it while the tensor cores work;
//   3. h = Tm * z (wgmma_tf32x3_toeplitz); out = gate * (h + skip * z), with z as hi + lo, in place
//      of the gate, written back in 16-byte units. A tile whose mixer sums are not all finite
//      (common/toeplitz_guard.cuh) takes the direct mixer loop over the same z instead; the block
//      votes before either writes, as both read the gate.
// ~107 KB of shared memory at Km <= 129 (the x stage 51 KB, z 36 KB, the gate 17 KB): 2 blocks/SM.
#pragma once

#include "b2b/b2b_fp32_projections.cuh"
#include "b2b/b2b_kernels.h"
#include "b2b/b2b_tiling.cuh"
#include "common/sm90_primitives.cuh"
#include "common/toeplitz_guard.cuh"
#include "common/toeplitz_wgmma_tf32.cuh"

namespace causalconv::detail {

// Shared memory (bytes from the 1024-byte aligned start): the z tiles (hi, lo), the stage of the
// three x rows, the gate / output tile (64 chunk rows of 68 words), the mixer's split lag filter and
// the projections' taps.
template <int kMixerBlocks>
struct B2BWgmmaTf32Layout {
  using Split = WgmmaTf32Tile<kMixerBlocks>;
  static constexpr int kReach = 32;  // steps staged before the z range: Kp - 1 <= 31, whole units
  static constexpr int kZSteps = 64 * (WgmmaToeplitzTile::kChunks + kMixerBlocks - 1);
  static constexpr int kXSteps = kZSteps + kReach;  // per x row
  static constexpr int kXUnits = kXSteps / 4;
  static constexpr int kXBytes = 4 * kXSteps;
  static constexpr int kZHi = 0;
  static constexpr int kZLo = Split::kBytes;
  static constexpr int kStage = 2 * Split::kBytes;
  static constexpr int kGate = kStage + 3 * kXBytes;
  static constexpr int kWm = kGate + 4 * WgmmaToeplitzTile::kChunks * Split::kOutRow;  // hi, then lo
  static constexpr int kWp = kWm + 2 * 4 * Split::kLags;                               // [3][32] taps
  static constexpr int kBytes = 1024 + kWp + 4 * 3 * 32;
};

// Block (b*D + c, y) walks tiles y, y + gridDim.y, ... of `tiles` 4096-step tiles.
template <int kMixerBlocks>
__global__ void __launch_bounds__(WgmmaToeplitzTile::kThreads)
    b2b_forward_wgmma_tf32x3_kernel(B2BForwardParams p, int64_t tiles) {
#ifdef CAUSALCONV_SM90A
  using Tile = WgmmaToeplitzTile;
  using Layout = B2BWgmmaTf32Layout<kMixerBlocks>;
  using Split = WgmmaTf32Tile<kMixerBlocks>;
  constexpr int kHalo = kMixerBlocks - 1;
  const int kp = int(p.proj_width), km = int(p.mixer_width);

  unsigned char* const smem = sm90::aligned_dynamic_shared();
  unsigned char* const z_hi_s = smem + Layout::kZHi;
  unsigned char* const z_lo_s = smem + Layout::kZLo;
  float* const gate_s = reinterpret_cast<float*>(smem + Layout::kGate);  // then the outputs
  uint32_t* const wm_hi_s = reinterpret_cast<uint32_t*>(smem + Layout::kWm);
  uint32_t* const wm_lo_s = wm_hi_s + Split::kLags;
  float* const wp_s = reinterpret_cast<float*>(smem + Layout::kWp);  // row j's taps at wp_s + 32 j
  auto x_stage = [&](int j) { return reinterpret_cast<float*>(smem + Layout::kStage + j * Layout::kXBytes); };
  auto z_at = [&](int m, int s) {  // z at step s of z chunk m, as hi + lo
    const int offset = wgmma_tf32_element_offset<kMixerBlocks>(m, s);
    return __uint_as_float(*reinterpret_cast<const uint32_t*>(z_hi_s + offset)) +
           __uint_as_float(*reinterpret_cast<const uint32_t*>(z_lo_s + offset));
  };

  const int64_t b = div_nonneg(int64_t(blockIdx.x), p.dim);
  const int64_t c = int64_t(blockIdx.x) - b * p.dim;
  const int64_t n = p.length;
  const float* const x0 = static_cast<const float*>(p.x) + b * p.x_stride[0] + 3 * c * p.x_stride[1];
  float* const out = static_cast<float*>(p.out) + b * p.out_stride[0] + c * p.out_stride[1];
  auto stage = [&](int64_t tile) {
    const int64_t x_first = tile * Tile::kOutputs - 64 * kHalo - Layout::kReach;  // local step 0
    for (int j = 0; j < 3; ++j) {
      const float* row = x0 + j * p.x_stride[1];
      toeplitz_stage_units<Layout::kXUnits>(reinterpret_cast<unsigned char*>(x_stage(j)), row,
                                            (reinterpret_cast<uintptr_t>(row) & 15) == 0, x_first, Layout::kXUnits,
                                            n, [](int u) { return 16 * u; });
    }
  };

  if (int64_t(blockIdx.y) < tiles) stage(blockIdx.y);
  cp_async_commit();
  const float* const wm = static_cast<const float*>(p.weight_mixer) + c * p.wm_stride[0];
  wgmma_tf32_lag_filter<kMixerBlocks>(wm_hi_s, wm_lo_s, wm, p.wm_stride[1], km);
  b2b_stage_projection_taps(wp_s, p, c, Tile::kThreads);
  const float skip = static_cast<const float*>(p.skip_bias)[c * p.skip_stride];

#pragma unroll 1
  for (int64_t tile = blockIdx.y; tile < tiles; tile += gridDim.y) {
    const int64_t j0 = tile * Tile::kOutputs;  // < n
    cp_async_wait<0>();  // this tile's copies are done
    __syncthreads();     // ... every thread's; the filters are in place, z and the gate tile free

    // 2. z over the tile and the mixer's halo before it; the gate over the tile.
    b2b_tf32_unit_projections<Layout::kReach>(
        z_hi_s, z_lo_s, gate_s, x_stage(0), x_stage(1), x_stage(2), wp_s, kp, Layout::kZSteps / 4, 64 * kHalo,
        Tile::kThreads, [](int u) { return wgmma_tf32_unit_offset<kMixerBlocks>(u); },
        [](int i) { return Split::output_offset(i); });
    sm90::fence_proxy_async_shared();  // z's parts, before the MMAs read them
    __syncthreads();                   // z and the gate in place; the stage free
    if (tile + gridDim.y < tiles) stage(tile + gridDim.y);
    cp_async_commit();

    // 3. h[r][n] at output step 64 n + r, z chunk n + H.
    float h[32];
    wgmma_tf32x3_toeplitz<kMixerBlocks>(h, wm_hi_s, wm_lo_s, sm90::smem_u32(z_hi_s), sm90::smem_u32(z_lo_s));
    if (!__syncthreads_or(any_nonfinite<32>(h))) {
      for_each_wgmma_tf32_output([&](int i, int chunk, int step) {
        gate_s[Split::output_offset(64 * chunk + step)] *= fmaf(skip, z_at(chunk + kHalo, step), h[i]);
      });
    } else {  // the guard's slow path: the direct mixer loop over this tile's z, fp32 FMAs in tap order
#pragma unroll 1
      for (int i = int(threadIdx.x); i < Tile::kOutputs && j0 + i < n; i += Tile::kThreads) {
        const int zi = i + 64 * kHalo;  // z index of step j0 + i
        float hd = 0.0f;
#pragma unroll 1
        for (int k = 0; k < km; ++k) {
          const int src = zi - (km - 1 - k);
          hd = fmaf(wm[int64_t(k) * p.wm_stride[1]], z_at(src >> 6, src & 63), hd);
        }
        gate_s[Split::output_offset(i)] *= fmaf(skip, z_at(zi >> 6, zi & 63), hd);
      }
    }
    __syncthreads();  // the output tile in place
    wgmma_tf32_store_outputs<kMixerBlocks>(out, gate_s, j0, n);
  }
#endif
}

}  // namespace causalconv::detail
