// The Hankel-table form of the b2b kernels on Hopper's warpgroup MMA (sm_90a, 16-bit types):
// a depthwise filter over 64-step chunks as wgmma products whose B operand is a small table of
// 8 x 8 core matrices shared by every block and k-slice (b2b_forward_wgmma_kernel.cuh explains
// the form), plus the pieces the forward and backward kernels share.
#pragma once

#include <cstdint>

#include "common/sm90_primitives.cuh"
#include "common/toeplitz_mma.cuh"
#include "common/toeplitz_wgmma.cuh"

namespace causalconv::detail {

// Cores of a Hankel table for nb blocks: Q in [0, 8 (nb - 1) + 14].
__host__ __device__ constexpr int hankel_cores(int blocks) { return 8 * blocks + 7; }

// First k-slice of the last block that can hold a nonzero tap: that block's lags
// 64 (nb - 1) + 63 - n - c reach below K only where c >= 64 nb - K - 63.
__host__ __device__ constexpr int hankel_last_block_first_slice(int blocks, int width) {
  return (64 * blocks - width - 78 + 15) / 16 > 0 ? (64 * blocks - width - 78 + 15) / 16 : 0;
}

// lag[64 + s] = wr[s] = w[(K-1-s) stride] for lags s in [-64, 64 kBlocks), zero outside [0, K):
// every tap a Hankel table of kBlocks blocks reads, each loaded once (unrolled: one latency).
template <int kBlocks>
__host__ __device__ constexpr int hankel_lag_entries() { return 64 * (kBlocks + 1); }

// A thread's share of those lags in registers: loaded (load), then written to shared memory
// (store), so that a kernel can issue its first stage's copies between the two.
template <int kBlocks, typename T>
struct LagFilter {
  static constexpr int kPerThread = (hankel_lag_entries<kBlocks>() + WgmmaToeplitzTile::kThreads - 1) /
                                    WgmmaToeplitzTile::kThreads;
  T v[kPerThread];

  __device__ __forceinline__ void load(const T* w, int64_t stride, int width) {
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int i = int(threadIdx.x) + k * WgmmaToeplitzTile::kThreads, s = i - 64;
      v[k] = (i < hankel_lag_entries<kBlocks>() && s >= 0 && s < width) ? w[int64_t(width - 1 - s) * stride]
                                                                         : from_float<T>(0.0f);
    }
  }
  __device__ __forceinline__ void store(T* lag) const {
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int i = int(threadIdx.x) + k * WgmmaToeplitzTile::kThreads;
      if (i < hankel_lag_entries<kBlocks>()) lag[i] = v[k];
    }
  }
};

// Channel c's four filters (the three projections, then the mixer) as lags: registers, then
// the lag array `lags` (the projections kProjLags apart, the mixer after them). P: the forward's
// or the backward's parameters. The wgmma kernels load them before issuing their first stage's
// copies and store them after: loaded after the copies, they waited behind them (H200, session
// 19, bf16 B1 D4096 L8192, side by side: forward Km128 0.097 -> 0.091 ms, Km256 0.114 -> 0.103,
// fwd+bwd Km128 0.521 -> 0.500; copying a second tile at the start as well had cost 20 %). Tables
// built straight from the taps in global memory (eight 2-byte loads a row, no lag array, no barrier)
// lost 29-38 % on the forward (H100, session 42).
template <int kProjBlocks, int kMixerBlocks, typename T>
struct B2BLagFilters {
  static constexpr int kProjLags = hankel_lag_entries<kProjBlocks>();
  LagFilter<kProjBlocks, T> proj[3];
  LagFilter<kMixerBlocks, T> mixer;

  template <typename P>
  __device__ __forceinline__ void load(const P& p, int64_t c) {
    const T* const wp0 = static_cast<const T*>(p.weight_proj) + 3 * c * p.wp_stride[0];
#pragma unroll
    for (int j = 0; j < 3; ++j) proj[j].load(wp0 + j * p.wp_stride[0], p.wp_stride[1], int(p.proj_width));
    mixer.load(static_cast<const T*>(p.weight_mixer) + c * p.wm_stride[0], p.wm_stride[1], int(p.mixer_width));
  }
  __device__ __forceinline__ void store(T* lags) const {
#pragma unroll
    for (int j = 0; j < 3; ++j) proj[j].store(lags + j * kProjLags);
    mixer.store(lags + 3 * kProjLags);
  }
};

// A filter's Hankel table (see the top) from its staged lags: the 16-byte row a of core Q at
// table + 128 Q + 16 a. A row whose eight lags all lie outside [0, width) is stored as zero without
// reading them: most rows of a short filter's table (Kp3: 10 of 184), and the prologue's table
// build is on the critical path of a block's first tile.
template <int kBlocks, typename T>
__device__ __forceinline__ void hankel_table(unsigned char* table, const T* lag, int width) {
  for (int unit = int(threadIdx.x); unit < 8 * hankel_cores(kBlocks); unit += WgmmaToeplitzTile::kThreads) {
    const int s = 63 + 8 * (8 * (kBlocks - 1) - (unit >> 3)) - (unit & 7);  // lag of column 0; column b: s - b
    uint4 row = make_uint4(0, 0, 0, 0);
    if (s >= 0 && s - 7 < width) {
      const T* wr = lag + 64 + s;
      row = make_uint4(pack_pair(wr[0], wr[-1]), pack_pair(wr[-2], wr[-3]), pack_pair(wr[-4], wr[-5]),
                       pack_pair(wr[-6], wr[-7]));
    }
    *reinterpret_cast<uint4*>(table + 16 * unit) = row;
  }
}

// The transposed filter's table for look-ahead products over rows in step order with reversed
// output steps (dz = M^T dh in the backward): B_i[c][n] = wr[64 i + c + n - 63] depends on
// Q = 8 i + n / 8 + c / 8 alone, so core Q holds wr[8 Q + a + b - 63] at row a, column b (zero
// for Q < 7), and block i's cores start at Q = 8 i.
// Rows with no lag in [0, width) are stored as zero, as in hankel_table.
template <int kBlocks, typename T>
__device__ __forceinline__ void hankel_table_transposed(unsigned char* table, const T* lag, int width) {
  for (int unit = int(threadIdx.x); unit < 8 * hankel_cores(kBlocks); unit += WgmmaToeplitzTile::kThreads) {
    const int s = 8 * (unit >> 3) + (unit & 7) - 63;  // lag of column 0; column b: s + b
    uint4 row = make_uint4(0, 0, 0, 0);
    if (s + 7 >= 0 && s < width) {
      const T* wr = lag + 64 + s;
      row = make_uint4(pack_pair(wr[0], wr[1]), pack_pair(wr[2], wr[3]), pack_pair(wr[4], wr[5]),
                       pack_pair(wr[6], wr[7]));
    }
    *reinterpret_cast<uint4*>(table + 16 * unit) = row;
  }
}

// The 16-bit wgmma kernels' tables, a table at a time, row by row (hankel_table,
// hankel_table_transposed): the three projections' (kProjBlocks blocks each), the mixer's and
// (kTransposedMixer) its transposed table, consecutive from `tables` (as the kernels' layouts place
// them); their lags as B2BLagFilters stores them at `lags`. (Built a core per thread from two 16-byte
// lag reads instead, ~3x fewer instructions, the forwards lost 2-6 %: H100, session 45.)
template <int kProjBlocks, int kMixerBlocks, bool kTransposedMixer, typename T>
__device__ __forceinline__ void b2b_hankel_tables(unsigned char* tables, const T* lags, int kp, int km) {
  constexpr int kProjBytes = 128 * hankel_cores(kProjBlocks), kProjLags = hankel_lag_entries<kProjBlocks>();
  unsigned char* const mixer = tables + 3 * kProjBytes;
  for (int j = 0; j < 3; ++j) hankel_table<kProjBlocks>(tables + j * kProjBytes, lags + j * kProjLags, kp);
  hankel_table<kMixerBlocks>(mixer, lags + 3 * kProjLags, km);
  if constexpr (kTransposedMixer)
    hankel_table_transposed<kMixerBlocks>(mixer + 128 * hankel_cores(kMixerBlocks), lags + 3 * kProjLags, km);
}

#ifdef CAUSALCONV_SM90A
// D = the filter of `table` (kBlocks blocks) over 64 chunks of staged input rows (a shared
// address). Causal (kAhead false): block i reads rows from a_rows + (kBlocks - 1 - i), i.e. the
// rows start kBlocks - 1 chunks before the output's; D[m][n] is output step 63 - n of chunk m.
// Look-ahead (the transposed filter, kAhead true): block i reads rows from a_rows + i, the rows
// starting at the output's chunk; with `table` a Hankel table (rows stored step-reversed, as the
// backward's dp rows) D[m][n] is step n, with a transposed table (hankel_table_transposed; rows
// in step order) step 63 - n. The last block's k-slices below kFirstSlice are skipped (all zero:
// hankel_last_block_first_slice); a compile-time count, since a runtime skip between the MMAs
// makes ptxas serialise them (warpgroup.arrive).
template <typename T, int kBlocks, int kFirstSlice, bool kAhead = false, bool kTransposedTable = false>
__device__ __forceinline__ void wgmma_hankel_conv(float (&d)[32], uint32_t a_rows, uint32_t table) {
  const uint64_t a0 = sm90::smem_descriptor(a_rows, 16, 1024), b0 = sm90::smem_descriptor_unswizzled(table, 128, 128);
#pragma unroll
  for (int i = 0; i < kBlocks; ++i)
#pragma unroll
    for (int ks = (i == kBlocks - 1 ? kFirstSlice : 0); ks < 4; ++ks) {
      const int row = kAhead ? i : kBlocks - 1 - i, core = kTransposedTable ? 8 * i : 8 * (kBlocks - 1 - i);
      sm90::wgmma_m64n64k16<T>(d, sm90::descriptor_plus(a0, row * 128 + 32 * ks),
                               sm90::descriptor_plus(b0, (core + 2 * ks) * 128), (i | ks) != 0);
    }
}
#endif

// The bytes of the 16-byte unit at step t (a multiple of 8) of a row of n 16-bit values that lie in
// [0, n): a cp.async's source size, the rest zero-filled.
__device__ __forceinline__ int staged_unit_bytes(int64_t t, int64_t n) {
  const int64_t valid = t < 0 ? 0 : n - t;
  return valid >= 8 ? 16 : valid > 0 ? int(2 * valid) : 0;
}

// Byte offset of the pair of steps 62 - 8j - 2q, 63 - 8j - 2q (accumulator elements 4j + 2h + 1
// and 4j + 2h of lane q = lane % 4) in swizzled row r: unit 7 - j, bytes 12 - 4q.
__device__ __forceinline__ int hankel_pair_offset(int r, int j, int q) {
  return swizzled_unit_offset(r, 7 - j) + 12 - 4 * q;
}

// Byte offset of the pair of columns 8j + 2q, 8j + 2q + 1 (accumulator elements 4j + 2h and
// 4j + 2h + 1 of lane q, in that order) in swizzled row r: a fragment stored in its own order.
__device__ __forceinline__ int fragment_pair_offset(int r, int j, int q) { return swizzled_unit_offset(r, j) + 4 * q; }

// A 64 x 64 accumulator fragment rounded to T and stored in its own order (as fragment_pair_offset)
// at rows first_row .. of a swizzled tile, by stmatrix: each 8 x 8 block (j, h) of a warp's rows
// 16 warp + 8h .. and columns 8j .. is one m8n8 matrix in the mma fragment layout, so stmatrix x
// (x < 4) takes the thread's pairs (4j + 2h, 4j + 2h + 1) for j = 2x + i / 2, h = i % 2 as its
// register i: four instructions for the 32 values, where 16 pair stores each computed an address.
// Lane l gives the address of row l % 8 of matrix l / 8, unit 2x + l / 16: the unit of x = 0 XOR 2x
// (the swizzle XORs units, and rows start on 128 bytes).
template <typename T>
__device__ __forceinline__ void fragment_to_shared_by_stmatrix(uint32_t smem_base, int first_row,
                                                               const float (&acc)[32]) {
  const int lane = int(threadIdx.x) & 31, warp = (int(threadIdx.x) >> 5) & 3;
  const int r = first_row + 16 * warp + 8 * ((lane >> 3) & 1) + (lane & 7);
  const uint32_t address = smem_base + uint32_t(swizzled_unit_offset(r, lane >> 4));
#pragma unroll
  for (int x = 0; x < 4; ++x) {
    uint32_t pairs[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int e = 4 * (2 * x + (i >> 1)) + 2 * (i & 1);
      pairs[i] = pack_pair(from_float<T>(acc[e]), from_float<T>(acc[e + 1]));
    }
    sm90::stmatrix_x4(address ^ uint32_t(32 * x), pairs);
  }
}

// z over the Hm chunks before tile chunk J0, on the CUDA cores (zero before time 0), into rows
// z_row .. z_row + Hm - 1 in step order: the forward's segment starts, every backward tile.
template <typename T, int kHalo>
__device__ __forceinline__ void b2b_wgmma_z_halo(unsigned char* smem, int z_row, const T* x1, const T* x2,
                                                 const T* wp1, const T* wp2, int64_t wp_tap_stride, int kp,
                                                 int64_t j0) {
  for (int i = int(threadIdx.x); i < 64 * kHalo; i += WgmmaToeplitzTile::kThreads) {
    const int64_t t = j0 - 64 * kHalo + i;
    float u = 0.0f, v = 0.0f;
    for (int k = 0; k < kp; ++k) {
      const int64_t src = t - (kp - 1) + k;
      if (src < 0) continue;
      u = fmaf(to_float(wp1[k * wp_tap_stride]), to_float(x1[src]), u);
      v = fmaf(to_float(wp2[k * wp_tap_stride]), to_float(x2[src]), v);
    }
    const int r = z_row + (i >> 6), s = i & 63;
    *reinterpret_cast<T*>(smem + swizzled_unit_offset(r, s >> 3) + 2 * (s & 7)) = from_float<T>(u * v);
  }
}

}  // namespace causalconv::detail
