// Depthwise causal conv forward on the tensor cores (16-bit dtypes, dilation 1, rows
// with unit time stride): the blocked Toeplitz form of common/toeplitz_mma.cuh.
//
// A block owns one (b, c) row and walks 2048-step tiles strided by gridDim.y. Once per
// block it builds the Toeplitz A fragments of the channel's filter in shared memory. Per
// tile the input chunks [j0/16 - halo, j0/16 + 128) (halo = blocks - 1) sit as raw 16-bit
// values in a swizzled shared stage; while a tile computes, the next tile's input goes by
// cp.async into the other stage. Each warp makes 32 output chunks with blocks x 4 mma.sync,
// adds bias (and silu) in fp32, and the block writes the tile back through shared memory in
// 16-byte units. kGuard: tiles whose sums are not all finite are redone by the direct tap loop
// (depthwise_direct.cuh). kShiftedRows: rows of x and y off the 16-byte boundary by the same lead
// are walked from the boundary before them (common/toeplitz_mma.cuh, kToeplitzShiftedRows).
// `tiles` counts the row's own tiles (in all four depthwise Toeplitz forwards): where a shifted walk
// goes past them, the block that walked the last computes the walk's few outputs past them (at most
// 7) cooperatively (depthwise_walk_tail).
#pragma once

#include <type_traits>

#include "causal_conv1d/depthwise_kernels.h"
#include "causal_conv1d/depthwise_direct.cuh"
#include "common/toeplitz_mma.cuh"

namespace causalconv::detail {

// The warp's outputs (acc of toeplitz_mma_tiles_shared) plus bias, through silu when asked, into
// the block's output tile out_s[chunk * 16 + step]. On sm_90 each m16n8 tile's two 8 x 8 halves
// (steps 0-7 and 8-15 of 8 chunks, in the mma fragment layout) go by stmatrix .trans, a chunk's
// 8 steps as one 16-byte row: two instructions for the thread's 16 values, which took 16
// two-byte stores (2-way bank conflicts each).
template <typename T>
__device__ __forceinline__ void depthwise_tc_outputs_to_shared(T* out_s, const float (&acc)[ToeplitzTile::kWarpTiles][4],
                                                               float bias, bool apply_silu, int warp, int lane) {
  using Tile = ToeplitzTile;
  auto value = [&](float v) { return apply_silu ? silu<T>(v + bias) : v + bias; };
#if defined(CAUSALCONV_CUDA_EMULATION) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
  constexpr bool kHalf = std::is_same_v<T, __half>;
  // Lane l gives row l % 8 (chunk) of matrix l / 8 = 2 (tile - 2x) + half of stmatrix x.
  const int m = lane >> 3, c = lane & 7;
#pragma unroll
  for (int x = 0; x < Tile::kWarpTiles / 2; ++x) {
    uint32_t r[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int t = 2 * x + (i >> 1), h = i & 1;
      r[i] = pack2<kHalf>(value(acc[t][2 * h]), value(acc[t][2 * h + 1]));
    }
    const int chunk = warp * Tile::kWarpChunks + 8 * (2 * x + (m >> 1)) + c;
    stmatrix_x4_trans(out_s + chunk * Tile::kChunk + 8 * (m & 1), r);
  }
#else
  const int g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int t = 0; t < Tile::kWarpTiles; ++t) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int chunk = warp * Tile::kWarpChunks + 8 * t + 2 * q + (e & 1), step = g + 8 * (e >> 1);
      out_s[chunk * Tile::kChunk + step] = from_float<T>(value(acc[t][e]));
    }
  }
#endif
}

// Shared bytes of the kernel: two input stages, the output tile, the lag-ordered
// filter, the A fragments (one 16-byte entry per block and lane).
template <int kMaxBlocks>
constexpr int depthwise_tc_smem_bytes() {
  return 2 * ToeplitzStage<kMaxBlocks>::kInBytes + 2 * ToeplitzTile::kOutputs +
         2 * toeplitz_lag_filter_size<kMaxBlocks>() + 16 * 32 * kMaxBlocks;
}

template <typename T, int kMaxBlocks, bool kGuard, bool kShiftedRows>
__global__ void __launch_bounds__(ToeplitzTile::kThreads)
    depthwise_forward_tc_kernel(DepthwiseForwardParams p, int64_t tiles) {
  using Tile = ToeplitzTile;
  using Stage = ToeplitzStage<kMaxBlocks>;
  constexpr bool kHalf = std::is_same<T, __half>::value;
  static_assert((2 * Stage::kInBytes + 2 * Tile::kOutputs + 2 * toeplitz_lag_filter_size<kMaxBlocks>()) % 16 == 0,
                "16-byte fragment entries");
  unsigned char* smem = toeplitz_shared();                          // stages 0 and 1: swizzled input chunks
  T* out_s = reinterpret_cast<T*>(smem + 2 * Stage::kInBytes);     // [kOutputs]
  T* wr_s = out_s + Tile::kOutputs;                                // toeplitz_lag_filter
  uint4* frag_s = reinterpret_cast<uint4*>(wr_s + toeplitz_lag_filter_size<kMaxBlocks>());
  const int width = int(p.width), blocks = toeplitz_blocks(width), halo = blocks - 1;
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int64_t bc = int64_t(blockIdx.x);
  const int64_t b = div_nonneg(bc, p.channels), c = bc - b * p.channels;
  const T* x = static_cast<const T*>(p.x) + b * p.x_stride[0] + c * p.x_stride[1];
  T* y = static_cast<T*>(p.y) + b * p.y_stride[0] + c * p.y_stride[1];
  // The walk: the row behind `lead` zeros (walked step s = row step s - lead), from x_walk.
  const int lead = kShiftedRows ? toeplitz_shared_lead<T>(x, y) : 0;
  const T* const x_walk = x - lead;
  T* const y_walk = y - lead;
  const int64_t n = p.length + lead;
  const bool x_aligned = (reinterpret_cast<uintptr_t>(x_walk) & 15) == 0;
  const int units = 2 * (Tile::kChunks + halo);
  auto stage = [&](int slot, int64_t tile) {
    toeplitz_stage<Stage::kUnits>(smem + slot * Stage::kInBytes, x_walk, x_aligned,
                                  tile * Tile::kOutputs - 16 * halo, units, n, lead);
  };

  if (int64_t(blockIdx.y) < tiles) stage(0, blockIdx.y);
  cp_async_commit();
  const T* const w = static_cast<const T*>(p.weight) + c * p.w_stride[0];
  toeplitz_lag_filter<kMaxBlocks>(wr_s, w, p.w_stride[1], width);
  const float bias = p.bias ? to_float(static_cast<const T*>(p.bias)[c * p.bias_stride]) : 0.0f;
  __syncthreads();
  toeplitz_fragments_to_shared<false>(frag_s, wr_s, blocks);

  int slot = 0;
#pragma unroll 1
  for (int64_t tile = blockIdx.y; tile < tiles; tile += gridDim.y, slot ^= 1) {
    const int64_t j0 = tile * Tile::kOutputs;
    cp_async_wait<0>();  // this tile's copies are done
    __syncthreads();     // ... every thread's; the fragments are in place, the other stage and out_s free
    if (tile + gridDim.y < tiles) stage(slot ^ 1, tile + gridDim.y);
    cp_async_commit();

    float acc[Tile::kWarpTiles][4];
    toeplitz_mma_tiles_shared<kHalf, false, Tile::kWarpTiles>(acc, frag_s, smem + slot * Stage::kInBytes, blocks,
                                                               warp * Tile::kWarpChunks + halo, lane);
    const bool vote = kGuard && any_nonfinite<Tile::kWarpTiles * 4>(&acc[0][0]);
    depthwise_tc_outputs_to_shared(out_s, acc, bias, p.silu, warp, lane);
    if (guarded_tile_barrier<kGuard>(vote)) {
      depthwise_direct_tile<Tile::kOutputs, Tile::kThreads>(x, w, p.w_stride[1], width, j0 - lead, p.length, bias,
                                                            p.silu,
                                                            [out_s](int i, float v) { out_s[i] = from_float<T>(v); });
      __syncthreads();
    }
    toeplitz_store_outputs(y_walk, out_s, j0, n, lead);
  }
  if constexpr (kShiftedRows)
    depthwise_walk_tail<Tile::kThreads>(x, y, w, p.w_stride[1], width, tiles, Tile::kOutputs, lead, p.length, bias,
                                        p.silu);
}

}  // namespace causalconv::detail
