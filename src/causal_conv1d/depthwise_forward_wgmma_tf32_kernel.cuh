// Depthwise causal conv forward of fp32 rows on Hopper's warpgroup MMA (sm_90a; dilation 1, unit
// time stride, rows 16-byte aligned or walked from the boundary before them): the 64-step-chunk
// Toeplitz form of depthwise_forward_wgmma_kernel.cuh on tf32 operands split three ways
// (common/toeplitz_tf32.cuh: the precision, ~2^-21 of each term).
//
// Why: the mma.sync tf32 form (depthwise_forward_tf32_kernel.cuh) reached 0.223 ms at fp32 B1 D4096
// L8192 K128 (28 % of copy), 26 % of the dense tf32 peak: every warp loads its own B operand by
// ldmatrix and builds its A quads per block. Here one wgmma reads a 64 x 64 B operand once for the
// warpgroup. Counts at K128: 3 Toeplitz blocks x 8 k-slices x 3 products of m64n64k8 per 4096
// outputs, 19 G MACs in all (64-step chunks cover 192 lags an output against the 16-step form's 144),
// ~80 us at the ~495 TFLOP/s dense tf32 peak against a 63 us byte floor.
//
// Math: y[64 (J + n) + r] = sum_{i < nb} sum_c T_i[r][c] x[64 (J + n - i) + c], T_i[r][c] = wr[64i + r - c]:
// D[r][n] of common/toeplitz_wgmma_tf32.cuh (M = the 64 output steps of a chunk, N = the tile's 64
// chunks, K = 8-step slices of an input chunk) over the staged x rows.
//
// A block (one warpgroup) owns one (b, c) row and walks 4096-step tiles strided by gridDim.y, the
// next tile's copies (cp.async) in flight while the current one computes. Each thread splits the
// units it staged once they land (hi in place, lo into a tile of its own), then the block's barrier
// and the async-proxy fence hand them to the MMAs. The outputs go through shared memory (the
// consumed stage: chunk rows of 68 words, conflict-free for the accumulators' stores) and back in
// 16-byte stores. Tiles whose sums are not all finite are redone by the direct tap loop
// (depthwise_direct.cuh), as in the mma.sync tf32 form.
#pragma once

#include "causal_conv1d/depthwise_direct.cuh"
#include "causal_conv1d/depthwise_kernels.h"
#include "common/sm90_primitives.cuh"
#include "common/toeplitz_guard.cuh"
#include "common/toeplitz_wgmma_tf32.cuh"

namespace causalconv::detail {

// Shared memory of depthwise_forward_wgmma_tf32_kernel<kBlocks> (kBlocks = toeplitz64_blocks(K)):
// two input stages (raw, then the hi parts) and the lo tile (WgmmaTf32Tile's), the split lag
// filters wr_hi, wr_lo; 1024 bytes to align the start.
template <int kBlocks>
struct DepthwiseWgmmaTf32Smem {
  using Tile = WgmmaTf32Tile<kBlocks>;
  static constexpr int kBytes = 1024 + 3 * Tile::kBytes + 2 * 4 * Tile::kLags;
};

// kShiftedRows: rows off the 16-byte boundary, each x row the same distance past one as its y row
// (the launcher checks), walked from the boundary before them (common/toeplitz_mma.cuh); `tiles`,
// the row's own, and the walk's tail past them: as depthwise_forward_tc_kernel's.
template <int kBlocks, bool kShiftedRows>
__global__ void __launch_bounds__(WgmmaToeplitzTile::kThreads)
    depthwise_forward_wgmma_tf32x3_kernel(DepthwiseForwardParams p, int64_t tiles) {
#ifdef CAUSALCONV_SM90A
  using Tile = WgmmaToeplitzTile;
  using Split = WgmmaTf32Tile<kBlocks>;
  unsigned char* const stages = sm90::aligned_dynamic_shared();  // stages 0 and 1: raw, then hi
  unsigned char* const lo_s = stages + 2 * Split::kBytes;        // the lo parts of the tile at work
  uint32_t* const wr_hi_s = reinterpret_cast<uint32_t*>(lo_s + Split::kBytes);
  uint32_t* const wr_lo_s = wr_hi_s + Split::kLags;

  constexpr int kHalo = kBlocks - 1;
  const int64_t bc = int64_t(blockIdx.x);
  const int64_t b = div_nonneg(bc, p.channels), c = bc - b * p.channels;
  const float* x = static_cast<const float*>(p.x) + b * p.x_stride[0] + c * p.x_stride[1];
  float* y = static_cast<float*>(p.y) + b * p.y_stride[0] + c * p.y_stride[1];
  const int lead = kShiftedRows ? toeplitz_shared_lead<float>(x, y) : 0;  // the walk: x_walk[s] = x[s - lead]
  const float* const x_walk = x - lead;
  float* const y_walk = y - lead;
  const int64_t n = p.length + lead;
  const int units = 16 * (Tile::kChunks + kHalo);
  auto stage = [&](int slot, int64_t tile) {
    toeplitz_stage_units_async(stages + slot * Split::kBytes, x_walk, (tile * Tile::kChunks - kHalo) * Tile::kChunk,
                               units, n, [](int u) { return wgmma_tf32_unit_offset<kBlocks>(u); }, lead);
  };

  if (int64_t(blockIdx.y) < tiles) stage(0, blockIdx.y);
  cp_async_commit();
  const float* const w = static_cast<const float*>(p.weight) + c * p.w_stride[0];
  wgmma_tf32_lag_filter<kBlocks>(wr_hi_s, wr_lo_s, w, p.w_stride[1], int(p.width));
  const float bias = p.bias ? static_cast<const float*>(p.bias)[c * p.bias_stride] : 0.0f;

  int slot = 0;
#pragma unroll 1
  for (int64_t tile = blockIdx.y; tile < tiles; tile += gridDim.y, slot ^= 1) {
    const int64_t j0 = tile * Tile::kOutputs;
    unsigned char* const in_s = stages + slot * Split::kBytes;
    cp_async_wait<0>();                                  // this thread's copies of the tile are done
    tf32_split_units(in_s, lo_s, units,  // (lo_s: every thread is past the last MMAs)
                     [](int u) { return wgmma_tf32_unit_offset<kBlocks>(u); });
    sm90::fence_proxy_async_shared();  // the split parts (and the walk's masked first unit) to wgmma's reads
    __syncthreads();                   // every thread's; the filter is in place, the other stage free
    if (tile + gridDim.y < tiles) stage(slot ^ 1, tile + gridDim.y);
    cp_async_commit();

    float acc[32];
    wgmma_tf32x3_toeplitz<kBlocks>(acc, wr_hi_s, wr_lo_s, sm90::smem_u32(in_s), sm90::smem_u32(lo_s));
    __syncthreads();  // every warp's MMAs have read the stage (a warp's wait covers its own)
    // Each accumulator into its chunk row of the output tile (the consumed stage): lane (g, q) stores
    // at banks 8q + g + const, distinct across the warp.
    float* const out_s = reinterpret_cast<float*>(in_s);
    const bool vote = any_nonfinite<32>(acc);
    for_each_wgmma_tf32_output([&](int i, int chunk, int step) {
      const float v = acc[i] + bias;
      out_s[chunk * Split::kOutRow + step] = p.silu ? silu<float>(v) : v;
    });
    if (guarded_tile_barrier<true>(vote)) {
      depthwise_direct_tile<Tile::kOutputs, Tile::kThreads>(
          x, w, p.w_stride[1], int(p.width), j0 - lead, p.length, bias, p.silu,
          [out_s](int i, float v) { out_s[Split::output_offset(i)] = v; });
      __syncthreads();
    }
    wgmma_tf32_store_outputs<kBlocks>(y_walk, out_s, j0, n, lead);
  }
  if constexpr (kShiftedRows)
    depthwise_walk_tail<Tile::kThreads>(x, y, w, p.w_stride[1], int(p.width), tiles, Tile::kOutputs, lead, p.length,
                                        bias, p.silu);
#endif
}

}  // namespace causalconv::detail
