// Depthwise causal conv forward on Hopper's warpgroup MMA (sm_90a; 16-bit dtypes, dilation 1,
// rows with unit time stride and 16-byte aligned starts): the blocked Toeplitz form of
// common/toeplitz_mma.cuh with 64-step chunks,
//     y_chunk[j] = sum_{i < nb} T_i · x_chunk[j - i],   T_i[r][c] = wr[64i + r - c],
// nb = floor((K + 62) / 64) + 1 (2 at K <= 65, 3 at K <= 129, 5 at K <= 256).
//
// Why wgmma: the mma.sync form (depthwise_forward_tc_kernel.cuh) is bound by shared-memory
// wavefronts (ncu: L1 at 86 %, 11.2 M wavefronts for 33.5 M outputs): every warp reads its own
// B operand by ldmatrix, 2 wavefronts per m16n8k16, plus its A fragments. Here the warpgroup's
// wgmma reads each B operand (the staged input) once for 64 x 64 outputs straight from shared
// memory, and A (the Toeplitz blocks) sits in registers: ~6 B of operand traffic per output
// instead of ~36. Measured (session 8, docs/performance.md): K128 0.064 -> 0.058 ms, and now
// latency-bound (4 blocks/SM, the MMAs not overlapped with the loads), not shared-memory-bound.
//
// A block (one warpgroup) owns one (b, c) row and walks 4096-step tiles strided by gridDim.y.
// The tile's input, chunks [J - halo, J + 64) (halo = nb - 1), is staged by cp.async as rows of
// 128 bytes (one chunk each) under the 128-byte swizzle, so the B operand of block i is the
// K-major 64 x 64 matrix starting at row halo - i: a descriptor start (the swizzle follows
// absolute addresses; common/sm90_primitives.cuh). The next tile's input goes into the other
// stage while the current one computes. D[r][n] = y[64 (J + n) + r] goes through a swizzled
// output tile in shared memory and back to the row in 16-byte stores. kGuard (both kernels here):
// tiles whose sums are not all finite are redone by the direct tap loop
// (depthwise_direct.cuh).
#pragma once

#include <cuda.h>  // CUtensorMap

#include <type_traits>

#include "causal_conv1d/depthwise_kernels.h"
#include "causal_conv1d/depthwise_direct.cuh"
#include "common/sm90_primitives.cuh"
#include "common/tile_ring.cuh"
#include "common/toeplitz_mma.cuh"
#include "common/toeplitz_wgmma.cuh"

namespace causalconv::detail {

// Entries of the pair table (Toeplitz64Pairs): lags -64 .. 64 kBlocks - 1.
template <int kBlocks>
constexpr int toeplitz64_pair_count() { return 64 * (kBlocks + 1); }

// Shared memory of depthwise_forward_wgmma_kernel<T, kBlocks> (kBlocks = toeplitz64_blocks(K)):
// kStages input stages of kChunks + kBlocks - 1 rows (each rounded up to 1024 bytes), the output
// tile, the pair table of Toeplitz64Pairs, and 1024 bytes to align the start.
template <int kBlocks>
struct DepthwiseWgmmaSmem {
  using Tile = WgmmaToeplitzTile;
  static constexpr int kStages = 2;
  static constexpr int kStageBytes = (Tile::kChunks + kBlocks - 1 + 7) / 8 * 1024;
  static constexpr int kOutBytes = Tile::kChunks * Tile::kRowBytes;
  static constexpr int kPairs = toeplitz64_pair_count<kBlocks>();
  static constexpr int kBytes = 1024 + kStages * kStageBytes + kOutBytes + 4 * kPairs;
};

// pairs_s[64 + s] = (wr[s], wr[s - 1]) as one MMA operand register (wr[s] in the low half), for
// lags s in [-64, 64 kBlocks), wr[s] = w[K-1-s] inside [0, K) and zero outside: a thread's share
// loaded into registers (load, every load in flight at once), then written to shared memory
// (store). The kernel loads them after issuing its first stage's copies: before them (as the b2b
// wgmma kernels do, B2BLagFilters) it was slower on the H200 (session 19, bf16 B1 D4096 L8192,
// side by side: K128 49.7 -> 51.7 us, K65 42.9 -> 44.7).
template <int kBlocks, typename T>
struct Toeplitz64Pairs {
  static constexpr int kPerThread =
      (toeplitz64_pair_count<kBlocks>() + WgmmaToeplitzTile::kThreads - 1) / WgmmaToeplitzTile::kThreads;
  uint32_t v[kPerThread];

  // wr[s]: the tap at lag s (zero outside [0, width)).
  static __device__ __forceinline__ T lag_tap(const T* w, int64_t w_stride, int width, int s) {
    return (s >= 0 && s < width) ? w[int64_t(width - 1 - s) * w_stride] : from_float<T>(0.0f);
  }
  // Entry e of the table.
  static __device__ __forceinline__ uint32_t entry(const T* w, int64_t w_stride, int width, int e) {
    return pack_pair(lag_tap(w, w_stride, width, e - 64), lag_tap(w, w_stride, width, e - 65));
  }
  __device__ __forceinline__ void load(const T* w, int64_t w_stride, int width) {
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int e = int(threadIdx.x) + k * WgmmaToeplitzTile::kThreads;
      v[k] = e < toeplitz64_pair_count<kBlocks>() ? entry(w, w_stride, width, e) : 0u;
    }
  }
  __device__ __forceinline__ void store(uint32_t* pairs_s) const {
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int e = int(threadIdx.x) + k * WgmmaToeplitzTile::kThreads;
      if (e < toeplitz64_pair_count<kBlocks>()) pairs_s[e] = v[k];
    }
  }
};

// This thread's register fragments of A = T_i[:, 16 ks .. 16 ks + 15] for i < kBlocks. The
// wgmma A layout per warp w of the warpgroup is mma.sync's m16n8k16 one on rows 16w .. 16w + 15:
// reg = (row g + 8 (reg & 1), cols 2q + 8 (reg >> 1), +1). Entry (r, c) has lag 64i + r - c and
// (r, c + 1) one less: one pair of the table.
template <int kBlocks>
__device__ __forceinline__ void toeplitz64_a_fragments(uint32_t (&a)[kBlocks][4][4], const uint32_t* pairs_s) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int i = 0; i < kBlocks; ++i)
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
#pragma unroll
      for (int reg = 0; reg < 4; ++reg) {
        const int row = 16 * warp + g + 8 * (reg & 1), col = 16 * ks + 2 * q + 8 * (reg >> 1);
        a[i][ks][reg] = pairs_s[64 + 64 * i + row - col];
      }
}

// cp.async of the tile's input: unit u (row u / 8, 16-byte unit u % 8) holds steps
// first_step + 8u .. + 7 of the 16-byte aligned row, zero outside [lead, n) (lead: of a walk from
// the boundary before the row, toeplitz_stage_units_async).
template <typename T>
__device__ __forceinline__ void wgmma_toeplitz_stage(unsigned char* stage, const T* row, int64_t first_step,
                                                     int units, int64_t n, int lead = 0) {
  static_assert(WgmmaToeplitzTile::kThreads == ToeplitzTile::kThreads, "the same staging block");
  toeplitz_stage_units_async(
      stage, row, first_step, units, n, [](int u) { return swizzled_unit_offset(u >> 3, u & 7); }, lead);
}

#ifdef CAUSALCONV_SM90A
// D = sum_i T_i · B_i for one tile staged at shared address `in`, B_i[c][n] = staged row
// kBlocks - 1 - i + n, column c: the MMAs issued and committed as one group (wait for it with
// wgmma_wait<0>).
template <typename T, int kBlocks>
__device__ __forceinline__ void wgmma_toeplitz_issue(float (&acc)[32], const uint32_t (&a)[kBlocks][4][4],
                                                     uint32_t in) {
  sm90::wgmma_fence();
  const uint64_t rows = sm90::smem_descriptor(in, 16, 1024);
#pragma unroll
  for (int i = 0; i < kBlocks; ++i)
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const uint64_t desc = sm90::descriptor_plus(rows, (kBlocks - 1 - i) * WgmmaToeplitzTile::kRowBytes + 32 * ks);
      sm90::wgmma_m64n64k16_rs<T>(acc, a[i][ks], desc, (i | ks) != 0);
    }
  sm90::wgmma_commit();
}
#endif

// acc[4j + 2h + e] = D[r][n] (r = 16 warp + g + 8h, n = 8j + 2q + e) plus bias, through silu when
// asked, into row n of the swizzled output tile out_s. Each 8 x 8 block of D (j, h) is one m8n8
// matrix in the mma fragment layout (lane (g, q): row g, columns 2q, 2q + 1), so stmatrix .trans
// writes its column c, steps r0 .. r0 + 7 of chunk 8j + c, as one 16-byte unit: four instructions
// for the thread's 32 values, where 32 two-byte stores made the epilogue most of the kernel's
// instructions.
template <typename T>
__device__ __forceinline__ void wgmma_toeplitz_outputs_to_shared(unsigned char* out_s, const float (&acc)[32],
                                                                 float bias, bool apply_silu) {
  constexpr bool kHalf = std::is_same_v<T, __half>;
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  // Lane l gives the address of row l % 8 of matrix l / 8 of each stmatrix: matrix m = 2 jj + h of
  // the instruction for j = 2 x + jj.
  const int m = lane >> 3, c = lane & 7, h = m & 1, jj = m >> 1;
  const uint32_t base = sm90::smem_u32(out_s);
#pragma unroll
  for (int x = 0; x < 4; ++x) {
    uint32_t r[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int j = 2 * x + (i >> 1), hh = i & 1;
      float v0 = acc[4 * j + 2 * hh] + bias, v1 = acc[4 * j + 2 * hh + 1] + bias;
      if (apply_silu) {
        v0 = silu<T>(v0);
        v1 = silu<T>(v1);
      }
      r[i] = pack2<kHalf>(v0, v1);
    }
    const int n = 8 * (2 * x + jj) + c, unit = 2 * warp + h;  // unit: steps 16 warp + 8h .. + 7
    sm90::stmatrix_x4_trans(base + uint32_t(swizzled_unit_offset(n, unit)), r);
  }
}

// Blocks/SM asked of ptxas: 4 from 4 Toeplitz blocks on (128 registers, some spilled). At 5
// (94 registers) ptxas serializes the wgmma pipeline (warning C7511) and the results are wrong
// under compute-sanitizer memcheck at K 192-256, though right without it; at 4 they are right
// under memcheck too, for K193 60.1 against 59.9 us and K256 69.3 against 66.7 (H200, session 14).
// At 3 it lost (K193 67, K256 73), and below 4 Toeplitz blocks any minimum changes the allocation
// (K65 91 -> 123 registers, 5 -> 4 blocks/SM): 0 asks for none.
constexpr int wgmma_min_blocks_per_sm(int blocks) { return blocks >= 4 ? 4 : 0; }

// kShiftedRows: rows off the 16-byte boundary, each x row the same distance past one as its y row
// (the launcher checks), are walked from the boundary before them (common/toeplitz_mma.cuh,
// kToeplitzShiftedRows); `tiles`, the row's own, and the walk's tail past them: as
// depthwise_forward_tc_kernel's.
template <typename T, int kBlocks, bool kGuard, bool kShiftedRows>
__global__ void __launch_bounds__(WgmmaToeplitzTile::kThreads, wgmma_min_blocks_per_sm(kBlocks))
    depthwise_forward_wgmma_kernel(DepthwiseForwardParams p, int64_t tiles) {
#ifdef CAUSALCONV_SM90A
  using Tile = WgmmaToeplitzTile;
  using Smem = DepthwiseWgmmaSmem<kBlocks>;
  unsigned char* const stages = sm90::aligned_dynamic_shared();
  unsigned char* const out_s = stages + Smem::kStages * Smem::kStageBytes;  // [kChunks rows of 128 bytes]
  uint32_t* const pairs_s = reinterpret_cast<uint32_t*>(out_s + Smem::kOutBytes);

  constexpr int kHalo = kBlocks - 1;
  const int64_t bc = int64_t(blockIdx.x);
  const int64_t b = div_nonneg(bc, p.channels), c = bc - b * p.channels;
  const T* x = static_cast<const T*>(p.x) + b * p.x_stride[0] + c * p.x_stride[1];
  T* y = static_cast<T*>(p.y) + b * p.y_stride[0] + c * p.y_stride[1];
  const int lead = kShiftedRows ? toeplitz_shared_lead<T>(x, y) : 0;  // the walk: x_walk[s] = x[s - lead]
  const T* const x_walk = x - lead;
  T* const y_walk = y - lead;
  const int64_t n = p.length + lead;
  const int units = 8 * (Tile::kChunks + kHalo);
  auto stage = [&](int slot, int64_t tile) {
    wgmma_toeplitz_stage(stages + slot * Smem::kStageBytes, x_walk, (tile * Tile::kChunks - kHalo) * Tile::kChunk,
                         units, n, lead);
  };

  Toeplitz64Pairs<kBlocks, T> pairs;
  const T* const w = static_cast<const T*>(p.weight) + c * p.w_stride[0];
  if (int64_t(blockIdx.y) < tiles) stage(0, blockIdx.y);
  cp_async_commit();
  pairs.load(w, p.w_stride[1], int(p.width));  // after the copies (Toeplitz64Pairs)
  pairs.store(pairs_s);
  const float bias = p.bias ? to_float(static_cast<const T*>(p.bias)[c * p.bias_stride]) : 0.0f;
  __syncthreads();
  uint32_t a[kBlocks][4][4];
  toeplitz64_a_fragments<kBlocks>(a, pairs_s);

  int slot = 0;
#pragma unroll 1
  for (int64_t tile = blockIdx.y; tile < tiles; tile += gridDim.y, slot ^= 1) {
    const int64_t j0 = tile * Tile::kOutputs;
    cp_async_wait<0>();                 // this thread's copies of the tile are done
    sm90::fence_proxy_async_shared();   // ... and visible to wgmma's reads (the walk's masked first unit too)
    __syncthreads();                    // every thread's; the other stage and out_s are free
    if (tile + gridDim.y < tiles) stage(slot ^ 1, tile + gridDim.y);
    cp_async_commit();

    float acc[32] = {};  // (the first MMA overwrites it)
    wgmma_toeplitz_issue<T, kBlocks>(acc, a, sm90::smem_u32(stages + slot * Smem::kStageBytes));
    sm90::wgmma_wait<0>();
    sm90::fence_registers(acc);
    const bool vote = kGuard && any_nonfinite<32>(acc);
    wgmma_toeplitz_outputs_to_shared<T>(out_s, acc, bias, p.silu);
    if (guarded_tile_barrier<kGuard>(vote)) {
      depthwise_direct_tile<Tile::kOutputs, Tile::kThreads>(
          x, w, p.w_stride[1], int(p.width), j0 - lead, p.length, bias, p.silu,
          [out_s](int i, float v) { wgmma_toeplitz_output<T>(out_s, 0, i) = from_float<T>(v); });
      __syncthreads();
    }
    wgmma_toeplitz_store_tile(y_walk, out_s, 0, j0, n, lead);
  }
  if constexpr (kShiftedRows)
    depthwise_walk_tail<Tile::kThreads>(x, y, w, p.w_stride[1], int(p.width), tiles, Tile::kOutputs, lead, p.length,
                                        bias, p.silu);
#endif
}

// ---- The streaming form: rows whose length is a multiple of 64 ---------------------------------
//
// The kernel above stages its tiles itself (cp.async) and so has one tile's input in flight per
// block, and builds a row's Toeplitz fragments once per row of 1-2 tiles (L8192): it reached 63 % of
// the copy rate at K128 (session 16). Here a producer warp streams the tiles through a ring of
// kStages stages by TMA, each a box of 64 + halo chunks of one row (zeros before the row and past
// its end: TMA's out-of-bounds fill), so several tiles per block are in flight while the consumer
// warpgroup multiplies; and the outputs leave by TMA stores from 3 swizzled output tiles, so no
// consumer thread waits on a global store. A persistent grid: block k takes the contiguous range
// [k W / G, (k + 1) W / G) of the W = rows x tiles-per-row tiles in row-major order, so it changes
// rows (and rebuilds its A fragments) at most once per row's tiles.
//
// The view both maps use: (64 steps, L / 64 chunks, C, B) with chunk stride 128 bytes, which needs
// L % 64 == 0 (a partial last chunk would reach into the next row) and 16-byte aligned rows.
//
// A stage holds, besides its input box, the row's pair table (Toeplitz64Pairs::entry) and bias,
// written by the producer when the tile starts a new row: the consumers read them, build their
// fragments and only then release the stage. The producer loads a block's next row's weights into
// registers all at once when a row starts, as loaded, and packs them into the table's pairs at the
// next row change. Packed right after their loads (sessions 28-45) they held up the TMA load of
// every row's first tile (session 45's ncu); now ptxas waits for them at the first branch of the
// next iteration (the loop's top BRA waits on their scoreboard: session 47's SASS), before the next
// tile's load instead, and 1.5 % of the K128 forward went (H100, session 46: 47.65 -> 46.94 us;
// loaded a row ahead but packed at once, it lost: 0.058 against 0.056 ms). A form with no such wait
// tied (session 47: a weights warp writing a ring of row tables, the consumers issuing the TMA
// loads; K128 0.056 against 0.055 ms, K256 2.5 % slower).
//
// Measured (H200, bf16 B1 C4096 L8192, session 28): ~46-48 us from K9 to K193 whatever the width,
// as fast with 2 stages as with 4; against the kernel above K128 47.7 / 49.8 us, K193 50 / 58.7,
// K256 64 / 73, but K33-K65 46 / 43: the launcher takes it from K66.
template <int kBlocks>
struct DepthwiseWgmmaRingSmem {
  using Tile = WgmmaToeplitzTile;
  static constexpr int kStages = 4;
  static constexpr int kBoxChunks = Tile::kChunks + kBlocks - 1;  // the halo first
  static constexpr uint32_t kBoxBytes = uint32_t(kBoxChunks) * Tile::kRowBytes;
  static constexpr int kStageBytes = (kBoxChunks + 7) / 8 * 1024;
  static constexpr int kOutTiles = 3;  // a tile's TMA store has two tiles' time to read it
  static constexpr int kOutBytes = Tile::kChunks * Tile::kRowBytes;
  static constexpr int kTableWords = toeplitz64_pair_count<kBlocks>() + 2;  // pairs, bias, padding
  static constexpr int kOutOffset = kStages * kStageBytes;
  static constexpr int kTableOffset = kOutOffset + kOutTiles * kOutBytes;
  static constexpr int kBarrierOffset = kTableOffset + kStages * kTableWords * 4;
  static constexpr int kBytes = 1024 + kBarrierOffset + 2 * kStages * 8;
  static constexpr int kThreads = Tile::kThreads + 32;  // the consumer warpgroup, then the producer warp
};

// Blocks/SM asked of ptxas: 3 (136 registers) up to 4 Toeplitz blocks; 2 at 5 (140 registers:
// at 136 ptxas would serialise the wgmmas, as in the kernel above).
constexpr int wgmma_ring_min_blocks_per_sm(int blocks) { return blocks <= 4 ? 3 : 2; }

template <typename T, int kBlocks, bool kGuard>
__global__ void __launch_bounds__(DepthwiseWgmmaRingSmem<kBlocks>::kThreads, wgmma_ring_min_blocks_per_sm(kBlocks))
    depthwise_forward_wgmma_ring_kernel(const __grid_constant__ CUtensorMap x_map,
                                        const __grid_constant__ CUtensorMap y_map, DepthwiseForwardParams p,
                                        int64_t tiles_per_row) {
#ifdef CAUSALCONV_SM90A
  using Tile = WgmmaToeplitzTile;
  using Smem = DepthwiseWgmmaRingSmem<kBlocks>;
  constexpr int kHalo = kBlocks - 1, kStages = Smem::kStages;
  uint8_t* const smem = sm90::aligned_dynamic_shared();
  uint8_t* const stages = smem;
  uint8_t* const outs = smem + Smem::kOutOffset;
  uint32_t* const tables = reinterpret_cast<uint32_t*>(smem + Smem::kTableOffset);
  uint64_t* const full = reinterpret_cast<uint64_t*>(smem + Smem::kBarrierOffset);  // producer lanes + TMA bytes
  uint64_t* const empty = full + kStages;                                           // consumer warps
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  if (threadIdx.x == 0) {
    sm90::tma_prefetch_descriptor(&x_map);
    sm90::tma_prefetch_descriptor(&y_map);
    for (int s = 0; s < kStages; ++s) {
      sm90::mbarrier_init(&full[s], 32);
      sm90::mbarrier_init(&empty[s], Tile::kThreads / 32);
    }
    sm90::mbarrier_init_fence();
  }
  __syncthreads();

  const BlockTileRange range(p.batch * p.channels * tiles_per_row);
  const int64_t first = range.first, last = range.last;

  if (warp == Tile::kThreads / 32) {  // the producer
    constexpr int kEntries = toeplitz64_pair_count<kBlocks>() + 1;  // the pairs, then the bias
    constexpr int kPerLane = (kEntries + 31) / 32;
    // A row's weights as loaded (entry k: its pair's two taps; the bias in the last entry), packed
    // at the row change after the one that issued the loads (above).
    T raw[kPerLane][2];
    auto load_raw = [&](int64_t c) {
      using Pairs = Toeplitz64Pairs<kBlocks, T>;
      const T* const wc = static_cast<const T*>(p.weight) + c * p.w_stride[0];
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int e = lane + 32 * k;
        raw[k][0] = e < kEntries - 1 ? Pairs::lag_tap(wc, p.w_stride[1], int(p.width), e - 64)
                    : e == kEntries - 1 && p.bias ? static_cast<const T*>(p.bias)[c * p.bias_stride]
                                                  : from_float<T>(0.0f);
        raw[k][1] = e < kEntries - 1 ? Pairs::lag_tap(wc, p.w_stride[1], int(p.width), e - 65) : from_float<T>(0.0f);
      }
    };
    RingWalk w(first, tiles_per_row, p.channels);
    load_raw(w.c);
    uint32_t entries[kPerLane];
    uint32_t i = 0;
    for (int64_t work = first; work < last; ++work, ++i, w.advance(tiles_per_row, p.channels)) {
      const int s = int(i % kStages);
      if (w.new_row) {
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) {
          const int e = lane + 32 * k;
          entries[k] = e < kEntries - 1 ? pack_pair(raw[k][0], raw[k][1]) : __float_as_uint(to_float(raw[k][0]));
        }
        // The block's next row's loads, if its range reaches it: in flight while this row goes by.
        if ((w.b * p.channels + w.c + 1) * tiles_per_row < last) load_raw(w.c + 1 == p.channels ? 0 : w.c + 1);
      }
      if (i >= kStages) sm90::mbarrier_wait(&empty[s], (i / kStages - 1) & 1);
      if (w.new_row) {
        uint32_t* const table = tables + s * Smem::kTableWords;
#pragma unroll
        for (int k = 0; k < kPerLane; ++k)
          if (lane + 32 * k < kEntries) table[lane + 32 * k] = entries[k];
      }
      if (lane == 0) {
        sm90::mbarrier_arrive_expect_tx(&full[s], Smem::kBoxBytes);
        sm90::tma_load_4d(stages + s * Smem::kStageBytes, &x_map, &full[s], 0,
                          int32_t(w.tile * Tile::kChunks - kHalo), int32_t(w.c), int32_t(w.b));
      } else {
        sm90::mbarrier_arrive(&full[s]);
      }
    }
    return;
  }

  // The consumer warpgroup.
  float bias = 0.0f;
  uint32_t a[kBlocks][4][4];
  RingWalk w(first, tiles_per_row, p.channels);
  uint32_t i = 0;
  for (int64_t work = first; work < last; ++work, ++i, w.advance(tiles_per_row, p.channels)) {
    const int s = int(i % kStages);
    sm90::mbarrier_wait(&full[s], (i / kStages) & 1);
    if (w.new_row) {
      const uint32_t* const table = tables + s * Smem::kTableWords;
      toeplitz64_a_fragments<kBlocks>(a, table);
      bias = __uint_as_float(table[toeplitz64_pair_count<kBlocks>()]);
    }
    float acc[32] = {};  // (the first MMA overwrites it)
    wgmma_toeplitz_issue<T, kBlocks>(acc, a, sm90::smem_u32(stages + s * Smem::kStageBytes));
    sm90::wgmma_wait<0>();
    sm90::fence_registers(acc);
    if (lane == 0) sm90::mbarrier_arrive(&empty[s]);
    // Output tile i % kOutTiles: its last store (tile i - kOutTiles) finished reading it before the
    // last tile's barrier (below).
    uint8_t* const out = outs + (i % Smem::kOutTiles) * Smem::kOutBytes;
    const bool vote = kGuard && any_nonfinite<32>(acc);
    wgmma_toeplitz_outputs_to_shared<T>(out, acc, bias, p.silu);
    sm90::fence_proxy_async_shared();  // the tile's bytes, before the TMA store reads them
    // The store of tile i + 1 - kOutTiles has read its tile, which the next tile writes.
    if (threadIdx.x == 0) sm90::bulk_wait_group_read<Smem::kOutTiles - 2>();
    if constexpr (kGuard) {
      if (sm90::named_barrier_sync_or(1, Tile::kThreads, vote)) {
        const T* const x_row = static_cast<const T*>(p.x) + w.b * p.x_stride[0] + w.c * p.x_stride[1];
        const T* const taps = static_cast<const T*>(p.weight) + w.c * p.w_stride[0];
        depthwise_direct_tile<Tile::kOutputs, Tile::kThreads>(
            x_row, taps, p.w_stride[1], int(p.width), w.tile * Tile::kOutputs, p.length, bias, p.silu,
            [out](int j, float v) { wgmma_toeplitz_output<T>(out, 0, j) = from_float<T>(v); });
        sm90::fence_proxy_async_shared();
        sm90::named_barrier_sync(1, Tile::kThreads);
      }
    } else {
      sm90::named_barrier_sync(1, Tile::kThreads);
    }
    // (Stored from the tile by every consumer thread's 16-byte st.global instead, as the kernel above
    // does, K128 lost 2 %: H100, session 45.)
    if (threadIdx.x == 0) {
      sm90::tma_store_4d(&y_map, out, 0, int32_t(w.tile * Tile::kChunks), int32_t(w.c), int32_t(w.b));
      sm90::bulk_commit_group();
    }
  }
  if (threadIdx.x == 0) sm90::bulk_wait_group<0>();  // the stores, before the block's shared memory goes
#endif
}

}  // namespace causalconv::detail
