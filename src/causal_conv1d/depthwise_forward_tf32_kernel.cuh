// Depthwise causal conv forward of fp32 rows on the tensor cores (dilation 1, unit time stride):
// the blocked Toeplitz form on tf32 MMAs split three ways (common/toeplitz_tf32.cuh: the precision,
// the fragments, the tiles' swizzle).
//
// A block owns one (b, c) row and walks 2048-step tiles strided by gridDim.y, staging the next
// tile by cp.async while the current one computes (two stages). Each thread splits the units it
// staged itself once they land (hi in place, lo into a tile of its own: once per value, where a
// split at each use would cost it once per Toeplitz block, ~9 instructions each on sm_90). Each
// warp makes 32 output chunks, adds bias (and silu) in fp32, and the block writes the tile back
// through shared memory in 16-byte units. Tiles whose sums are not all finite are redone by the
// direct tap loop (depthwise_direct.cuh). kShiftedRows and `tiles` (the row's own; the walk's
// tail past them by depthwise_walk_tail): as the 16-bit form's (depthwise_forward_tc_kernel.cuh).
#pragma once

#include "causal_conv1d/depthwise_kernels.h"
#include "causal_conv1d/depthwise_direct.cuh"
#include "common/toeplitz_tf32.cuh"

namespace causalconv::detail {

// Shared memory of the kernel: two input stages, the lo parts of one, the output tile (chunk rows
// of 16 values padded to 20 words: the accumulator stores hit 32 distinct banks), the split
// lag-ordered filter. One layout for every width (the widest's): the kernel's code does not depend
// on the block count, and its ~39 KB keep as many blocks per SM as its registers allow.
struct DepthwiseTf32Smem {
  static constexpr int kMaxBlocks = toeplitz_blocks(int(kDepthwiseTcMaxWidth));
  static constexpr int kChunks = ToeplitzTile::kChunks + kMaxBlocks - 1;  // outputs' chunks + halo
  static constexpr int kUnits = 4 * kChunks;
  static constexpr int kInBytes = 16 * kUnits;
  static constexpr int kOutRow = 20;
  static constexpr int kOutWords = ToeplitzTile::kChunks * kOutRow;
  static constexpr int kFilterWords = toeplitz_lag_filter_size<kMaxBlocks>();
  static constexpr int kBytes = 3 * kInBytes + 4 * kOutWords + 2 * 4 * kFilterWords;
};

template <bool kShiftedRows>
__global__ void __launch_bounds__(ToeplitzTile::kThreads)
    depthwise_forward_tf32x3_kernel(DepthwiseForwardParams p, int64_t tiles) {
  using Tile = ToeplitzTile;
  using Smem = DepthwiseTf32Smem;
  unsigned char* smem = toeplitz_shared();             // stages 0 and 1 (raw, then the hi parts)
  unsigned char* lo_s = smem + 2 * Smem::kInBytes;     // the lo parts of the tile at work
  float* out_s = reinterpret_cast<float*>(lo_s + Smem::kInBytes);  // [kChunks][kOutRow]
  uint32_t* wr_hi_s = reinterpret_cast<uint32_t*>(out_s + Smem::kOutWords);
  uint32_t* wr_lo_s = wr_hi_s + Smem::kFilterWords;
  const int width = int(p.width), blocks = toeplitz_blocks(width), halo = blocks - 1;
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int64_t bc = int64_t(blockIdx.x);
  const int64_t b = div_nonneg(bc, p.channels), c = bc - b * p.channels;
  const float* x = static_cast<const float*>(p.x) + b * p.x_stride[0] + c * p.x_stride[1];
  float* y = static_cast<float*>(p.y) + b * p.y_stride[0] + c * p.y_stride[1];
  const int lead = kShiftedRows ? toeplitz_shared_lead<float>(x, y) : 0;  // the walk: x_walk[s] = x[s - lead]
  const float* const x_walk = x - lead;
  float* const y_walk = y - lead;
  const int64_t n = p.length + lead;
  const bool x_aligned = (reinterpret_cast<uintptr_t>(x_walk) & 15) == 0;
  const int units = 4 * (Tile::kChunks + halo);
  auto stage = [&](int slot, int64_t tile) {
    toeplitz_stage_units<Smem::kUnits>(
        smem + slot * Smem::kInBytes, x_walk, x_aligned, tile * Tile::kOutputs - 16 * halo, units, n,
        [](int u) { return tf32_unit_offset(u >> 2, u & 3); }, lead);
  };

  if (int64_t(blockIdx.y) < tiles) stage(0, blockIdx.y);
  cp_async_commit();
  const float* const w = static_cast<const float*>(p.weight) + c * p.w_stride[0];
  tf32_lag_filter<Smem::kMaxBlocks>(wr_hi_s, wr_lo_s, w, p.w_stride[1], width);
  const float bias = p.bias ? static_cast<const float*>(p.bias)[c * p.bias_stride] : 0.0f;

  const int g = lane >> 2, q = lane & 3;
  int slot = 0;
#pragma unroll 1
  for (int64_t tile = blockIdx.y; tile < tiles; tile += gridDim.y, slot ^= 1) {
    const int64_t j0 = tile * Tile::kOutputs;
    cp_async_wait<0>();  // this thread's copies of this tile are done
    tf32_split_units(smem + slot * Smem::kInBytes, lo_s, units,  // (lo_s: every thread is past the last MMAs)
                     [](int u) { return tf32_unit_offset(u >> 2, u & 3); });
    __syncthreads();     // every thread's units split; the filter is in place, the other stage and out_s free
    if (tile + gridDim.y < tiles) stage(slot ^ 1, tile + gridDim.y);
    cp_async_commit();
    float acc[Tile::kWarpTiles][4];
    toeplitz_tf32x3_mma_tiles<Tile::kWarpTiles>(acc, wr_hi_s, wr_lo_s, smem + slot * Smem::kInBytes, lo_s, blocks,
                                                warp * Tile::kWarpChunks + halo, lane);
    const bool vote = any_nonfinite<Tile::kWarpTiles * 4>(&acc[0][0]);
#pragma unroll
    for (int t = 0; t < Tile::kWarpTiles; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int chunk = warp * Tile::kWarpChunks + 8 * t + 2 * q + (e & 1), step = g + 8 * (e >> 1);
        const float v = acc[t][e] + bias;
        out_s[chunk * Smem::kOutRow + step] = p.silu ? silu<float>(v) : v;
      }
    if (guarded_tile_barrier<true>(vote)) {
      depthwise_direct_tile<Tile::kOutputs, Tile::kThreads>(
          x, w, p.w_stride[1], width, j0 - lead, p.length, bias, p.silu,
          [out_s](int i, float v) { out_s[(i >> 4) * Smem::kOutRow + (i & 15)] = v; });
      __syncthreads();
    }
    toeplitz_store_outputs(
        y_walk, out_s, j0, n, [](int u) { return (u >> 2) * Smem::kOutRow + 4 * (u & 3); }, lead);
  }
  if constexpr (kShiftedRows)
    depthwise_walk_tail<Tile::kThreads>(x, y, w, p.w_stride[1], width, tiles, Tile::kOutputs, lead, p.length, bias,
                                        p.silu);
}

}  // namespace causalconv::detail
