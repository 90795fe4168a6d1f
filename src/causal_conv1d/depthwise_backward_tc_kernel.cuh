// Depthwise causal conv backward on the tensor cores (16-bit dtypes, dilation 1, rows
// with unit time stride): dx, and per-tile dweight/dbias partials in the layout of the
// tiled backward (depthwise_backward.cu reduces them in a fixed order).
//
// A block owns one (b, c) row and walks 2048-step tiles strided by gridDim.y, two tiles
// deep (cp.async of the next tile's x and dy while this one is computed). Per tile
// (chunks J = j0/16 .. J+127, halo H = blocks - 1):
//   silu:  pre = the forward's Toeplitz MMAs over x chunks J-H .. J+143 for output
//          chunks J .. J+127+H, g = dy * silu'(pre + bias) in fp32, rounded to the storage
//          type in place of dy (the MMA operand; dbias sums the fp32 g);
//   dx:    dx_chunk[j] = sum_i U_i · g_chunk[j + i], the transposed blocks
//          (toeplitz_fragments_to_shared<true>);
//   dw:    lag block a (lags 16a - 15 .. 16a + 15): D_a[c][c'] = sum_j g[16j + c] x[16(j-a) + c']
//          over the tile's chunks j, a 16x16 product per 16 chunks (K dim = time) with
//          both operands from ldmatrix.trans; lag s = 16a + c - c' collects its 16
//          diagonal terms in a fixed order, dweight[K-1-s] = that sum.
// The A fragments of both Toeplitz forms live in shared memory (one 16-byte load per
// block and warp), which keeps registers for the accumulators.
// kGuard (depthwise_direct.cuh): where the silu input's or dx's sums of a tile are not all
// finite (a NaN or infinity met by the blocks' zero lags), the block redoes g, or dx, of that tile
// by direct tap loops. (The weight-gradient lag blocks sum each lag's own products only.)
// kShiftedRows: rows of x, dy and dx off the 16-byte boundary by the same lead are walked from the
// boundary before them (common/toeplitz_mma.cuh, kToeplitzShiftedRows); `tiles` then counts the
// walk's (toeplitz_walk_length).
#pragma once

#include <type_traits>

#include "causal_conv1d/depthwise_kernels.h"
#include "causal_conv1d/depthwise_direct.cuh"
#include "common/toeplitz_mma.cuh"

namespace causalconv::detail {

// The guard's slow path for silu: g = dy * silu'(pre) over the tile and its look-ahead halo
// (local steps i < 16 g_chunks of the tile at j0; zero outside the row: j0 is negative for a
// shifted walk's first tile) with pre by the direct tap loop, into g_s in place of the Toeplitz
// products'; returns this thread's part of the tile's bias gradient (local steps below
// 16 tile_chunks).
template <typename T>
__device__ __noinline__ float depthwise_direct_silu_grads(unsigned char* g_s, int g_chunks, int tile_chunks,
                                                          const T* x, const T* dy, const T* w, int64_t w_stride,
                                                          int width, int64_t j0, int64_t n, float bias) {
  float bias_grad = 0.0f;
#pragma unroll 1
  for (int i = int(threadIdx.x); i < 16 * g_chunks; i += ToeplitzTile::kThreads) {
    const int64_t t = j0 + i;
    const bool inside = t >= 0 && t < n;
    const float pre = inside ? depthwise_direct_output(x, 1, w, w_stride, width, 1, t, bias, false) : 0.0f;
    const float gv = inside ? to_float(dy[t]) * silu_derivative<T>(pre) : 0.0f;
    *reinterpret_cast<T*>(g_s + toeplitz_element_offset(i >> 4, i & 15)) = from_float<T>(gv);
    if (i < 16 * tile_chunks) bias_grad += gv;
  }
  return bias_grad;
}

// The guard's slow path for dx: dx[t] = sum_k w[k] g[t + K-1-k] for the tile's steps in
// [lead, n), g from the staged (swizzled) tile g_s, which is zero past the row.
template <typename T>
__device__ __noinline__ void depthwise_direct_dx_tile(T* dx, const unsigned char* g_s, const T* w, int64_t w_stride,
                                                      int width, int64_t j0, int64_t n, int lead) {
#pragma unroll 1
  for (int i = int(threadIdx.x); i < ToeplitzTile::kOutputs && j0 + i < n; i += ToeplitzTile::kThreads) {
    if (j0 + i < lead) continue;
    float acc = 0.0f;
#pragma unroll 1
    for (int k = 0; k < width; ++k) {
      const int s = i + width - 1 - k;
      acc = fmaf(to_float(w[int64_t(k) * w_stride]),
                 to_float(*reinterpret_cast<const T*>(g_s + toeplitz_element_offset(s >> 4, s & 15))), acc);
    }
    dx[j0 + i] = from_float<T>(acc);
  }
}

// Shared memory of the backward kernel, in bytes from the start.
template <int kMaxBlocks>
struct DepthwiseTcBackwardSmem {
  static constexpr int kStages = 2;
  static constexpr int kLookAhead = 16;  // x chunks after the tile for the silu input of g's halo
  static constexpr int kXChunks = kMaxBlocks - 1 + ToeplitzTile::kChunks + kLookAhead;
  static constexpr int kGChunks = ToeplitzTile::kChunks + kLookAhead;  // the tile + its look-ahead halo
  static constexpr int kXUnits = 2 * kXChunks, kGUnits = 2 * kGChunks;
  static constexpr int kStage = 32 * (kXChunks + kGChunks);  // x tile, then g tile
  static constexpr int kForwardFrags = kStages * kStage;     // uint4 [kMaxBlocks][32]
  static constexpr int kDxFrags = kForwardFrags + 16 * 32 * kMaxBlocks;
  static constexpr int kLagSums = kDxFrags + 16 * 32 * kMaxBlocks;   // float [kMaxBlocks][16][16]
  static constexpr int kBiasSums = kLagSums + 4 * 256 * kMaxBlocks;  // float [kWarps]
  static constexpr int kFilter = kBiasSums + 4 * ToeplitzTile::kWarps;
  static constexpr int kBytes = kFilter + 2 * toeplitz_lag_filter_size<kMaxBlocks>();
};

template <typename T, int kMaxBlocks, bool kGuard, bool kShiftedRows>
__global__ void __launch_bounds__(ToeplitzTile::kThreads)
    depthwise_backward_tc_kernel(DepthwiseBackwardParams p, int64_t tiles, float* partials) {
  using Tile = ToeplitzTile;
  using Smem = DepthwiseTcBackwardSmem<kMaxBlocks>;
  constexpr bool kHalf = std::is_same<T, __half>::value;
  constexpr int kLagsPerWarp = (kMaxBlocks + Tile::kWarps - 1) / Tile::kWarps;
  unsigned char* smem = toeplitz_shared();
  uint4* fwd_frag_s = reinterpret_cast<uint4*>(smem + Smem::kForwardFrags);
  uint4* dx_frag_s = reinterpret_cast<uint4*>(smem + Smem::kDxFrags);
  float* lag_s = reinterpret_cast<float*>(smem + Smem::kLagSums);
  float* bias_s = reinterpret_cast<float*>(smem + Smem::kBiasSums);
  T* wr_s = reinterpret_cast<T*>(smem + Smem::kFilter);
  const int width = int(p.width), blocks = toeplitz_blocks(width), halo = blocks - 1;
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, g = lane >> 2, q = lane & 3;
  const int64_t bc = int64_t(blockIdx.x);
  const int64_t b = div_nonneg(bc, p.channels), c = bc - b * p.channels;
  const T* x = static_cast<const T*>(p.x) + b * p.x_stride[0] + c * p.x_stride[1];
  const T* dy = static_cast<const T*>(p.dy) + b * p.dy_stride[0] + c * p.dy_stride[1];
  T* dx = p.dx ? static_cast<T*>(p.dx) + b * p.dx_stride[0] + c * p.dx_stride[1] : nullptr;
  // The walk: the rows behind `lead` zeros (walked step s = row step s - lead).
  const int lead = kShiftedRows ? toeplitz_shared_lead<T>(x, dy, dx) : 0;
  const T* const x_walk = x - lead;
  const T* const dy_walk = dy - lead;
  T* const dx_walk = dx ? dx - lead : nullptr;
  const int64_t n = p.length + lead;
  const bool x_aligned = (reinterpret_cast<uintptr_t>(x_walk) & 15) == 0;
  const bool dy_aligned = (reinterpret_cast<uintptr_t>(dy_walk) & 15) == 0;
  const bool dx_aligned = (reinterpret_cast<uintptr_t>(dx_walk) & 3) == 0;
  // x is needed from the causal halo; after the tile only for the silu input of g's halo.
  const int x_units = 2 * (halo + Tile::kChunks + (p.silu ? Smem::kLookAhead : 0));
  const int g_units = 2 * (Tile::kChunks + halo);
  const int64_t stride = gridDim.y;
  auto stage = [&](int slot, int64_t tile) {
    unsigned char* x_s = smem + slot * Smem::kStage;
    const int64_t j0 = tile * Tile::kOutputs;
    if (partials || p.silu) toeplitz_stage<Smem::kXUnits>(x_s, x_walk, x_aligned, j0 - 16 * halo, x_units, n, lead);
    toeplitz_stage<Smem::kGUnits>(x_s + 32 * Smem::kXChunks, dy_walk, dy_aligned, j0, g_units, n, lead);
  };

  if (blockIdx.y < tiles) stage(0, blockIdx.y);
  cp_async_commit();
  const T* const w = static_cast<const T*>(p.weight) + c * p.w_stride[0];
  toeplitz_lag_filter<kMaxBlocks>(wr_s, w, p.w_stride[1], width);
  const float bias = p.bias ? to_float(static_cast<const T*>(p.bias)[c * p.bias_stride]) : 0.0f;
  __syncthreads();
  if (p.silu) toeplitz_fragments_to_shared<false>(fwd_frag_s, wr_s, blocks);
  toeplitz_fragments_to_shared<true>(dx_frag_s, wr_s, blocks);

  int slot = 0;
#pragma unroll 1
  for (int64_t tile = blockIdx.y; tile < tiles; tile += stride, slot ^= 1) {
    cp_async_wait<0>();  // this tile's copies are done
    __syncthreads();     // ... every thread's; the other slot and the sums are free
    if (tile + stride < tiles) stage(slot ^ 1, tile + stride);
    cp_async_commit();
    const unsigned char* x_s = smem + slot * Smem::kStage;
    unsigned char* g_s = smem + slot * Smem::kStage + 32 * Smem::kXChunks;
    const int64_t j0 = tile * Tile::kOutputs;  // (>= n where a shifted walk ends a tile early)

    // g = dy * silu'(pre) over the tile and its look-ahead halo (fp32, then rounded in place).
    float bias_grad = 0.0f;
    if (p.silu) {
      const int pairs = (Tile::kChunks + halo + 15) / 16;
      bool vote = false;
      for (int pair = warp; pair < pairs; pair += Tile::kWarps) {
        float acc[2][4];
        toeplitz_mma_tiles_shared<kHalf, false, 2>(acc, fwd_frag_s, x_s, blocks, 16 * pair + halo, lane);
        if constexpr (kGuard) vote = vote || any_nonfinite<8>(&acc[0][0]);
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int chunk = 16 * pair + 8 * t + 2 * q + (e & 1), step = g + 8 * (e >> 1);
            if (chunk >= Tile::kChunks + halo) continue;
            T* gp = reinterpret_cast<T*>(g_s + toeplitz_element_offset(chunk, step));
            const float gv = to_float(*gp) * silu_derivative<T>(acc[t][e] + bias);
            *gp = from_float<T>(gv);
            if (chunk < Tile::kChunks) bias_grad += gv;
          }
      }
      if (guarded_tile_barrier<kGuard>(vote)) {
        bias_grad = depthwise_direct_silu_grads(g_s, Tile::kChunks + halo, Tile::kChunks, x, dy, w, p.w_stride[1],
                                                width, j0 - lead, p.length, bias);
        __syncthreads();
      }
    } else if (partials) {
      for (int u = int(threadIdx.x); u < 2 * Tile::kChunks; u += Tile::kThreads) {
        const T* v = reinterpret_cast<const T*>(g_s + toeplitz_unit_offset(u >> 1, u & 1));
#pragma unroll
        for (int e = 0; e < 8; ++e) bias_grad += to_float(v[e]);
      }
    }

    if (dx) {
      float acc[Tile::kWarpTiles][4];
      toeplitz_mma_tiles_shared<kHalf, true, Tile::kWarpTiles>(acc, dx_frag_s, g_s, blocks, warp * Tile::kWarpChunks,
                                                               lane);
      const bool fast = dx_aligned && (lead == 0 || j0 > 0) && j0 + Tile::kOutputs <= n;
#pragma unroll
      for (int t = 0; t < Tile::kWarpTiles; ++t) {
        T v[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] = from_float<T>(acc[t][e]);
        uint32_t pair[2];
        toeplitz_output_pairs(pair, v, lane);
        toeplitz_store_pairs(dx_walk, j0, warp * Tile::kWarpChunks + 8 * t + 2 * q + (g & 1), g & ~1, pair, fast, n,
                             lead);
      }
      if constexpr (kGuard) {  // the slow path's stores follow the fast path's, after the barrier
        if (__syncthreads_or(any_nonfinite<Tile::kWarpTiles * 4>(&acc[0][0])))
          depthwise_direct_dx_tile(dx_walk, g_s, w, p.w_stride[1], width, j0, n, lead);
      }
    }

    if (!partials) continue;
    float dw[kLagsPerWarp][2][4] = {};
    const int mat = lane >> 3;
#pragma unroll 1
    for (int j = 0; j < Tile::kChunks; j += 16) {
      uint32_t ga[4];  // A[c][chunk]: g of chunks j .. j+15
      ldmatrix_x4_trans(ga, g_s + toeplitz_unit_offset(j + (mat >> 1) * 8 + (lane & 7), mat & 1));
#pragma unroll
      for (int l = 0; l < kLagsPerWarp; ++l) {
        const int lag_block = warp + Tile::kWarps * l;
        if (lag_block >= blocks) break;  // uniform over the warp
        uint32_t xb[4];  // B[chunk][c']: x of chunks j - lag_block .. + 15 (x_s chunk 0 is H before the tile)
        ldmatrix_x4_trans(xb, x_s + toeplitz_unit_offset(j + halo - lag_block + (mat & 1) * 8 + (lane & 7), mat >> 1));
        mma_m16n8k16<kHalf>(dw[l][0], ga, xb[0], xb[1]);
        mma_m16n8k16<kHalf>(dw[l][1], ga, xb[2], xb[3]);
      }
    }
#pragma unroll
    for (int l = 0; l < kLagsPerWarp; ++l) {
      const int lag_block = warp + Tile::kWarps * l;
      if (lag_block >= blocks) break;
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          lag_s[256 * lag_block + 16 * (g + 8 * (e >> 1)) + 8 * h + 2 * q + (e & 1)] = dw[l][h][e];
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) bias_grad += __shfl_xor_sync(0xffffffffu, bias_grad, offset);
    if (lane == 0) bias_s[warp] = bias_grad;
    __syncthreads();
    // Tap k (lag s = K-1-k): the terms of D_a[c][c'] with 16a + c - c' = s, c in order.
    float* tile_partials = partials + ((c * p.batch + b) * tiles + tile) * (width + 1);
    for (int k = int(threadIdx.x); k <= width; k += Tile::kThreads) {
      float sum = 0.0f;
      if (k < width) {
        const int s = width - 1 - k;
        for (int cc = 0; cc < 16; ++cc) {
          const int d = s - cc, a = (d + 15) >> 4, c2 = 16 * a - d;  // a = ceil(d / 16), c2 in [0, 16)
          if (a < blocks) sum += lag_s[256 * a + 16 * cc + c2];
        }
      } else {
        for (int w = 0; w < Tile::kWarps; ++w) sum += bias_s[w];
      }
      tile_partials[k] = sum;
    }
  }
}

}  // namespace causalconv::detail
