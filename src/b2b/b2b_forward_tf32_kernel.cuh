// Fused b2b_causal_conv1d forward for fp32 with wide mixers (Km >= kB2BTcMinMixerWidth): the
// projections on the CUDA cores, the mixer on tf32 tensor cores split three ways
// (common/toeplitz_tf32.cuh: the precision, the fragments, the swizzle).
//
// A block owns channel c of batch b and walks 2048-step tiles (128 chunks of 16). With H = mixer
// blocks - 1, per tile starting at step j0:
//   1. rows 3c, 3c+1, 3c+2 of x over steps [j0 - 16 H - kReach, j0 + 2048) are in the stage (plain
//      fp32 rows by cp.async, zero outside [0, L));
//   2. each thread takes steps of the z range [j0 - 16 H, j0 + 2048): x1, v by the direct
//      projections (Kp FMAs each) and z = x1 v, split into tf32 hi / lo tiles; for the tile's own
//      steps also the gate x2 (row 3c's projection), into a gate tile. The stage is then free, and
//      the next tile's rows are copied into it while the tensor cores work. kUnitProjections
//      (Kp <= 4): by 16-byte units with the taps in registers (b2b_tf32_unit_projections), instead
//      of a step at a time through a tap loop over shared memory (~70 % of the tile's instructions
//      at Kp 3, Km 16);
//   3. each warp's 32 output chunks: h = Tm * z (the tf32x3 MMAs over z's tiles), then
//      out = gate * (h + skip * z), with z as hi + lo, into the output tile, written back in
//      16-byte units.
// One stage (not two: the x rows are done with before the MMAs) keeps it at ~68 KB, 3 blocks per SM.
// Times before 0 read zero x, so p and z are zero there, as the causal padding asks. A tile
// whose mixer sums are not all finite (a NaN or infinity met by the Toeplitz blocks' zero lags,
// common/toeplitz_guard.cuh) is recomputed by the direct mixer loop over the same z.
#pragma once

#include "b2b/b2b_fp32_projections.cuh"
#include "b2b/b2b_kernels.h"
#include "b2b/b2b_tiling.cuh"
#include "common/toeplitz_guard.cuh"
#include "common/toeplitz_tf32.cuh"

namespace causalconv::detail {

// Shared memory (bytes, multiples of 16): the stage of the three x rows, z's hi and lo tiles, the
// gate and output tiles (chunk rows padded to 20 words: a warp's accumulator-order accesses hit 32
// distinct banks), the mixer's split lag-ordered filter and the three projections' taps. One
// layout for every mixer width (the widest's, ~70 KB; the narrowest's would be ~64 KB, also 3
// blocks per SM): the kernel's code does not depend on the block count, so one instantiation.
struct B2BTf32Layout {
  static constexpr int kMaxBlocks = toeplitz_blocks(256);
  static constexpr int kReach = 32;  // steps staged before the z range: Kp - 1 <= 31, whole units
  static constexpr int kZChunks = ToeplitzTile::kChunks + kMaxBlocks - 1;
  static constexpr int kXSteps = 16 * kZChunks + kReach;  // per x row, at most
  static constexpr int kXUnits = kXSteps / 4;
  static constexpr int kXBytes = 4 * kXSteps;
  static constexpr int kStage = 3 * kXBytes;
  static constexpr int kZBytes = 64 * kZChunks;
  static constexpr int kZHi = kStage;
  static constexpr int kZLo = kZHi + kZBytes;
  static constexpr int kOutRow = 20;
  static constexpr int kTileBytes = 4 * ToeplitzTile::kChunks * kOutRow;
  static constexpr int kGate = kZLo + kZBytes;
  static constexpr int kOut = kGate + kTileBytes;
  static constexpr int kFilterWords = toeplitz_lag_filter_size<kMaxBlocks>();
  static constexpr int kWm = kOut + kTileBytes;  // hi, then lo
  static constexpr int kWp = kWm + 2 * 4 * kFilterWords;                  // [3][32] taps in order
  static constexpr int kBytes = kWp + 4 * 3 * 32;
};

// The guard's slow path (common/toeplitz_guard.cuh): out for the tile's steps in the row by the
// direct mixer loop over this tile's z (hi + lo) and gate. (b2b_direct.cuh's loops from global
// memory, out of line too, cost this kernel 101 -> 96 registers with a 20-byte spill.)
static __device__ __noinline__ void b2b_tf32_direct_tile(float* out_s, const float* gate_s, const unsigned char* z_hi_s,
                                                  const unsigned char* z_lo_s, const float* wm, int64_t wm_stride,
                                                  int km, int halo, float skip, int64_t j0, int64_t n) {
  using Layout = B2BTf32Layout;
  auto z = [&](int zi) {
    const int offset = tf32_element_offset(zi >> 4, zi & 15);
    return __uint_as_float(*reinterpret_cast<const uint32_t*>(z_hi_s + offset)) +
           __uint_as_float(*reinterpret_cast<const uint32_t*>(z_lo_s + offset));
  };
#pragma unroll 1
  for (int i = int(threadIdx.x); i < ToeplitzTile::kOutputs && j0 + i < n; i += ToeplitzTile::kThreads) {
    const int zi = i + 16 * halo;  // z index of step j0 + i
    float h = 0.0f;
#pragma unroll 1
    for (int k = 0; k < km; ++k) h = fmaf(wm[int64_t(k) * wm_stride], z(zi - (km - 1 - k)), h);
    const int o = (i >> 4) * Layout::kOutRow + (i & 15);
    out_s[o] = gate_s[o] * fmaf(skip, z(zi), h);
  }
}

// Block (b*D + c, y) walks tiles y, y + gridDim.y, ...
template <bool kUnitProjections>
__global__ void __launch_bounds__(ToeplitzTile::kThreads)
    b2b_forward_tf32x3_kernel(B2BForwardParams p, B2BTiling tiling) {
  using Tile = ToeplitzTile;
  using Layout = B2BTf32Layout;
  const int kp = int(p.proj_width), km = int(p.mixer_width);
  const int blocks = toeplitz_blocks(km), halo = blocks - 1;
  const int z_steps = 16 * (Tile::kChunks + halo);
  const int x_units = (z_steps + Layout::kReach) / 4;

  unsigned char* smem = toeplitz_shared();
  unsigned char* z_hi_s = smem + Layout::kZHi;
  unsigned char* z_lo_s = smem + Layout::kZLo;
  float* gate_s = reinterpret_cast<float*>(smem + Layout::kGate);
  float* out_s = reinterpret_cast<float*>(smem + Layout::kOut);
  uint32_t* wm_hi_s = reinterpret_cast<uint32_t*>(smem + Layout::kWm);
  uint32_t* wm_lo_s = wm_hi_s + Layout::kFilterWords;
  float* wp_s = reinterpret_cast<float*>(smem + Layout::kWp);  // row j's taps at wp_s + 32 j
  auto x_stage = [&](int j) { return reinterpret_cast<float*>(smem + j * Layout::kXBytes); };

  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, g = lane >> 2, q = lane & 3;
  const int64_t b = div_nonneg(int64_t(blockIdx.x), p.dim);
  const int64_t c = int64_t(blockIdx.x) - b * p.dim;
  const int64_t n = p.length;
  const float* x0 = static_cast<const float*>(p.x) + b * p.x_stride[0] + 3 * c * p.x_stride[1];
  float* out = static_cast<float*>(p.out) + b * p.out_stride[0] + c * p.out_stride[1];
  auto stage = [&](int64_t tile) {
    const int64_t x_first = tile * Tile::kOutputs - 16 * int64_t(halo) - Layout::kReach;  // local step 0
    for (int j = 0; j < 3; ++j) {
      const float* row = x0 + j * p.x_stride[1];
      toeplitz_stage_units<Layout::kXUnits>(reinterpret_cast<unsigned char*>(x_stage(j)), row,
                                            (reinterpret_cast<uintptr_t>(row) & 15) == 0, x_first, x_units, n,
                                            [](int u) { return 16 * u; });
    }
  };

  if (int64_t(blockIdx.y) < tiling.tiles) stage(blockIdx.y);
  cp_async_commit();
  const float* const wm = static_cast<const float*>(p.weight_mixer) + c * p.wm_stride[0];
  tf32_lag_filter<Layout::kMaxBlocks>(wm_hi_s, wm_lo_s, wm, p.wm_stride[1], km);
  b2b_stage_projection_taps(wp_s, p, c, Tile::kThreads);
  const float skip = static_cast<const float*>(p.skip_bias)[c * p.skip_stride];

#pragma unroll 1
  for (int64_t tile = blockIdx.y; tile < tiling.tiles; tile += gridDim.y) {
    const int64_t j0 = tile * Tile::kOutputs;  // < n
    cp_async_wait<0>();  // this tile's copies are done
    __syncthreads();     // ... every thread's; the filters are in place, z, gate_s and out_s free

    // 2. z over the tile and the mixer's halo before it; the gate over the tile.
    const float* x0_s = x_stage(0);
    const float* x1_s = x_stage(1);
    const float* v_s = x_stage(2);
    if constexpr (kUnitProjections) {
      b2b_tf32_unit_projections<Layout::kReach>(
          z_hi_s, z_lo_s, gate_s, x0_s, x1_s, v_s, wp_s, kp, z_steps / 4, 16 * halo, Tile::kThreads,
          [](int u) { return tf32_unit_offset(u >> 2, u & 3); },
          [](int i) { return (i >> 4) * Layout::kOutRow + (i & 15); });
    } else {
#pragma unroll 1
      for (int zi = int(threadIdx.x); zi < z_steps; zi += Tile::kThreads) {
        const int s = zi + Layout::kReach;
        const float z = b2b_staged_projection(x1_s, wp_s + 32, kp, s) * b2b_staged_projection(v_s, wp_s + 64, kp, s);
        const int offset = tf32_element_offset(zi >> 4, zi & 15);
        uint32_t hi, lo;
        tf32_split(z, hi, lo);
        *reinterpret_cast<uint32_t*>(z_hi_s + offset) = hi;
        *reinterpret_cast<uint32_t*>(z_lo_s + offset) = lo;
        const int i = zi - 16 * halo;  // output step in the tile
        if (i >= 0) gate_s[(i >> 4) * Layout::kOutRow + (i & 15)] = b2b_staged_projection(x0_s, wp_s, kp, s);
      }
    }
    __syncthreads();  // z and the gate in place; the stage free
    if (tile + gridDim.y < tiling.tiles) stage(tile + gridDim.y);
    cp_async_commit();

    // 3. The warp's output chunks: z chunk = output chunk + H - i.
    float h[Tile::kWarpTiles][4];
    toeplitz_tf32x3_mma_tiles<Tile::kWarpTiles>(h, wm_hi_s, wm_lo_s, z_hi_s, z_lo_s, blocks,
                                                warp * Tile::kWarpChunks + halo, lane);
    const bool vote = any_nonfinite<Tile::kWarpTiles * 4>(&h[0][0]);
#pragma unroll
    for (int t = 0; t < Tile::kWarpTiles; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int chunk = warp * Tile::kWarpChunks + 8 * t + 2 * q + (e & 1), step = g + 8 * (e >> 1);
        const int offset = tf32_element_offset(chunk + halo, step);
        const float z = __uint_as_float(*reinterpret_cast<const uint32_t*>(z_hi_s + offset)) +
                        __uint_as_float(*reinterpret_cast<const uint32_t*>(z_lo_s + offset));
        const int o = chunk * Layout::kOutRow + step;
        out_s[o] = gate_s[o] * fmaf(skip, z, h[t][e]);
      }
    if (guarded_tile_barrier<true>(vote)) {
      b2b_tf32_direct_tile(out_s, gate_s, z_hi_s, z_lo_s, wm, p.wm_stride[1], km, halo, skip, j0, n);
      __syncthreads();
    }
    toeplitz_store_outputs(out, out_s, j0, n,
                           [](int u) { return (u >> 2) * Layout::kOutRow + 4 * (u & 3); });
  }
}

}  // namespace causalconv::detail
