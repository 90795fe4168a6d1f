// The 64-step-chunk Toeplitz form (common/toeplitz_wgmma.cuh) on Hopper's warpgroup MMA with fp32
// operands split in two tf32 parts (common/toeplitz_tf32.cuh: the precision, ~2^-21 of each term):
// the tile layout, the lag filter, the MMAs and the output tile's stores of the depthwise fp32 forward
// and the b2b fp32 mixer (sm_90a; the split itself: tf32_split_units, tf32_split).
#pragma once

#include <cstdint>

#include "common/sm90_primitives.cuh"
#include "common/toeplitz_tf32.cuh"
#include "common/toeplitz_wgmma.cuh"

namespace causalconv::detail {

// The B operand's tile for kBlocks Toeplitz blocks: the outputs' 64 chunks and the kBlocks - 1 halo
// chunks before them, each a row of 64 fp32 values (256 bytes), held as two half tiles (steps 0-31
// and 32-63 of every row) of kRows rows of 128 bytes under the 128-byte swizzle, 1024-byte aligned.
// kOutRow: the words a chunk row of a 64-chunk output tile takes (68: the accumulators' stores hit
// 32 distinct banks), which fits in such a tile. kLags: lags -64 .. 64 kBlocks - 1 of a lag filter.
template <int kBlocks>
struct WgmmaTf32Tile {
  static constexpr int kRows = (WgmmaToeplitzTile::kChunks + kBlocks - 1 + 7) / 8 * 8;
  static constexpr int kHalfBytes = kRows * 128;
  static constexpr int kBytes = 2 * kHalfBytes;
  static constexpr int kOutRow = 68;
  static_assert(WgmmaToeplitzTile::kChunks * kOutRow * 4 <= kBytes, "an output tile fits in a tile");
  static constexpr int kLags = 64 * (kBlocks + 1);
  // Word offset of output i (chunk i / 64, step i % 64) of an output tile.
  static __host__ __device__ constexpr int output_offset(int i) { return (i >> 6) * kOutRow + (i & 63); }
};

// Byte offset of the 16-byte unit u (steps 4u' .. 4u' + 3 of chunk row u / 16, u' = u % 16) of a
// staged tile.
template <int kBlocks>
__device__ __forceinline__ int wgmma_tf32_unit_offset(int u) {
  const int h = u & 15;
  return (h >> 3) * WgmmaTf32Tile<kBlocks>::kHalfBytes + swizzled_unit_offset(u >> 4, h & 7);
}

// Byte offset of step s (0-63) of chunk row m of a tile: wgmma_tf32_unit_offset(16 m + s / 4) + 4 (s % 4),
// written from (m, s) so that a row offset known at compile time (m = 8 j + x) folds into the address
// (through the unit index, the compiler could not see that s / 4 < 16).
template <int kBlocks>
__device__ __forceinline__ int wgmma_tf32_element_offset(int m, int s) {
  return (s >> 5) * WgmmaTf32Tile<kBlocks>::kHalfBytes + swizzled_unit_offset(m, (s >> 2) & 7) + 4 * (s & 3);
}

// The lag filter's tf32 parts at wr_hi_s[64 + s], wr_lo_s[64 + s] for lags s in [-64, 64 kBlocks).
template <int kBlocks>
__device__ __forceinline__ void wgmma_tf32_lag_filter(uint32_t* wr_hi_s, uint32_t* wr_lo_s, const float* w,
                                                      int64_t w_stride, int width) {
  tf32_split_lag_filter<64, WgmmaTf32Tile<kBlocks>::kLags>(wr_hi_s, wr_lo_s, w, w_stride, width);
}

// row[j0 + i] = output i of a 64-chunk output tile out_s (WgmmaTf32Tile::output_offset) for
// lead <= j0 + i < n, i < 4096: toeplitz_store_outputs's 16-byte stores, over its 2048 outputs twice
// (unit u of a half: chunk 32 half + u / 16, steps 4 (u % 16) .. + 3; written out so, as the offset of
// output 2048 half + 4u cost ptxas 16-46 registers).
template <int kBlocks>
__device__ __forceinline__ void wgmma_tf32_store_outputs(float* row, const float* out_s, int64_t j0, int64_t n,
                                                         int lead = 0) {
#pragma unroll
  for (int half = 0; half < WgmmaToeplitzTile::kOutputs / ToeplitzTile::kOutputs; ++half)
    toeplitz_store_outputs(
        row, out_s, j0 + half * ToeplitzTile::kOutputs, n,
        [half](int u) { return (half * 32 + (u >> 4)) * WgmmaTf32Tile<kBlocks>::kOutRow + 4 * (u & 15); }, lead);
}

#ifdef CAUSALCONV_SM90A
// acc (+)= A B for one k8 slice split three ways: the products a_lo b_hi, a_hi b_lo, a_hi b_hi (smallest
// first), committed as one group; returns once the group before it is done, so that the register set
// of the slice before can be reloaded (the caller alternates two sets and waits for all at the end).
__device__ __forceinline__ void wgmma_tf32x3_slice(float (&acc)[32], const uint32_t (&a_hi)[4],
                                                   const uint32_t (&a_lo)[4], uint64_t b_hi, uint64_t b_lo,
                                                   bool accumulate) {
  sm90::wgmma_fence();
  sm90::wgmma_m64n64k8_tf32_rs(acc, a_lo, b_hi, accumulate);
  sm90::wgmma_m64n64k8_tf32_rs(acc, a_hi, b_lo, 1);
  sm90::wgmma_m64n64k8_tf32_rs(acc, a_hi, b_hi, 1);
  sm90::wgmma_commit();
  sm90::wgmma_wait<1>();
}

// D[r][n] = sum_i sum_c T_i[r][c] B[kBlocks - 1 + n - i][c] with T_i[r][c] = wr[64i + r - c] (the lag
// filters wr_hi_s, wr_lo_s of wgmma_tf32_lag_filter) and B the tile split at shared addresses hi, lo:
// per k8 slice ks of block i, A = T_i's slice in registers (m16n8k8's tf32 layout; lane (g, q) of
// warp w holds lags base + {0, 8, -4, 4}, base = 64i - 8ks + 16w + g - q: lanes with equal g - q read
// one word) and B's slice from half ks / 4 at byte 32 (ks % 4) of row kBlocks - 1 - i; the products
// w_lo x_hi, w_hi x_lo, w_hi x_hi (smallest first). A slice's registers must hold until its MMAs
// complete, so the slices alternate between two register sets, each slice's group committed and the
// one before it waited for. acc[4j + 2h + e] = D[16 warp + g + 8h][8j + 2q + e]; complete on return.
template <int kBlocks>
__device__ __forceinline__ void wgmma_tf32x3_toeplitz(float (&acc)[32], const uint32_t* wr_hi_s,
                                                      const uint32_t* wr_lo_s, uint32_t hi, uint32_t lo) {
  using Split = WgmmaTf32Tile<kBlocks>;
  const int lane = int(threadIdx.x) & 31, warp = (int(threadIdx.x) >> 5) & 3;  // the warp of its warpgroup
  const int base0 = 64 + 16 * warp + (lane >> 2) - (lane & 3);  // index of lag base at i = ks = 0
  constexpr int kLag[4] = {0, 8, -4, 4};
  uint32_t a_hi[2][4], a_lo[2][4];
  const uint64_t hi_desc = sm90::smem_descriptor(hi, 16, 1024), lo_desc = sm90::smem_descriptor(lo, 16, 1024);
#pragma unroll
  for (int slice = 0; slice < 8 * kBlocks; ++slice) {
    const int i = slice >> 3, ks = slice & 7, set = slice & 1;
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
      const int lag = base0 + 64 * i - 8 * ks + kLag[reg];
      a_hi[set][reg] = wr_hi_s[lag];
      a_lo[set][reg] = wr_lo_s[lag];
    }
    const uint32_t offset = uint32_t((ks >> 2) * Split::kHalfBytes + (kBlocks - 1 - i) * 128 + 32 * (ks & 3));
    wgmma_tf32x3_slice(acc, a_hi[set], a_lo[set], sm90::descriptor_plus(hi_desc, offset),
                       sm90::descriptor_plus(lo_desc, offset), slice != 0);
  }
  sm90::wgmma_wait<0>();
  sm90::fence_registers(acc);
}
#endif

// f(i, chunk, step) for this thread's 32 accumulators of wgmma_tf32x3_toeplitz: acc[i] is the output at
// step `step` of output chunk `chunk` (D[step][chunk]). Any warpgroup of the block.
template <typename F>
__device__ __forceinline__ void for_each_wgmma_tf32_output(F&& f) {
  const int lane = int(threadIdx.x) & 31, warp = (int(threadIdx.x) >> 5) & 3, g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 2; ++e) f(4 * j + 2 * h + e, 8 * j + 2 * q + e, 16 * warp + g + 8 * h);
}

}  // namespace causalconv::detail
