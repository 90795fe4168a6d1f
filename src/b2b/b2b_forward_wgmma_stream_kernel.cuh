// The fused b2b forward on warpgroup MMA, streamed (sm_90a; fp16/bf16, Kp <= 32, 9 <= Km <= 256,
// rows of whole 64-step chunks starting 16-byte aligned): the products of
// b2b_forward_wgmma_kernel.cuh (its comment explains the Hankel-table form), in a persistent grid.
//
// Why. The per-row kernel builds a block's four Hankel tables, after loading its filters, before
// its first tile, and walks 2 tiles a block at L8192: that prologue was ~45 % of its warps'
// samples there (H100, session 42), and B1 D4096 L8192 ran at 71 % of the copy rate on the H200
// against 89 % at L131072 (session 38). Here block k walks the contiguous range [k W / G, (k + 1)
// W / G) of the W = rows x tiles-per-row tiles (common/tile_ring.cuh), so its tables are rebuilt
// only where its range changes rows, from filters loaded a row ahead (no global latency on the
// way), and its blocks stay resident.
//
// Roles. A producer warp (one lane) streams each tile's three x rows (chunks J - 1 .. J + 63 of
// rows 3c, 3c + 1, 3c + 2: three TMA boxes, zero before the row and past its end) into a ring of
// kStages stages. The consumer warpgroup, per tile:
//   (row change) stores the row's filters, loaded a row ahead, as lags; builds the four tables;
//     loads the next row's filters; zeroes the z halo at a row's first tile;
//   1. the u and v projections (10 MMAs) from the stage; at the block's first tile, if it starts
//      mid-row, the z halo on the CUDA cores meanwhile;
//   2. z = u v into the z tile; the gate's projection (5 MMAs: after z, so that 64 accumulators are
//      live at a time, not 96);
//   3. the mixer over the z tile; once the gate's MMAs are done, the stage goes back to the
//      producer (so that even one stage is refilled while the rest of the tile runs); out =
//      gate (h + skip z) written over z in the z tile, the next tile's halo carried first; the
//      outputs stored from there in 16-byte stores.
// Four named barriers a tile among the consumers (the producer never joins them).
#pragma once

#include <cuda.h>  // CUtensorMap

#include <type_traits>

#include "b2b/b2b_direct.cuh"
#include "b2b/b2b_hankel_wgmma.cuh"
#include "b2b/b2b_kernels.h"
#include "common/cuda_math.cuh"
#include "common/sm90_primitives.cuh"
#include "common/tile_ring.cuh"
#include "common/toeplitz_guard.cuh"
#include "common/toeplitz_wgmma.cuh"

namespace causalconv::detail {

// Shared memory from the 1024-byte aligned start (bytes): kStages stages of three 1024-byte
// aligned x boxes (65 chunk rows each), the z tile (Hm halo rows, then 64; also the output tile),
// the three projection tables and the mixer table, the lag array they are built from, the
// stages' full and empty barriers.
template <int kMixerBlocks, int kStages>
struct B2BWgmmaStreamLayout {
  using Tile = WgmmaToeplitzTile;
  static constexpr int kProjBlocks = 2;  // Kp <= 65
  static constexpr int kHalo = kMixerBlocks - 1;
  static constexpr int kBoxChunks = Tile::kChunks + 1;  // chunk J - 1 first
  static constexpr uint32_t kBoxBytes = uint32_t(kBoxChunks) * Tile::kRowBytes;
  static constexpr int kBoxPitch = (kBoxChunks + 7) / 8 * 1024;  // each box 1024-byte aligned (TMA's swizzle)
  static constexpr int kStageBytes = 3 * kBoxPitch;
  static constexpr int kZRow = kStages * kStageBytes / Tile::kRowBytes;  // in 128-byte rows
  static constexpr int kOutRow = kZRow + kHalo;                           // z (and out) of chunk J + m: row kOutRow + m
  static constexpr int kProjTable = Tile::kRowBytes * (kOutRow + Tile::kChunks);
  static constexpr int kProjTableBytes = 128 * hankel_cores(kProjBlocks);
  static constexpr int kMixerTable = kProjTable + 3 * kProjTableBytes;
  static constexpr int kLags = kMixerTable + 128 * hankel_cores(kMixerBlocks);
  static constexpr int kLagBytes = 2 * (3 * hankel_lag_entries<kProjBlocks>() + hankel_lag_entries<kMixerBlocks>());
  static constexpr int kBarriers = (kLags + kLagBytes + 7) / 8 * 8;
  static constexpr int kBytes = 1024 + kBarriers + 2 * kStages * 8;
  static constexpr int kThreads = Tile::kThreads + 32;  // the consumer warpgroup, then the producer warp
  // One stage (refilled while a tile's mixer runs): 51-54 KB, three blocks an SM as the per-row
  // kernel; two stages: two blocks.
  static constexpr int kMinBlocksPerSm = kStages == 1 ? 3 : 2;
};

template <typename T, int kMixerBlocks, int kStages, bool kGuard>
__global__ void __launch_bounds__(B2BWgmmaStreamLayout<kMixerBlocks, kStages>::kThreads,
                                  B2BWgmmaStreamLayout<kMixerBlocks, kStages>::kMinBlocksPerSm)
    b2b_forward_wgmma_stream_kernel(const __grid_constant__ CUtensorMap x_map, B2BForwardParams p,
                                    int64_t tiles_per_row) {
#ifdef CAUSALCONV_SM90A
  using Tile = WgmmaToeplitzTile;
  using Layout = B2BWgmmaStreamLayout<kMixerBlocks, kStages>;
  constexpr int kHalo = Layout::kHalo, kZRow = Layout::kZRow, kOutRow = Layout::kOutRow;
  constexpr uint32_t kConsumers = Tile::kThreads;
  unsigned char* const smem = sm90::aligned_dynamic_shared();
  const uint32_t smem_base = sm90::smem_u32(smem);
  uint64_t* const full = reinterpret_cast<uint64_t*>(smem + Layout::kBarriers);  // the TMA bytes
  uint64_t* const empty = full + kStages;                                         // the consumer warps
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  if (threadIdx.x == 0) {
    sm90::tma_prefetch_descriptor(&x_map);
    for (int s = 0; s < kStages; ++s) {
      sm90::mbarrier_init(&full[s], 1);
      sm90::mbarrier_init(&empty[s], kConsumers / 32);
    }
    sm90::mbarrier_init_fence();
  }
  __syncthreads();
  const BlockTileRange range(p.batch * p.dim * tiles_per_row);

  if (warp == int(kConsumers / 32)) {  // the producer: one lane issues the loads
    if (lane != 0) return;
    RingWalk w(range.first, tiles_per_row, p.dim);
    uint32_t i = 0;
    for (int64_t work = range.first; work < range.last; ++work, ++i, w.advance(tiles_per_row, p.dim)) {
      const int s = int(i % kStages);
      if (i >= kStages) sm90::mbarrier_wait(&empty[s], (i / kStages - 1) & 1);
      sm90::mbarrier_arrive_expect_tx(&full[s], 3 * Layout::kBoxBytes);
#pragma unroll
      for (int j = 0; j < 3; ++j)
        sm90::tma_load_4d(smem + s * Layout::kStageBytes + j * Layout::kBoxPitch, &x_map, &full[s], 0,
                          int32_t(w.tile * Tile::kChunks - 1), int32_t(3 * w.c + j), int32_t(w.b));
    }
    return;
  }

  // The consumer warpgroup.
  const int kp = int(p.proj_width), g = lane >> 2, q = lane & 3;
  const int64_t n = p.length;
  T* const lags = reinterpret_cast<T*>(smem + Layout::kLags);
  const uint32_t proj_table = smem_base + Layout::kProjTable, mixer_table = smem_base + Layout::kMixerTable;
  auto skip_of = [&](int64_t c) { return static_cast<const T*>(p.skip_bias)[c * p.skip_stride]; };
  RingWalk w(range.first, tiles_per_row, p.dim);
  // The filters (and skip weight) of the row the block starts next, loaded a row ahead.
  B2BLagFilters<Layout::kProjBlocks, kMixerBlocks, T> filters;
  filters.load(p, w.c);
  T next_skip = skip_of(w.c);
  float skip = 0.0f;
  uint32_t i = 0;
#pragma unroll 1
  for (int64_t work = range.first; work < range.last; ++work, ++i, w.advance(tiles_per_row, p.dim)) {
    const int s = int(i % kStages);
    const int64_t j0 = w.tile * Tile::kOutputs;
    const T* const x0 = static_cast<const T*>(p.x) + w.b * p.x_stride[0] + 3 * w.c * p.x_stride[1];
    if (w.new_row) {
      filters.store(lags);
      skip = to_float(next_skip);
      const int64_t row = w.b * p.dim + w.c;
      if ((row + 1) * tiles_per_row < range.last) {  // the block's next row: its filters in flight meanwhile
        const int64_t c_next = w.c + 1 == p.dim ? 0 : w.c + 1;
        filters.load(p, c_next);
        next_skip = skip_of(c_next);
      }
      // Every consumer's lags are stored, and its MMAs of the row before (reading the tables) done.
      sm90::named_barrier_sync(1, kConsumers);
      b2b_hankel_tables<Layout::kProjBlocks, kMixerBlocks, false>(smem + Layout::kProjTable, lags, kp,
                                                                  int(p.mixer_width));
      if (w.tile == 0)  // z before the row is zero
        for (int u = int(threadIdx.x); u < 8 * kHalo; u += int(kConsumers))
          *reinterpret_cast<uint4*>(smem + Tile::kRowBytes * kZRow + 16 * u) = make_uint4(0, 0, 0, 0);
      sm90::fence_proxy_async_shared();
      sm90::named_barrier_sync(1, kConsumers);
    }

    // 1. The z projections from this stage (the gate's after z: 64 accumulators live at a time, not 96).
    sm90::mbarrier_wait(&full[s], (i / kStages) & 1);
    const uint32_t stage = smem_base + s * Layout::kStageBytes;
    float u[32], v[32];
    // Projection j's MMAs into d; its last block's first k-slice chosen once for a group of them,
    // each branch a whole commit group (a runtime choice between two MMAs, or a group whose
    // accumulators meet at a branch's join, makes ptxas serialise them).
    auto projection = [&](float(&d)[32], int j, auto first_slice) {
      wgmma_hankel_conv<T, 2, decltype(first_slice)::value>(d, stage + j * Layout::kBoxPitch,
                                                            proj_table + j * Layout::kProjTableBytes);
    };
    auto issue_projections = [&](auto group) {
      auto issue = [&](auto first_slice) {
        sm90::wgmma_fence();
        group(first_slice);
        sm90::wgmma_commit();
      };
      if (kp <= 17)
        issue(std::integral_constant<int, 3>{});
      else
        issue(std::integral_constant<int, 2>{});
    };
    static_assert(hankel_last_block_first_slice(2, 17) == 3 && hankel_last_block_first_slice(2, 32) == 2, "");
    issue_projections([&](auto first_slice) {
      projection(u, 1, first_slice);
      projection(v, 2, first_slice);
    });
    if (work == range.first && w.tile > 0) {  // the z halo of a block that starts mid-row
      const T* const x1 = x0 + p.x_stride[1];
      const T* const wp1 = static_cast<const T*>(p.weight_proj) + (3 * w.c + 1) * p.wp_stride[0];
      b2b_wgmma_z_halo<T, kHalo>(smem, kZRow, x1, x1 + p.x_stride[1], wp1, wp1 + p.wp_stride[0], p.wp_stride[1],
                                 kp, j0);
    }
    sm90::named_barrier_sync(1, kConsumers);  // the last tile's outputs are stored: the z tile is free
    sm90::wgmma_wait<0>();
    sm90::fence_registers(u);
    sm90::fence_registers(v);

    // 2. z into the z tile (row kOutRow + m for chunk J + m); the gate's projection.
    for_each_hankel_pair(warp, g, [&](int e, int m, int j) {
      *reinterpret_cast<uint32_t*>(smem + hankel_pair_offset(kOutRow + m, j, q)) =
          pack_pair(from_float<T>(u[e + 1] * v[e + 1]), from_float<T>(u[e] * v[e]));
    });
    float gate[32];
    issue_projections([&](auto first_slice) { projection(gate, 0, first_slice); });
    sm90::fence_proxy_async_shared();
    sm90::named_barrier_sync(1, kConsumers);  // the whole z tile (and a computed halo) is written

    // 3. The mixer; once the gate's MMAs are done the stage goes back to the producer. The next
    // tile's halo (this tile's last Hm chunks, 64 rows on: the same swizzle phase) is read before the
    // barrier and written after it; out = gate (h + skip z) over z.
    float h_acc[32];
    sm90::wgmma_fence();
    wgmma_hankel_conv<T, kMixerBlocks, 0>(h_acc, smem_base + Tile::kRowBytes * kZRow, mixer_table);
    sm90::wgmma_commit();
    sm90::wgmma_wait<1>();
    sm90::fence_registers(gate);
    if (lane == 0) sm90::mbarrier_arrive(&empty[s]);  // this warp's MMAs have read the stage
    const bool carries = threadIdx.x < 8 * kHalo;
    uint4 carry = make_uint4(0, 0, 0, 0);
    if (carries)
      carry = *reinterpret_cast<const uint4*>(smem + Tile::kRowBytes * (kZRow + Tile::kChunks) + 16 * threadIdx.x);
    sm90::wgmma_wait<0>();
    sm90::fence_registers(h_acc);
    sm90::named_barrier_sync(1, kConsumers);  // every warp's mixer reads are done
    if (carries) *reinterpret_cast<uint4*>(smem + Tile::kRowBytes * kZRow + 16 * threadIdx.x) = carry;
    bool vote = false;
    for_each_hankel_pair(warp, g, [&](int e, int m, int j) {
      uint32_t* const pair = reinterpret_cast<uint32_t*>(smem + hankel_pair_offset(kOutRow + m, j, q));
      const uint32_t z = *pair;  // (steps e + 1, e: low, high)
      const float lo = gate[e + 1] * fmaf(skip, pair_half_to_float<T>(z, false), h_acc[e + 1]);
      const float hi = gate[e] * fmaf(skip, pair_half_to_float<T>(z, true), h_acc[e]);
      if constexpr (kGuard) vote = vote || nonfinite(lo) || nonfinite(hi);
      *pair = pack_pair(from_float<T>(lo), from_float<T>(hi));
    });
    // The output tile is complete (with the guard: and redone by direct loops where a sum is not finite).
    if constexpr (kGuard) {
      if (sm90::named_barrier_sync_or(1, kConsumers, vote)) {
        b2b_direct_tile<Tile::kOutputs, Tile::kThreads>(
            B2BDirectChannel<T>(p, x0, w.c), j0,
            [smem](int o, float value) { wgmma_toeplitz_output<T>(smem, kOutRow, o) = from_float<T>(value); });
        sm90::named_barrier_sync(1, kConsumers);
      }
    } else {
      sm90::named_barrier_sync(1, kConsumers);
    }
    T* const out = static_cast<T*>(p.out) + w.b * p.out_stride[0] + w.c * p.out_stride[1];
    wgmma_toeplitz_store_tile(out, smem, kOutRow, j0, n);
  }
#endif
}

}  // namespace causalconv::detail
