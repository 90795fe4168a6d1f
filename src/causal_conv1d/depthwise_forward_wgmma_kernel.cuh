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
// output tile in shared memory and back to the row in 16-byte stores.
#pragma once

#include <type_traits>

#include "causal_conv1d/depthwise_kernels.h"
#include "common/sm90_primitives.cuh"
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

  __device__ __forceinline__ void load(const T* w, int64_t w_stride, int width) {
    auto wr = [&](int s) { return (s >= 0 && s < width) ? w[int64_t(width - 1 - s) * w_stride] : from_float<T>(0.0f); };
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int e = int(threadIdx.x) + k * WgmmaToeplitzTile::kThreads, s = e - 64;
      v[k] = e < toeplitz64_pair_count<kBlocks>() ? pack_pair(wr(s), wr(s - 1)) : 0u;
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
// first_step + 8u .. + 7 of the 16-byte aligned row, zero outside [0, n).
template <typename T>
__device__ __forceinline__ void wgmma_toeplitz_stage(unsigned char* stage, const T* row, int64_t first_step,
                                                     int units, int64_t n) {
  static_assert(WgmmaToeplitzTile::kThreads == ToeplitzTile::kThreads, "the same staging block");
  toeplitz_stage_units_async(stage, row, first_step, units, n,
                             [](int u) { return swizzled_unit_offset(u >> 3, u & 7); });
}

#ifdef CAUSALCONV_SM90A
// D = sum_i T_i · B_i for one tile staged at shared address `in`, B_i[c][n] = staged row
// kBlocks - 1 - i + n, column c: the MMAs issued and committed as one group (wait for it with
// wgmma_wait<0>).
template <typename T, int kBlocks>
__device__ __forceinline__ void wgmma_toeplitz_issue(float (&acc)[32], const uint32_t (&a)[kBlocks][4][4],
                                                     uint32_t in) {
  sm90::wgmma_fence();
#pragma unroll
  for (int i = 0; i < kBlocks; ++i)
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const uint64_t desc =
          sm90::smem_descriptor(in + (kBlocks - 1 - i) * WgmmaToeplitzTile::kRowBytes + 32 * ks, 16, 1024);
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

template <typename T, int kBlocks>
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
  const int64_t n = p.length;
  const T* x = static_cast<const T*>(p.x) + b * p.x_stride[0] + c * p.x_stride[1];
  T* y = static_cast<T*>(p.y) + b * p.y_stride[0] + c * p.y_stride[1];
  const int units = 8 * (Tile::kChunks + kHalo);
  auto stage = [&](int slot, int64_t tile) {
    wgmma_toeplitz_stage(stages + slot * Smem::kStageBytes, x, (tile * Tile::kChunks - kHalo) * Tile::kChunk, units, n);
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
    const int64_t j0 = tile * Tile::kOutputs;  // < n
    cp_async_wait<0>();                 // this thread's copies of the tile are done
    sm90::fence_proxy_async_shared();   // ... and visible to wgmma's reads
    __syncthreads();                    // every thread's; the other stage and out_s are free
    if (tile + gridDim.y < tiles) stage(slot ^ 1, tile + gridDim.y);
    cp_async_commit();

    float acc[32] = {};  // (the first MMA overwrites it)
    wgmma_toeplitz_issue<T, kBlocks>(acc, a, sm90::smem_u32(stages + slot * Smem::kStageBytes));
    sm90::wgmma_wait<0>();
    sm90::fence_registers(acc);
    wgmma_toeplitz_outputs_to_shared<T>(out_s, acc, bias, p.silu);
    __syncthreads();
    wgmma_toeplitz_store_tile(y, out_s, 0, j0, n);
  }
#endif
}

}  // namespace causalconv::detail
