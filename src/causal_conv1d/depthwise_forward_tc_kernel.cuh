// Depthwise causal conv forward on the tensor cores (16-bit dtypes, dilation 1, rows
// with unit time stride): the blocked Toeplitz form of common/toeplitz_mma.cuh.
//
// A block owns one (b, c) row and walks 2048-step tiles strided by gridDim.y. Once per
// block it builds the Toeplitz A fragments of the channel's filter in registers. The
// input chunks [j0/16 - halo, j0/16 + 128) of a tile (halo = blocks - 1) are staged as
// raw 16-bit values in a swizzled shared tile, kTcStages tiles deep: while the tensor
// cores work on one tile, cp.async copies of the next kTcStages - 1 are in flight (the
// memory system needs ~32 KB per SM in flight; see docs/performance.md). Each warp makes
// 32 output chunks with blocks x 4 mma.sync, adds bias (and silu) in fp32 and stores
// pairs of adjacent outputs straight from the accumulators (one shuffle per m16n8 tile).
// Rows that are not 16-byte aligned are staged synchronously, element by element.
#pragma once

#include <type_traits>

#include "causal_conv1d/depthwise_kernels.h"
#include "common/toeplitz_mma.cuh"

namespace causalconv::detail {

constexpr int kTcStages = 4;  // staged input tiles per block: the current one + 3 in flight

// Shared bytes of the forward kernel: kTcStages input tiles, then the lag-ordered filter.
template <int kMaxBlocks>
constexpr int depthwise_tc_smem_bytes() {
  return kTcStages * ToeplitzStage<kMaxBlocks>::kInBytes + 2 * toeplitz_lag_filter_size<kMaxBlocks>();
}

template <typename T, int kMaxBlocks>
__global__ void __launch_bounds__(ToeplitzTile::kThreads)
    depthwise_forward_tc_kernel(DepthwiseForwardParams p, int64_t tiles) {
  using Tile = ToeplitzTile;
  using Stage = ToeplitzStage<kMaxBlocks>;
  constexpr bool kHalf = std::is_same<T, __half>::value;
  unsigned char* in_s = toeplitz_shared();                             // [kTcStages][kInBytes], swizzled
  T* wr_s = reinterpret_cast<T*>(in_s + kTcStages * Stage::kInBytes);  // lag-ordered filter
  const int width = int(p.width), blocks = toeplitz_blocks(width), halo = blocks - 1;
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int64_t bc = int64_t(blockIdx.x);
  const int64_t b = div_nonneg(bc, p.channels), c = bc - b * p.channels;
  const int64_t n = p.length;
  const T* x = static_cast<const T*>(p.x) + b * p.x_stride[0] + c * p.x_stride[1];
  T* y = static_cast<T*>(p.y) + b * p.y_stride[0] + c * p.y_stride[1];
  const bool x_aligned = (reinterpret_cast<uintptr_t>(x) & 15) == 0;
  const bool y_aligned = (reinterpret_cast<uintptr_t>(y) & 3) == 0;
  const int units = 2 * (Tile::kChunks + halo);
  const int64_t stride = gridDim.y;

  // The first kTcStages - 1 tiles go in flight before anything else; one group per tile
  // (empty past the row) keeps the wait count uniform.
#pragma unroll
  for (int s = 0; s < kTcStages - 1; ++s) {
    const int64_t tile = blockIdx.y + s * stride;
    if (tile < tiles)
      toeplitz_stage<Stage::kUnits>(in_s + s * Stage::kInBytes, x, x_aligned, tile * Tile::kOutputs - 16 * halo, units,
                                    n);
    cp_async_commit();
  }
  toeplitz_lag_filter<kMaxBlocks>(wr_s, static_cast<const T*>(p.weight) + c * p.w_stride[0], p.w_stride[1], width);
  const float bias = p.bias ? to_float(static_cast<const T*>(p.bias)[c * p.bias_stride]) : 0.0f;
  __syncthreads();
  uint32_t a[kMaxBlocks][4];
  toeplitz_a_fragments<kMaxBlocks>(a, wr_s, blocks, lane);
  const int g = lane >> 2, q = lane & 3;

  int slot = 0;
#pragma unroll 1
  for (int64_t tile = blockIdx.y; tile < tiles; tile += stride, slot = (slot + 1) % kTcStages) {
    cp_async_wait<kTcStages - 2>();  // this tile's copies are done
    __syncthreads();                 // ... every thread's, and the slot refilled below is free
    const int64_t ahead = tile + (kTcStages - 1) * stride;
    if (ahead < tiles)
      toeplitz_stage<Stage::kUnits>(in_s + ((slot + kTcStages - 1) % kTcStages) * Stage::kInBytes, x, x_aligned,
                                    ahead * Tile::kOutputs - 16 * halo, units, n);
    cp_async_commit();

    float acc[Tile::kWarpTiles][4];
    toeplitz_warp_tile<kHalf, kMaxBlocks>(acc, a, in_s + slot * Stage::kInBytes, blocks, halo, warp, lane);
    const int64_t j0 = tile * Tile::kOutputs;  // < n
    const bool fast = y_aligned && j0 + Tile::kOutputs <= n;
#pragma unroll
    for (int t = 0; t < Tile::kWarpTiles; ++t) {
      T v[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float u = acc[t][e] + bias;
        if (p.silu) u = silu(u);
        v[e] = from_float<T>(u);
      }
      uint32_t pair[2];
      toeplitz_output_pairs(pair, v, lane);
      toeplitz_store_pairs(y, j0, warp * Tile::kWarpChunks + 8 * t + 2 * q + (g & 1), g & ~1, pair, fast, n);
    }
  }
}

}  // namespace causalconv::detail
