// Fused b2b_causal_conv1d forward on Hopper's warpgroup MMA (sm_90a; fp16/bf16, Kp <= 32,
// 9 <= Km <= 256, every x and out row 16-byte aligned, or with kRealigned any rows): all four
// filters, the three projections and the mixer, as wgmma products with both operands in shared
// memory.
//
// Form. Time is cut into 64-step chunks; a tile is 64 chunks (4096 steps) of one (b, c) row.
// For a filter with lag-ordered taps wr[s] = w[K-1-s] and nb = toeplitz64_blocks(K) blocks,
//     y[64 (J + m) + r] = sum_{i < nb} sum_c X[J + m - i][c] · wr[64 i + r - c],
// a product with M = the tile's 64 chunks m, K = the 64 steps c of an input chunk, and
// N = the 64 steps r of an output chunk. A is the staged rows themselves (K-major, one
// 128-byte row per chunk, 128-byte swizzle; block i starts i rows earlier), so no operand is
// rebuilt per tile. B_i[c][n] = wr[64 i + 63 - n - c] with the output steps reversed
// (n = 63 - r): each 8 x 8 core matrix of B_i (K-major, unswizzled) depends only on
// Q = 8 (nb - 1 - i) + n / 8 + c / 8, so a table of 8 nb + 7 cores (the filter's "Hankel
// table", 3-6 KB) serves every block and k-slice through descriptors whose core strides along
// both N and K are 128 bytes: core Q holds wr[63 + 8 (8 (nb - 1) - Q) - a - b] at row a,
// column b. (Unreversed N would need a negative stride.) The projections skip the all-zero
// k-slices of their last block: 5 of 8 slices run at Kp <= 17, 6 at Kp <= 32.
//
// Per tile of a block (b, c), walking the consecutive tiles of its segment of the row:
//   1. x rows 3c, 3c+1, 3c+2 over chunks [J - 1, J + 64) are in this stage (cp.async, zero
//      outside [0, L); kRealigned: copied from each row's 16-byte grid, then shifted into place);
//      the next tile's go into the other stage meanwhile;
//   2. u = P1 x1, v = P2 x2 and gate = P0 x0 (15 MMAs, one commit group);
//   3. z = u v, rounded to the storage type, into the z tile's rows Hm .. Hm + 63 (rows
//      0 .. Hm - 1 hold the Hm chunks before J: carried from the previous tile, or computed
//      on the CUDA cores at the segment's first tile), Hm = mixer blocks - 1;
//   4. h = M z (the mixer); out = gate (h + skip z) into an output tile (the stage's consumed
//      x1 rows), written back in 16-byte stores.
// z is rounded once to the 16-bit type, as in the mma.sync form (b2b_forward_tc_kernel.cuh).
// kGuard: a tile with an output that is not finite is recomputed by direct loops
// (common/toeplitz_guard.cuh: the products' zero lags must not meet a NaN or infinity;
// b2b_direct.cuh). A z halo carried out of such a tile may hold such values too: the next tile's
// outputs then are not finite either, and it is recomputed the same way.
#pragma once

#include <type_traits>

#include "b2b/b2b_direct.cuh"
#include "b2b/b2b_hankel_wgmma.cuh"
#include "b2b/b2b_kernels.h"
#include "common/sm90_primitives.cuh"
#include "common/toeplitz_mma.cuh"
#include "common/toeplitz_wgmma.cuh"

namespace causalconv::detail {

// Shared memory, in 128-byte rows from the 1024-byte aligned start: two stages of the three
// x rows (65 chunk rows each), the z tile (Hm + 64 rows), then the three projection tables and
// the mixer table (bytes), (kRealigned) the x rows' raw units past their 65 chunks, plus 1024
// bytes to align the start.
template <int kMixerBlocks, bool kRealigned = false>
struct B2BWgmmaLayout {
  using Tile = WgmmaToeplitzTile;
  static constexpr int kProjBlocks = 2;  // Kp <= 65
  static constexpr int kXRows = Tile::kChunks + 1;
  static constexpr int kStageRows = 3 * kXRows;
  static constexpr int kHalo = kMixerBlocks - 1;
  static constexpr int kZRow = 2 * kStageRows;
  static constexpr int kProjTable = Tile::kRowBytes * (kZRow + kHalo + Tile::kChunks);  // bytes
  static constexpr int kProjTableBytes = 128 * hankel_cores(kProjBlocks);
  static constexpr int kMixerTable = kProjTable + 3 * kProjTableBytes;
  static constexpr int kSpill = kMixerTable + 128 * hankel_cores(kMixerBlocks);  // 16 bytes per (stage, row)
  static constexpr int kBytes = 1024 + kSpill + (kRealigned ? 128 : 0);
};

// Block (b*D + c, segment) walks tiles [segment * tiles_per_segment, + tiles_per_segment) of its
// row (fewer at the row's end). kRealigned: rows off the 16-byte grid (odd L), each at its own
// lead, staged as raw 16-byte units and realigned in shared memory (common/toeplitz_wgmma.cuh);
// the output row stored from its own grid.
template <typename T, int kMixerBlocks, bool kGuard, bool kRealigned = false>
__global__ void __launch_bounds__(WgmmaToeplitzTile::kThreads, 3)
    b2b_forward_wgmma_kernel(B2BForwardParams p, int64_t tiles, int64_t tiles_per_segment) {
#ifdef CAUSALCONV_SM90A
  using Tile = WgmmaToeplitzTile;
  using Layout = B2BWgmmaLayout<kMixerBlocks, kRealigned>;
  constexpr int kHalo = Layout::kHalo;
  unsigned char* const smem = sm90::aligned_dynamic_shared();
  const uint32_t smem_base = sm90::smem_u32(smem);
  const int kp = int(p.proj_width);
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, g = lane >> 2, q = lane & 3;

  const int64_t b = div_nonneg(int64_t(blockIdx.x), p.dim);
  const int64_t c = int64_t(blockIdx.x) - b * p.dim;
  const int64_t n = p.length;
  const T* const x0 = static_cast<const T*>(p.x) + b * p.x_stride[0] + 3 * c * p.x_stride[1];
  T* const out = static_cast<T*>(p.out) + b * p.out_stride[0] + c * p.out_stride[1];
  const T* const wp0 = static_cast<const T*>(p.weight_proj) + 3 * c * p.wp_stride[0];
  const int64_t first = int64_t(blockIdx.y) * tiles_per_segment;
  const int64_t last = first + tiles_per_segment < tiles ? first + tiles_per_segment : tiles;

  // x row j of stage `slot`: chunk J - 1 + m at row slot * kStageRows + j * kXRows + m.
  auto x_row = [&](int slot, int j) { return slot * Layout::kStageRows + j * Layout::kXRows; };
  // cp.async of a tile's three x rows: unit u (steps 64 (J - 1) + 8u .. + 7, zero outside [0, n))
  // to unit u % 8 of row x_row + u / 8. A thread's units are the same in every row and tile.
  const int64_t x_stride = p.x_stride[1];
  // kRealigned: x row j's and the output row's values past the 16-byte boundary before them.
  auto lead_of = [](const T* row) { return kRealigned ? int(row_shift16(row)) : 0; };
  const int lead0 = lead_of(x0), lead1 = lead_of(x0 + x_stride), lead2 = lead_of(x0 + 2 * x_stride);
  auto x_lead = [=](int j) { return j == 0 ? lead0 : j == 1 ? lead1 : lead2; };
  auto stage = [&](int slot, int64_t tile) {
    constexpr int kUnits = 8 * Layout::kXRows, kThreads = Tile::kThreads;
    const int64_t first_step = (tile * Tile::kChunks - 1) * Tile::kChunk;
    if constexpr (kRealigned) {  // raw units 0 .. kUnits of each row's 16-byte grid (unit kUnits: the spill)
      const bool interior = first_step >= 8 && first_step + 8 * (kUnits + 1) <= n;
      for (int u = int(threadIdx.x); u <= kUnits; u += kThreads)
#pragma unroll
        for (int j = 0; j < 3; ++j) {
          unsigned char* const dst = u < kUnits ? smem + swizzled_unit_offset(x_row(slot, j) + (u >> 3), u & 7)
                                                : smem + Layout::kSpill + 16 * (3 * slot + j);
          cp_async_raw_unit(dst, x0 + j * x_stride - x_lead(j), first_step + 8 * u, x_lead(j), n, interior);
        }
      return;
    }
    // to_end: the tile's steps pass n. Otherwise every unit is whole but the first tile's first
    // chunk (steps -64 .. -1: each thread's first unit), which is zero.
    auto copy_units = [&](auto to_end) {
#pragma unroll
      for (int k = 0; k < (kUnits + kThreads - 1) / kThreads; ++k) {
        const int u = int(threadIdx.x) + k * kThreads;
        if (u >= kUnits) break;
        const int64_t t = first_step + 8 * u;
        const int bytes = to_end ? staged_unit_bytes(t, n) : k > 0 || t >= 0 ? 16 : 0;
        const T* src = x0 + (bytes > 0 ? t : 0);
#pragma unroll
        for (int j = 0; j < 3; ++j)
          cp_async16(smem + swizzled_unit_offset(x_row(slot, j) + (u >> 3), u & 7), src + j * x_stride, bytes);
      }
    };
    if (first_step + 8 * kUnits > n)
      copy_units(std::true_type{});
    else
      copy_units(std::false_type{});
  };

  B2BLagFilters<Layout::kProjBlocks, kMixerBlocks, T> filters;
  filters.load(p, c);  // before the copies (B2BLagFilters)
  // The skip weight with them: loaded after the tables, its latency was the prologue's last wait.
  const T skip_weight = static_cast<const T*>(p.skip_bias)[c * p.skip_stride];
  if (first < last) stage(0, first);
  cp_async_commit();
  {  // The four Hankel tables, through lag-ordered copies of the filters in the (free) z tile.
    constexpr int kProjLags = hankel_lag_entries<Layout::kProjBlocks>();
    T* const lags = reinterpret_cast<T*>(smem + 128 * Layout::kZRow);  // 3 projections, then the mixer
    filters.store(lags);
    __syncthreads();
    static_assert(Layout::kMixerTable == Layout::kProjTable + 3 * Layout::kProjTableBytes,
                  "the tables are consecutive (b2b_hankel_tables)");
    b2b_hankel_tables<Layout::kProjBlocks, kMixerBlocks, false>(smem + Layout::kProjTable, lags, kp,
                                                                int(p.mixer_width));
    static_assert(2 * (3 * kProjLags + hankel_lag_entries<kMixerBlocks>()) <= 128 * Tile::kChunks, "lags fit");
  }  // (the loop's first barrier orders these reads before the z tile's first writes)
  const float skip = to_float(skip_weight);
  const uint32_t proj_table = smem_base + Layout::kProjTable, mixer_table = smem_base + Layout::kMixerTable;

  int slot = 0;
#pragma unroll 1
  for (int64_t tile = first; tile < last; ++tile, slot ^= 1) {
    const int64_t j0 = tile * Tile::kOutputs;  // < n
    cp_async_wait<0>();                // this thread's copies of the tile are done
    sm90::fence_proxy_async_shared();  // ... and visible to wgmma, as are the tables and the z halo
    __syncthreads();                   // every thread's; the other stage is free
    if (tile + 1 < last) stage(slot ^ 1, tile + 1);
    cp_async_commit();
    if constexpr (kRealigned) {  // the raw units of this stage's rows into their chunks
      wgmma_realign_rows<3, Layout::kXRows>(
          smem, [&](int j) { return x_row(slot, j); }, [&](int j) { return 2 * x_lead(j); },
          [&](int j) { return smem + Layout::kSpill + 16 * (3 * slot + j); });
      sm90::fence_proxy_async_shared();
      __syncthreads();
    }

    // 2. The three projections.
    float u[32], v[32], gate[32];
    auto projections = [&](auto first_slice) {
      constexpr int kFirst = decltype(first_slice)::value;
      sm90::wgmma_fence();
      wgmma_hankel_conv<T, 2, kFirst>(u, smem_base + 128 * x_row(slot, 1), proj_table + Layout::kProjTableBytes);
      wgmma_hankel_conv<T, 2, kFirst>(v, smem_base + 128 * x_row(slot, 2), proj_table + 2 * Layout::kProjTableBytes);
      wgmma_hankel_conv<T, 2, kFirst>(gate, smem_base + 128 * x_row(slot, 0), proj_table);
      sm90::wgmma_commit();
    };
    static_assert(hankel_last_block_first_slice(2, 17) == 3 && hankel_last_block_first_slice(2, 32) == 2, "");
    if (kp <= 17)
      projections(std::integral_constant<int, 3>{});
    else
      projections(std::integral_constant<int, 2>{});
    if (tile == first) {  // the z halo of the segment's first tile
      const T* x1 = x0 + p.x_stride[1];
      b2b_wgmma_z_halo<T, kHalo>(smem, Layout::kZRow, x1, x1 + p.x_stride[1], wp0 + p.wp_stride[0],
                                 wp0 + 2 * p.wp_stride[0], p.wp_stride[1], kp, j0);
    }
    sm90::wgmma_wait<0>();
    sm90::fence_registers(u);
    sm90::fence_registers(v);
    sm90::fence_registers(gate);

    // 3. z into the z tile (row Hm + m for chunk J + m); this thread keeps its values for the skip.
    float z[32];
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int e = 4 * j + 2 * h, m = 16 * warp + g + 8 * h;
        const T lo = from_float<T>(u[e + 1] * v[e + 1]), hi = from_float<T>(u[e] * v[e]);
        *reinterpret_cast<uint32_t*>(smem + hankel_pair_offset(Layout::kZRow + kHalo + m, j, q)) = pack_pair(lo, hi);
        z[e + 1] = to_float(lo);
        z[e] = to_float(hi);
      }
    sm90::fence_proxy_async_shared();
    __syncthreads();  // the whole z tile is written

    // 4. The mixer, then out = gate (h + skip z) into the output tile (this stage's x1 rows).
    float h_acc[32];
    sm90::wgmma_fence();
    wgmma_hankel_conv<T, kMixerBlocks, 0>(h_acc, smem_base + 128 * Layout::kZRow, mixer_table);
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
    sm90::fence_registers(h_acc);
    __syncthreads();  // every warp's mixer reads are done: the z halo rows may be overwritten
    const int out_row = x_row(slot, 1);
    bool vote = false;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int e = 4 * j + 2 * h, m = 16 * warp + g + 8 * h;
        const float lo = gate[e + 1] * fmaf(skip, z[e + 1], h_acc[e + 1]), hi = gate[e] * fmaf(skip, z[e], h_acc[e]);
        vote = vote || nonfinite(lo) || nonfinite(hi);
        *reinterpret_cast<uint32_t*>(smem + hankel_pair_offset(out_row + m, j, q)) =
            pack_pair(from_float<T>(lo), from_float<T>(hi));
      }
    // The next tile's z halo: this tile's last Hm chunks (same swizzle phase: 64 rows apart).
    for (int i = int(threadIdx.x); i < 8 * kHalo; i += Tile::kThreads) {
      const int r = Layout::kZRow + (i >> 3);
      *reinterpret_cast<uint4*>(smem + 128 * r + 16 * (i & 7)) =
          *reinterpret_cast<const uint4*>(smem + 128 * (r + Tile::kChunks) + 16 * (i & 7));
    }
    if (guarded_tile_barrier<kGuard>(vote)) {  // (the barrier: the output tile is complete)
      b2b_direct_tile<Tile::kOutputs, Tile::kThreads>(
          B2BDirectChannel<T>(p, x0, c), j0,
          [smem, out_row](int i, float v) { wgmma_toeplitz_output<T>(smem, out_row, i) = from_float<T>(v); });
      __syncthreads();
    }
    if constexpr (kRealigned)
      wgmma_toeplitz_store_tile_realigned(out, smem, out_row, j0, n, lead_of(out));
    else
      wgmma_toeplitz_store_tile(out, smem, out_row, j0, n);
  }
#endif
}

}  // namespace causalconv::detail
