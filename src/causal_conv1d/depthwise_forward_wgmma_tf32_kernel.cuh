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
// Math: y[64 (J + n) + r] = sum_{i < nb} sum_c T_i[r][c] x[64 (J + n - i) + c], T_i[r][c] = wr[64i + r - c],
// as D[r][n] (M = the 64 output steps r of a chunk, N = the tile's 64 chunks n, K = 8-step slices of
// the 64 input steps c). A = T_i's k-slice ks in registers (tf32's m16n8k8 A layout): lane (g, q)
// of warp w holds lags base + {0, 8, -4, 4}, base = 64i - 8ks + 16w + g - q, read from the split
// lag filter in shared memory per slice (lanes with equal g - q read one word: broadcasts). B = the
// staged x rows, K-major: a chunk row is 64 values, 256 bytes, so a stage holds two half tiles
// (steps 0-31 and 32-63 of every row), each rows of 128 bytes under the 128-byte swizzle; slice ks
// starts in half ks / 4 at byte 32 (ks % 4) of row nb - 1 - i.
//
// Per product (i, ks): w_lo x_hi, w_hi x_lo, w_hi x_hi (smallest first). The A registers of a slice
// must hold until its MMAs complete, so the slices alternate between two register sets, each
// slice's group committed and the one before it waited for (at most two groups in flight).
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
#include "common/toeplitz_tf32.cuh"
#include "common/toeplitz_wgmma.cuh"

namespace causalconv::detail {

// Shared memory of depthwise_forward_wgmma_tf32_kernel<kBlocks> (kBlocks = toeplitz64_blocks(K)):
// two input stages (raw, then the hi parts) and the lo tile, each two half tiles of kRows rows of
// 128 bytes (1024-byte aligned); the split lag filters wr_hi, wr_lo; 1024 bytes to align the start.
template <int kBlocks>
struct DepthwiseWgmmaTf32Smem {
  using Tile = WgmmaToeplitzTile;
  static constexpr int kRows = (Tile::kChunks + kBlocks - 1 + 7) / 8 * 8;  // outputs' chunks + halo
  static constexpr int kHalfBytes = kRows * 128;
  static constexpr int kTileBytes = 2 * kHalfBytes;
  static constexpr int kOutRow = 68;  // words a chunk row of the output tile (in a consumed stage)
  static_assert(Tile::kChunks * kOutRow * 4 <= kTileBytes, "the output tile fits in a stage");
  static constexpr int kLags = 64 * (kBlocks + 1);  // lags -64 .. 64 kBlocks - 1
  static constexpr int kBytes = 1024 + 3 * kTileBytes + 2 * 4 * kLags;
};

// Byte offset of the 16-byte unit u (steps 4u' .. 4u' + 3 of chunk row u / 16, u' = u % 16) of a
// staged tile.
template <int kBlocks>
__device__ __forceinline__ int wgmma_tf32_unit_offset(int u) {
  const int h = u & 15;
  return (h >> 3) * DepthwiseWgmmaTf32Smem<kBlocks>::kHalfBytes + swizzled_unit_offset(u >> 4, h & 7);
}

// wr_hi_s[64 + s], wr_lo_s[64 + s]: the tf32 parts of wr[s] = w[K-1-s] for lag s in [0, K), zero
// elsewhere in [-64, 64 kBlocks).
template <int kBlocks>
__device__ __forceinline__ void wgmma_tf32_lag_filter(uint32_t* wr_hi_s, uint32_t* wr_lo_s, const float* w,
                                                      int64_t w_stride, int width) {
  for (int i = int(threadIdx.x); i < DepthwiseWgmmaTf32Smem<kBlocks>::kLags; i += WgmmaToeplitzTile::kThreads) {
    const int s = i - 64;
    tf32_split(s >= 0 && s < width ? w[int64_t(width - 1 - s) * w_stride] : 0.0f, wr_hi_s[i], wr_lo_s[i]);
  }
}

// Splits the units u = threadIdx.x + k kThreads < units of a staged tile (those this thread staged):
// hi in place, lo to the same offset of lo_s.
template <int kBlocks>
__device__ __forceinline__ void wgmma_tf32_split_units(unsigned char* in_s, unsigned char* lo_s, int units) {
  for (int u = int(threadIdx.x); u < units; u += WgmmaToeplitzTile::kThreads) {
    const int offset = wgmma_tf32_unit_offset<kBlocks>(u);
    uint4 hi = *reinterpret_cast<const uint4*>(in_s + offset), lo;
    tf32_split(__uint_as_float(hi.x), hi.x, lo.x);
    tf32_split(__uint_as_float(hi.y), hi.y, lo.y);
    tf32_split(__uint_as_float(hi.z), hi.z, lo.z);
    tf32_split(__uint_as_float(hi.w), hi.w, lo.w);
    *reinterpret_cast<uint4*>(in_s + offset) = hi;
    *reinterpret_cast<uint4*>(lo_s + offset) = lo;
  }
}

#ifdef CAUSALCONV_SM90A
// D = sum_i T_i · B_i over the tile split at shared addresses hi, lo (the top's products), complete
// on return.
template <int kBlocks>
__device__ __forceinline__ void wgmma_tf32x3_toeplitz(float (&acc)[32], const uint32_t* wr_hi_s,
                                                      const uint32_t* wr_lo_s, uint32_t hi, uint32_t lo) {
  using Smem = DepthwiseWgmmaTf32Smem<kBlocks>;
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int base0 = 64 + 16 * warp + (lane >> 2) - (lane & 3);  // index of lag base at i = ks = 0
  constexpr int kLag[4] = {0, 8, -4, 4};
  uint32_t a_hi[2][4], a_lo[2][4];
#pragma unroll
  for (int slice = 0; slice < 8 * kBlocks; ++slice) {
    const int i = slice >> 3, ks = slice & 7, set = slice & 1;
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
      a_hi[set][reg] = wr_hi_s[base0 + 64 * i - 8 * ks + kLag[reg]];
      a_lo[set][reg] = wr_lo_s[base0 + 64 * i - 8 * ks + kLag[reg]];
    }
    const uint32_t offset = uint32_t((ks >> 2) * Smem::kHalfBytes + (kBlocks - 1 - i) * 128 + 32 * (ks & 3));
    const uint64_t b_hi = sm90::smem_descriptor(hi + offset, 16, 1024);
    const uint64_t b_lo = sm90::smem_descriptor(lo + offset, 16, 1024);
    sm90::wgmma_fence();
    sm90::wgmma_m64n64k8_tf32_rs(acc, a_lo[set], b_hi, slice != 0);
    sm90::wgmma_m64n64k8_tf32_rs(acc, a_hi[set], b_lo, 1);
    sm90::wgmma_m64n64k8_tf32_rs(acc, a_hi[set], b_hi, 1);
    sm90::wgmma_commit();
    sm90::wgmma_wait<1>();  // the slice before this one is done: its register set is free
  }
  sm90::wgmma_wait<0>();
  sm90::fence_registers(acc);
}
#endif

// kShiftedRows: rows off the 16-byte boundary, each x row the same distance past one as its y row
// (the launcher checks), walked from the boundary before them (common/toeplitz_mma.cuh).
template <int kBlocks, bool kShiftedRows>
__global__ void __launch_bounds__(WgmmaToeplitzTile::kThreads)
    depthwise_forward_wgmma_tf32x3_kernel(DepthwiseForwardParams p, int64_t tiles) {
#ifdef CAUSALCONV_SM90A
  using Tile = WgmmaToeplitzTile;
  using Smem = DepthwiseWgmmaTf32Smem<kBlocks>;
  unsigned char* const stages = sm90::aligned_dynamic_shared();      // stages 0 and 1: raw, then hi
  unsigned char* const lo_s = stages + 2 * Smem::kTileBytes;         // the lo parts of the tile at work
  uint32_t* const wr_hi_s = reinterpret_cast<uint32_t*>(lo_s + Smem::kTileBytes);
  uint32_t* const wr_lo_s = wr_hi_s + Smem::kLags;

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
    toeplitz_stage_units_async(stages + slot * Smem::kTileBytes, x_walk, (tile * Tile::kChunks - kHalo) * Tile::kChunk,
                               units, n, [](int u) { return wgmma_tf32_unit_offset<kBlocks>(u); }, lead);
  };

  if (int64_t(blockIdx.y) < tiles) stage(0, blockIdx.y);
  cp_async_commit();
  const float* const w = static_cast<const float*>(p.weight) + c * p.w_stride[0];
  wgmma_tf32_lag_filter<kBlocks>(wr_hi_s, wr_lo_s, w, p.w_stride[1], int(p.width));
  const float bias = p.bias ? static_cast<const float*>(p.bias)[c * p.bias_stride] : 0.0f;
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, g = lane >> 2, q = lane & 3;

  int slot = 0;
#pragma unroll 1
  for (int64_t tile = blockIdx.y; tile < tiles; tile += gridDim.y, slot ^= 1) {
    const int64_t j0 = tile * Tile::kOutputs;  // (>= n where a shifted walk ends a tile early)
    unsigned char* const in_s = stages + slot * Smem::kTileBytes;
    cp_async_wait<0>();                                  // this thread's copies of the tile are done
    wgmma_tf32_split_units<kBlocks>(in_s, lo_s, units);  // (lo_s: every thread is past the last MMAs)
    sm90::fence_proxy_async_shared();  // the split parts (and the walk's masked first unit) to wgmma's reads
    __syncthreads();                   // every thread's; the filter is in place, the other stage free
    if (tile + gridDim.y < tiles) stage(slot ^ 1, tile + gridDim.y);
    cp_async_commit();

    float acc[32];
    wgmma_tf32x3_toeplitz<kBlocks>(acc, wr_hi_s, wr_lo_s, sm90::smem_u32(in_s), sm90::smem_u32(lo_s));
    __syncthreads();  // every warp's MMAs have read the stage (a warp's wait covers its own)
    // acc[4j + 2h + e] = D[r][n], r = 16 warp + g + 8h, n = 8j + 2q + e, into chunk row n of the
    // output tile (the consumed stage): banks 8q + g + const, distinct across the warp.
    float* const out_s = reinterpret_cast<float*>(in_s);
    const bool vote = any_nonfinite<32>(acc);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float v = acc[4 * j + 2 * h + e] + bias;
          out_s[(8 * j + 2 * q + e) * Smem::kOutRow + 16 * warp + g + 8 * h] = p.silu ? silu<float>(v) : v;
        }
    if (guarded_tile_barrier<true>(vote)) {
      depthwise_direct_tile<Tile::kOutputs, Tile::kThreads>(
          x, w, p.w_stride[1], int(p.width), j0 - lead, p.length, bias, p.silu,
          [out_s](int i, float v) { out_s[(i >> 6) * Smem::kOutRow + (i & 63)] = v; });
      __syncthreads();
    }
#pragma unroll
    for (int half = 0; half < Tile::kOutputs / ToeplitzTile::kOutputs; ++half)
      toeplitz_store_outputs(
          y_walk, out_s, j0 + half * ToeplitzTile::kOutputs,
          n, [half](int u) { return (half * 32 + (u >> 4)) * Smem::kOutRow + 4 * (u & 15); }, lead);
  }
#endif
}

}  // namespace causalconv::detail
