// Fused b2b_causal_conv1d backward on Hopper's warpgroup MMA (sm_90a; fp16/bf16, Kp <= 32,
// 9 <= Km <= 256, every x, dout and dx row 16-byte aligned, or with kRealigned any rows): every
// convolution of the backward and both weight gradients as wgmma products, in the Hankel-table form
// of the forward (b2b_forward_wgmma_kernel.cuh; shared pieces in b2b_hankel_wgmma.cuh).
//
// A block owns one (b, c) row and walks the 4096-step tiles (64 chunks of 64 steps) of its
// segment of the row from the last to the first, so that what the look-ahead filters need from
// the chunks after a tile is carried from the tile walked before it: dh over the Hm chunks after
// it (Hm = mixer blocks - 1) and each dp_j over the one chunk after it. A segment that ends before
// the row does first walks the tile after it as a priming pass that only computes those carries
// (its own dz past its first Hm chunks is wrong and unused). The look-back the causal filters
// need is on hand: x from the staged rows (chunk J - 1 on), z over the Hm chunks before the tile
// on the CUDA cores (every tile) from x1 and x2 over the Hm chunks before those, staged with the tile.
//
// Per tile J (chunks J .. J + 63):
//   1. staged (cp.async, zero outside [0, L); the next tile of the walk goes into the other stage
//      after step 4): x rows 3c + j over chunks [J - 1, J + 64), dout over [J, J + 64), x1 and x2
//      over [J - 1 - Hm, J - 1) for the z halo;
//   2. u = P1 x1, v = P2 x2, gate = P0 x0 (forward products; column n of an output chunk is step
//      63 - n, as in the forward);
//   3. z = u v and dh = dout gate, rounded to T, into the z rows (after the Hm halo rows) and dh
//      rows in step order; dskip += dh z in fp32; the dh carry swapped in after the tile's rows;
//   4. dwm: lag block a (a < nb) D_a[r][c] = sum_m dh[J + m][r] z[J + m - a][c], both operands
//      MN-major (wgmma_m64n64k16_tt: time is the reduction), reduced along its diagonals (lag
//      64 a + r - c) into per-thread sums through a two-block fp32 ring in the idle stage;
//   5. h = M z (forward product) and dz = M^T dh (look-ahead product over the transposed table:
//      step 63 - n as well); dp0 = dout (h + skip z), dp1 = (dz + skip dh) v, dp2 = (dz + skip dh) u,
//      rounded to T and stored step-reversed (column n = step 63 - n: the fragment's own order) over
//      dout, z and dh; each dp_j's carried chunk into its row 64;
//   6. dx_j = P_j^T dp_j: the look-ahead product over the forward table, which with step-reversed
//      rows yields steps in order, through an output tile (x_j's rows) in 16-byte stores; dwp_j:
//      lag blocks 0 and 1 of (dp_j, x_j), whose lags below Kp lie in two bands summed by the
//      first Kp lanes of each warp (or, with kDwpBand and Kp <= 8, the lag band of mma.sync chunk
//      products while the dx MMAs run: dwp_band_mma).
// The block's sums go out as one partial per (c, b, segment) in the layout of the other backward
// kernels; b2b_weight_grad_reduce sums them in a fixed order (bitwise reproducible).
//
// Accuracy as the mma.sync form (b2b_backward_tc_kernel.cuh): z, dh and the dp rows are rounded
// once each to the 16-bit type; dskip sums fp32 values.
#pragma once

#include <type_traits>

#include "b2b/b2b_hankel_wgmma.cuh"
#include "b2b/b2b_kernels.h"
#include "common/sm90_primitives.cuh"
#include "common/toeplitz_mma.cuh"
#include "common/toeplitz_wgmma.cuh"

namespace causalconv::detail {

// Shared memory, in 128-byte rows from the 1024-byte aligned start: two stages (three x rows of
// 65 chunks, dout of 64 chunks and one carried dp0 chunk), the z rows (Hm halo + 64), the dh rows
// (64 + Hm carried), the carries (dh's Hm chunks, one per dp_j), then bytes: dwp's lag-block-1
// band, the three projection tables, the mixer's table and its transposed table, then rows again:
// the z halo's x1 and x2 chunks per stage, the z halo's taps, then (kRealigned) the raw units past
// the staged rows (16 bytes per stage and row: x0, x1, x2, dout, then x1's and x2's halo).
template <int kMixerBlocks, bool kRealigned = false>
struct B2BWgmmaBackwardLayout {
  using Tile = WgmmaToeplitzTile;
  static constexpr int kProjBlocks = 2;  // Kp <= 65
  static constexpr int kHalo = kMixerBlocks - 1;
  static constexpr int kXRows = Tile::kChunks + 1;  // x row j: chunk J - 1 + k at row k
  static constexpr int kGRows = Tile::kChunks + 1;  // dout: chunk J + k at row k (then dp0; row 64 carried)
  static constexpr int kStageRows = 3 * kXRows + kGRows;
  static constexpr int kZRow = 2 * kStageRows;                     // chunk J - Hm + k at row k (then dp1)
  static constexpr int kDhRow = kZRow + kHalo + Tile::kChunks;     // chunk J + k at row k (then dp2)
  static constexpr int kCarryRow = kDhRow + Tile::kChunks + kHalo;  // dh's Hm chunks, then dp_j's
  static constexpr int kBand1 = 128 * (kCarryRow + kHalo + 3);     // float [32][32]
  static constexpr int kProjTable = kBand1 + 32 * 32 * 4;
  static constexpr int kProjTableBytes = 128 * hankel_cores(kProjBlocks);
  static constexpr int kMixerTable = kProjTable + 3 * kProjTableBytes;
  static constexpr int kMixerTableT = kMixerTable + 128 * hankel_cores(kMixerBlocks);
  // x1 and x2 over the Hm chunks before the x rows (J - 1 - Hm .. J - 2) per stage: [slot][j - 1][k].
  static constexpr int kHaloXRow = (kMixerTableT + 128 * hankel_cores(kMixerBlocks)) / 128;
  // The z halo's taps: float2 (P1's, P2's) per tap, Kp <= 32.
  static constexpr int kHaloTaps = 128 * (kHaloXRow + 4 * kHalo);
  static constexpr int kSpill = kHaloTaps + 32 * 8;
  static constexpr int kBytes = 1024 + kSpill + (kRealigned ? 2 * 6 * 16 : 0);
  static_assert(2 * (kBytes + 1024) <= 228 * 1024, "two blocks per SM");
  // dwm's lag blocks in fp32 (lag_ring_pair_index: two at a time) go over the idle stage; dwp's
  // lag-block-0 band (float [64][32], band_index) over the dp row it came from.
  static_assert(64 * 128 * 4 <= 128 * kStageRows, "the lag ring fits a stage");
  static_assert(64 * 32 * 4 <= 128 * (Tile::kChunks + 1), "the band fits a dp row");
  static_assert(kHalo >= 1, "the z and dh rows hold a 65-row dp tile");
};

// dwm's lag blocks in fp32 go through a ring of two: row r holds block a's column c at position
// p = c + 64 (a % 2) of 128, so that lag 64 a + t, which is element (r, r - t) of block a where
// r >= t and element (r, r - t + 64) of block a + 1 where r < t, lies at p = (r - t + 64 a) % 128
// in both: one diagonal of the ring, summed without a per-element choice of block or sum. Stored
// skewed: p at (p - 2 floor(r / 2)) % 128, XOR 16 on rows 2, 3 (mod 4), so that the diagonal's
// element in row r sits at a position that depends on t, a % 2 and r % 4 alone
// (lag_ring_diagonal): the diagonal reads take immediate row offsets (one row, consecutive
// positions across the threads: no bank conflicts), and the accumulator pair stores stay 8-byte
// aligned with 2-way conflicts. (With one block per buffer, each diagonal split in two sums by a
// compare per element, the skewed form lost at 4 and 5 mixer blocks to an XOR swizzle; as a ring
// it wins there by 7 % fwd+bwd at Km256 on the H100, session 51.)
// Pair (r, p / 2), p even: in pairs, so that the pair stores are seen to be 8-byte aligned (as
// element indices, half of them compiled to two 4-byte stores).
__device__ __forceinline__ int lag_ring_pair_index(int r, int pair) {
  return 64 * r + (((pair - (r >> 1)) & 63) ^ (8 * ((r >> 1) & 1)));
}
// Where row r's element of diagonal (r - t + 64 a) % 128 sits in its row, r_mod4 = r % 4.
__device__ __forceinline__ int lag_ring_diagonal(int t, int a_mod2, int r_mod4) {
  return (((r_mod4 & 1) - t + 64 * a_mod2) & 127) ^ (16 * (r_mod4 >> 1));
}

// Element (r, s) of a dwp band of 32-lag rows: lags XOR-swizzled by the row, so that the scattered
// stores (one lag, many rows) and the reads (one row, consecutive lags) avoid bank conflicts.
__device__ __forceinline__ int band_index(int r, int s) { return 32 * r + (s ^ (r & 31)); }

// dwp for Kp <= 8 (kDwpBand) instead of two 64 x 64 lag-block MMAs per row: lags 0 .. 7 of
// sum_t dp_j[t] x_j[t - s] over the tile, as the band of the chunk products
// D[r'][c] = sum_m dp_j[64 m + 63 - r'] x_j[64 m + c] (dp row m holds step 63 - col at col): m16n8k16 with
// M = r', N = c, K = the chunk m, both operands read transposed (ldmatrix .trans: time is the
// reduction). Warp w takes r' in [16w, 16w + 16) and c in [40 - 16w, 64 - 16w) (three n8 groups u;
// c < 0 is the chunk before: x row m instead of m + 1), which holds every (r', c) of lag
// 63 - r' - c in [0, 8). Lane (g, q)'s element (row half h, group u, column e) has lag
// 23 - 8(h + u) - d, d = g + 2q + e in [0, 14]: one of h + u = 1, 2 gives lag 7 - d % 8 (2 when
// d < 8), the others lie outside [0, 8). So each lane keeps one sum per e and lag 7 - d % 8.
// ~34 warp instructions a row and tile (10 ldmatrix, 12 MMAs, the fold) where FMAs on the CUDA cores
// took ~200 per thread for 4 lags (the form before; fwd+bwd 4-5 % slower at Km128 on the H100, session 50).
constexpr int kDwpBandLags = 8;

// terms[e]: this lane's lag-(7 - (g + 2q + e) % 8) terms of rows dp_row (the dp_j tile, step-reversed)
// and x_row (x_j from the chunk before the tile), every warp of the warpgroup on its r' range.
template <typename T>
__device__ __forceinline__ void dwp_band_mma(float (&terms)[2], uint32_t smem_base, int dp_row, int x_row, int warp,
                                             int lane) {
  constexpr bool kHalf = std::is_same<T, __half>::value;
  const int mat = lane >> 3, rr = lane & 7;
  // A (16 r' x 16 chunks) per k-step: matrix mat = r' half mat % 2, chunk half mat / 2.
  const int a_row = dp_row + 8 * (mat >> 1) + rr;
  const uint32_t a_addr = smem_base + swizzled_unit_offset(a_row, 2 * warp + (mat & 1));
  // B (16 chunks x 8 c) of groups 0 and 1 per k-step (matrix mat: group mat / 2, chunk half mat % 2),
  // group 2 per two k-steps (matrix mat: k-step mat / 2, chunk half mat % 2).
  auto b_addr = [&](int group, int chunk) {  // x_j chunk J + chunk - (c < 0) is x row chunk + 1 - (c < 0)
    const int unit = 5 - 2 * warp + group, row = x_row + chunk + 1 - (unit < 0 ? 1 : 0);
    return smem_base + swizzled_unit_offset(row, unit & 7);
  };
  const uint32_t b01_addr = b_addr(mat >> 1, 8 * (mat & 1) + rr), b2_addr = b_addr(2, 8 * mat + rr);
  float acc[3][4] = {};
  uint32_t b2[4];
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {  // chunks 16 ks .. + 15 (16 rows: the swizzle's phase is unchanged)
    uint32_t a[4], b01[4];
    sm90::ldmatrix_x4_trans(a, a_addr + 2048 * ks);
    sm90::ldmatrix_x4_trans(b01, b01_addr + 2048 * ks);
    if (ks % 2 == 0) sm90::ldmatrix_x4_trans(b2, b2_addr + 2048 * ks);
    mma_m16n8k16<kHalf>(acc[0], a, b01[0], b01[1]);
    mma_m16n8k16<kHalf>(acc[1], a, b01[2], b01[3]);
    mma_m16n8k16<kHalf>(acc[2], a, b2[2 * (ks % 2)], b2[2 * (ks % 2) + 1]);
  }
  const int d0 = (lane >> 2) + 2 * (lane & 3);
#pragma unroll
  for (int e = 0; e < 2; ++e)  // h + u = 2 where d < 8, else 1
    terms[e] = d0 + e < 8 ? acc[1][2 + e] + acc[2][e] : acc[0][2 + e] + acc[1][e];
}

// kRealigned: rows off the 16-byte grid (odd L), each at its own lead, staged as raw 16-byte units
// of its grid and realigned in shared memory as the forward's (common/toeplitz_wgmma.cuh); the dx
// rows stored from their own grids.
template <typename T, int kMixerBlocks, bool kDwpBand, bool kRealigned = false>
__global__ void __launch_bounds__(WgmmaToeplitzTile::kThreads, 2)
    b2b_backward_wgmma_kernel(B2BBackwardParams p, int64_t tiles, int64_t tiles_per_segment, float* partials) {
#ifdef CAUSALCONV_SM90A
  using Tile = WgmmaToeplitzTile;
  using Layout = B2BWgmmaBackwardLayout<kMixerBlocks, kRealigned>;
  constexpr int kHalo = Layout::kHalo, kZRow = Layout::kZRow, kDhRow = Layout::kDhRow;
  constexpr int kCarryRow = Layout::kCarryRow;
  unsigned char* const smem = sm90::aligned_dynamic_shared();
  const uint32_t smem_base = sm90::smem_u32(smem);
  const int kp = int(p.proj_width), km = int(p.mixer_width);
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;

  const int64_t b = div_nonneg(int64_t(blockIdx.x), p.dim);
  const int64_t c = int64_t(blockIdx.x) - b * p.dim;
  const int64_t n = p.length;
  const T* const x0 = static_cast<const T*>(p.x) + b * p.x_stride[0] + 3 * c * p.x_stride[1];
  const T* const dout = static_cast<const T*>(p.dout) + b * p.dout_stride[0] + c * p.dout_stride[1];
  T* const dx0 = static_cast<T*>(p.dx) + b * p.dx_stride[0] + 3 * c * p.dx_stride[1];
  const T* const wp0 = static_cast<const T*>(p.weight_proj) + 3 * c * p.wp_stride[0];
  const int64_t first = int64_t(blockIdx.y) * tiles_per_segment;
  const int64_t last = first + tiles_per_segment < tiles ? first + tiles_per_segment : tiles;
  const int64_t top = last < tiles ? last : last - 1;  // the priming tile, if the row goes on

  auto x_row = [&](int slot, int j) { return slot * Layout::kStageRows + j * Layout::kXRows; };
  auto g_row = [&](int slot) { return slot * Layout::kStageRows + 3 * Layout::kXRows; };
  auto dp_row = [&](int slot, int j) { return j == 0 ? g_row(slot) : j == 1 ? kZRow : kDhRow; };
  // x_j (j = 1, 2) over chunk J - 1 - Hm + k at row halo_x_row(slot, j) + k, k < Hm.
  auto halo_x_row = [&](int slot, int j) { return Layout::kHaloXRow + (2 * slot + j - 1) * kHalo; };
  // cp.async of a tile's rows: unit u of x row j (steps 64 (J - 1) + 8u .. + 7) to unit u % 8 of
  // row x_row + u / 8, dout's unit u (steps 64 J + 8u ..) likewise; zero outside [0, n).
  const int64_t x_stride = p.x_stride[1];
  // kRealigned: the values before a row's first, back to the 16-byte boundary (x rows 0-2, then dout),
  // computed from the pointers where they are used.
  auto lead_of = [](const T* row) { return kRealigned ? int(row_shift16(row)) : 0; };
  auto row_lead = [&](int j) { return lead_of(j < 3 ? x0 + j * x_stride : dout); };
  // Raw unit 8 * kXRows of x row j (j = 3: dout; 4, 5: x1's, x2's halo) of stage `slot`.
  auto spill = [&](int slot, int j) { return smem + Layout::kSpill + 16 * (6 * slot + j); };
  auto stage = [&](int slot, int64_t tile) {
    constexpr int kUnits = 8 * Layout::kXRows, kThreads = Tile::kThreads;
    const int64_t x_first = (tile * Tile::kChunks - 1) * Tile::kChunk, g_first = tile * Tile::kOutputs;
    if constexpr (kRealigned) {
      // Raw units 0 .. kUnits of each row's grid (the last to its spill); dout as the x rows (its row
      // 64, the dp0 carry's, is written in step 5, after every read of the staged rows), then the halo's.
      auto interior = [&](int64_t first_step) { return first_step >= 8 && first_step + 8 * (kUnits + 1) <= n; };
      const bool x_interior = interior(x_first), g_interior = interior(g_first);
#pragma unroll 1
      for (int u = tid; u <= kUnits; u += kThreads) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int first_row = j < 3 ? x_row(slot, j) : g_row(slot);
          unsigned char* const dst =
              u < kUnits ? smem + swizzled_unit_offset(first_row + (u >> 3), u & 7) : spill(slot, j);
          const T* const row = j < 3 ? x0 + j * x_stride : dout;
          cp_async_raw_unit(dst, row - row_lead(j), (j < 3 ? x_first : g_first) + 8 * u, row_lead(j), n,
                            j < 3 ? x_interior : g_interior);
        }
      }
      constexpr int kHaloUnits = 8 * Layout::kHalo + 1;  // per row, the last to its spill
      static_assert(2 * kHaloUnits <= kThreads, "");
      if (tid < 2 * kHaloUnits) {
        const int j = 1 + tid / kHaloUnits, u = tid % kHaloUnits;
        unsigned char* const dst = u < kHaloUnits - 1
                                       ? smem + swizzled_unit_offset(halo_x_row(slot, j) + (u >> 3), u & 7)
                                       : spill(slot, 3 + j);
        cp_async_raw_unit(dst, x0 + j * x_stride - row_lead(j), x_first - 64 * kHalo + 8 * u, row_lead(j), n, false);
      }
      return;
    }
    // to_end: the tile's x steps pass n. Otherwise every unit is whole but the first tile's first
    // chunk (steps -64 .. -1: each thread's first unit), and dout's, inside x's, are all whole.
    auto copy_units = [&](auto to_end) {
#pragma unroll
      for (int k = 0; k < (kUnits + kThreads - 1) / kThreads; ++k) {
        const int u = tid + k * kThreads;
        if (u >= kUnits) break;
        const int64_t t = x_first + 8 * u;
        const int bytes = to_end ? staged_unit_bytes(t, n) : k > 0 || t >= 0 ? 16 : 0;
        const T* src = x0 + (bytes > 0 ? t : 0);
#pragma unroll
        for (int j = 0; j < 3; ++j)
          cp_async16(smem + swizzled_unit_offset(x_row(slot, j) + (u >> 3), u & 7), src + j * x_stride, bytes);
        if (u < 8 * Tile::kChunks) {
          const int64_t tg = g_first + 8 * u;
          const int gbytes = to_end ? staged_unit_bytes(tg, n) : 16;
          cp_async16(smem + swizzled_unit_offset(g_row(slot) + (u >> 3), u & 7), dout + (gbytes > 0 ? tg : 0), gbytes);
        }
      }
    };
    if (x_first + 8 * kUnits > n)
      copy_units(std::true_type{});
    else
      copy_units(std::false_type{});
    constexpr int kHaloUnits = 8 * kHalo;  // per row; one unit per thread
    static_assert(2 * kHaloUnits <= kThreads, "");
    if (tid < 2 * kHaloUnits) {
      const int j = 1 + tid / kHaloUnits, u = tid % kHaloUnits;
      const int64_t t = x_first - 64 * kHalo + 8 * u;
      const int bytes = staged_unit_bytes(t, n);
      cp_async16(smem + swizzled_unit_offset(halo_x_row(slot, j) + (u >> 3), u & 7),
                 x0 + j * x_stride + (bytes > 0 ? t : 0), bytes);
    }
  };

  B2BLagFilters<Layout::kProjBlocks, kMixerBlocks, T> filters;
  filters.load(p, c);  // before the copies (B2BLagFilters)
  // The skip weight and the halo's taps with them: loaded after the stage, their latency was the
  // prologue's last wait (the forward's profile, session 42).
  const T skip_weight = static_cast<const T*>(p.skip_bias)[c * p.skip_stride];
  T halo_tap1 = from_float<T>(0.0f), halo_tap2 = from_float<T>(0.0f);
  if (tid < kp) {
    halo_tap1 = wp0[p.wp_stride[0] + tid * p.wp_stride[1]];
    halo_tap2 = wp0[2 * p.wp_stride[0] + tid * p.wp_stride[1]];
  }
  stage(0, top);
  cp_async_commit();
  {  // The Hankel tables, through lag-ordered copies of the filters in the (free) z rows; zero carries.
    constexpr int kProjLags = hankel_lag_entries<Layout::kProjBlocks>();
    T* const lags = reinterpret_cast<T*>(smem + 128 * kZRow);  // 3 projections, then the mixer
    filters.store(lags);
    for (int i = tid; i < 8 * (kHalo + 3); i += Tile::kThreads)
      *reinterpret_cast<uint4*>(smem + 128 * kCarryRow + 16 * i) = make_uint4(0, 0, 0, 0);
    if (tid < kp)
      reinterpret_cast<float2*>(smem + Layout::kHaloTaps)[tid] = make_float2(to_float(halo_tap1), to_float(halo_tap2));
    __syncthreads();
    static_assert(Layout::kMixerTable == Layout::kProjTable + 3 * Layout::kProjTableBytes &&
                      Layout::kMixerTableT == Layout::kMixerTable + 128 * hankel_cores(kMixerBlocks),
                  "the tables are consecutive (b2b_hankel_tables)");
    b2b_hankel_tables<Layout::kProjBlocks, kMixerBlocks, true>(smem + Layout::kProjTable, lags, kp, km);
    static_assert(2 * (3 * kProjLags + hankel_lag_entries<kMixerBlocks>()) <= 128 * (kHalo + Tile::kChunks),
                  "lags fit");
  }  // (the loop's first barrier orders these reads before the z rows' first writes)
  const float skip = to_float(skip_weight);
  const uint32_t proj_table = smem_base + Layout::kProjTable, mixer_table = smem_base + Layout::kMixerTable;
  const uint32_t mixer_table_t = smem_base + Layout::kMixerTableT;

  // dwm over the walk, thread (t, half) = (tid % 64, tid / 64): lag 64 a + t over the rows of its half.
  float mix_sum[kMixerBlocks];
#pragma unroll
  for (int a = 0; a < kMixerBlocks; ++a) mix_sum[a] = 0.0f;
  float proj_sum[3] = {0.0f, 0.0f, 0.0f};  // lane s < Kp of warp w: dwp row j's lag s over w's band rows
  float band_sum[2][3] = {};                // kDwpBand: dwp row j's lag 7 - (g + 2q + e) % 8 (dwp_band_mma)
  float dskip = 0.0f;

  int slot = 0;
#pragma unroll 1
  for (int64_t tile = top; tile >= first; --tile, slot ^= 1) {
    const bool own = tile < last;  // else the priming pass: carries only
    const int64_t j0 = tile * Tile::kOutputs;
    cp_async_wait<0>();                // this thread's copies of the tile are done
    sm90::fence_proxy_async_shared();  // ... and visible to wgmma, as are the tables and carries
    __syncthreads();                   // every thread's
    if constexpr (kRealigned) {  // the raw units of this stage's rows into their chunks
      wgmma_realign_rows<4, Layout::kXRows>(
          smem, [&](int j) { return j < 3 ? x_row(slot, j) : g_row(slot); }, [&](int j) { return 2 * row_lead(j); },
          [&](int j) { return spill(slot, j); });
      wgmma_realign_rows<2, kHalo>(
          smem, [&](int j) { return halo_x_row(slot, 1 + j); }, [&](int j) { return 2 * row_lead(1 + j); },
          [&](int j) { return spill(slot, 4 + j); });
      sm90::fence_proxy_async_shared();
      __syncthreads();
    }

    // 2. The three projections (the z halo on the CUDA cores meanwhile).
    float u[32], v[32], gate[32];
    auto projections = [&](auto first_slice) {
      constexpr int kFirst = decltype(first_slice)::value;
      sm90::wgmma_fence();
      wgmma_hankel_conv<T, 2, kFirst>(u, smem_base + 128 * x_row(slot, 1), proj_table + Layout::kProjTableBytes);
      wgmma_hankel_conv<T, 2, kFirst>(v, smem_base + 128 * x_row(slot, 2), proj_table + 2 * Layout::kProjTableBytes);
      wgmma_hankel_conv<T, 2, kFirst>(gate, smem_base + 128 * x_row(slot, 0), proj_table);
      sm90::wgmma_commit();
    };
    if (kp <= 17)
      projections(std::integral_constant<int, 3>{});
    else
      projections(std::integral_constant<int, 2>{});
    // z over chunks J - Hm .. J - 1 in step order into the halo rows, from the staged x1, x2 (step
    // s of chunk J - 1 - Hm + k: the halo rows, then x row 0 for k = Hm; zero before time 0).
    for (int i = tid; i < 64 * kHalo; i += Tile::kThreads) {
      auto staged = [&](int j, int s) {
        const int k = s >> 6, e = s & 63;
        const int row = k < kHalo ? halo_x_row(slot, j) + k : x_row(slot, j);
        return to_float(*reinterpret_cast<const T*>(smem + swizzled_unit_offset(row, e >> 3) + 2 * (e & 7)));
      };
      const float2* const taps = reinterpret_cast<const float2*>(smem + Layout::kHaloTaps);
      float zu = 0.0f, zv = 0.0f;
      for (int k = 0; k < kp; ++k) {  // output step 64 + i of the staged frame; its taps from step 33 on
        const int s = 64 + i - (kp - 1) + k;
        const float2 w = taps[k];
        zu = fmaf(w.x, staged(1, s), zu);
        zv = fmaf(w.y, staged(2, s), zv);
      }
      const int r = kZRow + (i >> 6), e = i & 63;
      *reinterpret_cast<T*>(smem + swizzled_unit_offset(r, e >> 3) + 2 * (e & 7)) = from_float<T>(zu * zv);
    }
    sm90::wgmma_wait<0>();
    sm90::fence_registers(u);
    sm90::fence_registers(v);
    sm90::fence_registers(gate);

    // 3. z and dh in step order; dout and dh kept as pairs (hankel_pair_offset's: elements e + 1, e).
    uint32_t g_pairs[16], dh_pairs[16];
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int e = 4 * j + 2 * h, m = 16 * warp + g + 8 * h;
        const uint32_t gp = *reinterpret_cast<const uint32_t*>(smem + hankel_pair_offset(g_row(slot) + m, j, q));
        const float g_lo = pair_half_to_float<T>(gp, false), g_hi = pair_half_to_float<T>(gp, true);
        const float z_lo = u[e + 1] * v[e + 1], z_hi = u[e] * v[e];
        const float dh_lo = g_lo * gate[e + 1], dh_hi = g_hi * gate[e];
        *reinterpret_cast<uint32_t*>(smem + hankel_pair_offset(kZRow + kHalo + m, j, q)) =
            pack_pair(from_float<T>(z_lo), from_float<T>(z_hi));
        const uint32_t dhp = pack_pair(from_float<T>(dh_lo), from_float<T>(dh_hi));
        *reinterpret_cast<uint32_t*>(smem + hankel_pair_offset(kDhRow + m, j, q)) = dhp;
        g_pairs[2 * j + h] = gp;
        dh_pairs[2 * j + h] = dhp;
        if (own) dskip = fmaf(dh_hi, z_hi, fmaf(dh_lo, z_lo, dskip));
      }
    sm90::fence_proxy_async_shared();
    __syncthreads();  // z and dh complete
    // The dh carry: rows 64 .. 64 + Hm - 1 take the chunks after the tile, the carry this tile's first Hm.
    for (int i = tid; i < 8 * kHalo; i += Tile::kThreads) {
      const int k = i >> 3, unit = i & 7;
      unsigned char* const carry = smem + swizzled_unit_offset(kCarryRow + k, unit);
      unsigned char* const own_row = smem + swizzled_unit_offset(kDhRow + k, unit);
      const uint4 after = *reinterpret_cast<const uint4*>(carry);
      *reinterpret_cast<uint4*>(carry) = *reinterpret_cast<const uint4*>(own_row);
      *reinterpret_cast<uint4*>(smem + swizzled_unit_offset(kDhRow + Tile::kChunks + k, unit)) = after;
    }
    sm90::fence_proxy_async_shared();
    // Step 5's MMAs read the rows after the tile once swapped: step 4's barriers order that, and the
    // priming pass, which has no step 4, needs one of its own.
    if (!own) __syncthreads();

    // 4. dwm's lag blocks, through the idle stage as a ring of two (lag_ring_pair_index): lag 64 a + t is
    //    summed once blocks a and a + 1 are in it.
    if (own) {
      float* const ring = reinterpret_cast<float*>(smem + 128 * (slot ^ 1) * Layout::kStageRows);
      // Thread (t, half) = (tid % 64, tid / 64) adds element (r, (r - t + 64 a) % 128) of each ring row r
      // of its half: lag 64 a + t (row r's from block a where r >= t, from block a + 1 where r < t).
      const int t = tid & 63, r0 = 32 * (tid >> 6);
      auto add_lag_diagonal = [&](int a) {  // (a is a constant once the loop below unrolls)
        const float* const rows = ring + 128 * r0;
        int column[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) column[k] = lag_ring_diagonal(t, a & 1, k);  // r0 % 4 == 0
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < 32; ++i) sum += rows[128 * i + column[i & 3]];
        mix_sum[a] += sum;
      };
#pragma unroll
      for (int a = 0; a < kMixerBlocks; ++a) {
        float acc[32];
        sm90::wgmma_fence();
        const uint64_t dh_rows = sm90::smem_descriptor(smem_base + 128 * kDhRow, 8192, 1024);
        const uint64_t z_rows = sm90::smem_descriptor(smem_base + 128 * (kZRow + kHalo - a), 8192, 1024);
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
          sm90::wgmma_m64n64k16_tt<T>(acc, sm90::descriptor_plus(dh_rows, 2048 * ks),
                                      sm90::descriptor_plus(z_rows, 2048 * ks), ks != 0);
        sm90::wgmma_commit();
        if (a >= 2) __syncthreads();  // block a goes over block a - 2, which the lag a - 2 reads took
        sm90::wgmma_wait<0>();
        sm90::fence_registers(acc);
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = 16 * warp + g + 8 * h;
            reinterpret_cast<float2*>(ring)[lag_ring_pair_index(r, 32 * (a & 1) + 4 * j + q)] =
                make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
          }
        __syncthreads();
        if (a >= 1) add_lag_diagonal(a - 1);
      }
      // Lag 64 (kMixerBlocks - 1) (t = 0: block kMixerBlocks - 1's diagonal alone), where Km reaches it;
      // the other threads' sums there hold lags past Km, never read.
      if (km > 64 * (kMixerBlocks - 1)) add_lag_diagonal(kMixerBlocks - 1);
      __syncthreads();  // the idle stage is read: the next tile's rows may go there
    }
    if (tile > first) stage(slot ^ 1, tile - 1);
    cp_async_commit();

    // 5. h and dz, then the dp rows step-reversed over dout, z and dh.
    float h_acc[32], dz_acc[32];
    sm90::wgmma_fence();
    wgmma_hankel_conv<T, kMixerBlocks, 0>(h_acc, smem_base + 128 * kZRow, mixer_table);
    wgmma_hankel_conv<T, kMixerBlocks, 0, true, true>(dz_acc, smem_base + 128 * kDhRow, mixer_table_t);
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
    sm90::fence_registers(h_acc);
    sm90::fence_registers(dz_acc);
    __syncthreads();  // every warp's reads of z and dh are done
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = 16 * warp + g + 8 * h;
        float dp[3][2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {  // element 4j + 2h + e; its pairs' half 1 - e
          const int i = 4 * j + 2 * h + e;
          const uint32_t gp = g_pairs[2 * j + h], dhp = dh_pairs[2 * j + h];
          const float gv = pair_half_to_float<T>(gp, e == 0);
          const float dhv = pair_half_to_float<T>(dhp, e == 0);
          const float zr = to_float(from_float<T>(u[i] * v[i]));
          const float dzv = fmaf(skip, dhv, dz_acc[i]);
          dp[0][e] = gv * fmaf(skip, zr, h_acc[i]);
          dp[1][e] = dzv * v[i];
          dp[2][e] = dzv * u[i];
        }
#pragma unroll
        for (int k = 0; k < 3; ++k)
          *reinterpret_cast<uint32_t*>(smem + fragment_pair_offset(dp_row(slot, k) + m, j, q)) =
              pack_pair(from_float<T>(dp[k][0]), from_float<T>(dp[k][1]));
      }
    sm90::fence_proxy_async_shared();
    __syncthreads();  // the dp rows complete
    // Each dp_j's carry: row 64 takes the chunk after the tile, the carry this tile's first.
    if (tid < 24) {
      const int k = tid >> 3, unit = tid & 7;
      unsigned char* const carry = smem + swizzled_unit_offset(kCarryRow + kHalo + k, unit);
      const uint4 after = *reinterpret_cast<const uint4*>(carry);
      *reinterpret_cast<uint4*>(carry) =
          *reinterpret_cast<const uint4*>(smem + swizzled_unit_offset(dp_row(slot, k), unit));
      *reinterpret_cast<uint4*>(smem + swizzled_unit_offset(dp_row(slot, k) + Tile::kChunks, unit)) = after;
    }
    sm90::fence_proxy_async_shared();
    __syncthreads();
    if (!own) continue;

    // 6. dx_j and dwp_j: two lag-block MMAs with the dx MMAs and their bands afterwards, or (kDwpBand)
    //    the band's mma.sync products while the dx MMAs run.
#pragma unroll 1
    for (int j = 0; j < 3; ++j) {
      const uint32_t dp_rows = smem_base + 128 * dp_row(slot, j), x_rows = smem_base + 128 * x_row(slot, j);
      float acc[3][32];  // dx_j, then dwp_j's lag blocks 0 and 1
      auto products = [&](auto first_slice) {
        sm90::wgmma_fence();
        wgmma_hankel_conv<T, 2, decltype(first_slice)::value, true>(acc[0], dp_rows,
                                                                    proj_table + j * Layout::kProjTableBytes);
        if constexpr (!kDwpBand) {
          const uint64_t dp_desc = sm90::smem_descriptor(dp_rows, 8192, 1024);
          const uint64_t x_desc = sm90::smem_descriptor(x_rows, 8192, 1024);
#pragma unroll
          for (int ks = 0; ks < 4; ++ks) {  // lag block a: x_j chunk J + m - a at x row m + 1 - a
            const uint64_t da = sm90::descriptor_plus(dp_desc, 2048 * ks);
            sm90::wgmma_m64n64k16_tt<T>(acc[1], da, sm90::descriptor_plus(x_desc, 128 + 2048 * ks), ks != 0);
            sm90::wgmma_m64n64k16_tt<T>(acc[2], da, sm90::descriptor_plus(x_desc, 2048 * ks), ks != 0);
          }
        }
        sm90::wgmma_commit();
      };
      if (kp <= 17)
        products(std::integral_constant<int, 3>{});
      else
        products(std::integral_constant<int, 2>{});
      // (a runtime row index into the sums would put them in local memory)
      auto add_to_row = [&](float (&sums)[3], float v) {
        if (j == 0)
          sums[0] += v;
        else if (j == 1)
          sums[1] += v;
        else
          sums[2] += v;
      };
      if constexpr (kDwpBand) {
        float terms[2];
        dwp_band_mma<T>(terms, smem_base, dp_row(slot, j), x_row(slot, j), warp, lane);
        add_to_row(band_sum[0], terms[0]);
        add_to_row(band_sum[1], terms[1]);
      }
      sm90::wgmma_wait<0>();
#pragma unroll
      for (int k = 0; k < (kDwpBand ? 1 : 3); ++k) sm90::fence_registers(acc[k]);
      __syncthreads();  // every warp's MMAs and reads of row j are done: x_j's and dp_j's rows are free
      const int out_row = x_row(slot, j);
      float* const band0 = reinterpret_cast<float*>(smem + 128 * dp_row(slot, j));  // [row r'][lag]
      float* const band1 = reinterpret_cast<float*>(smem + Layout::kBand1);         // [row r' - 32][lag]
      fragment_to_shared_by_stmatrix<T>(smem_base, out_row, acc[0]);
      if constexpr (!kDwpBand) {
#pragma unroll
        for (int jj = 0; jj < 8; ++jj)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            // dp_j row r' = r holds step 63 - r: element (r, col) has lag 64 a + 63 - r - col.
            const int e = 4 * jj + 2 * h, r = 16 * warp + g + 8 * h;
#pragma unroll
            for (int k = 0; k < 2; ++k) {
              const int col = 8 * jj + 2 * q + k, s0 = 63 - r - col, s1 = 127 - r - col;
              if (s0 >= 0 && s0 < kp) band0[band_index(r, s0)] = acc[1][e + k];
              if (s1 < kp) band1[band_index(r - 32, s1)] = acc[2][e + k];
            }
          }
      }
      __syncthreads();
      if constexpr (kRealigned) {
        T* const dx = dx0 + j * p.dx_stride[1];
        wgmma_toeplitz_store_tile_realigned(dx, smem, out_row, j0, n, lead_of(dx));
      } else {
        wgmma_toeplitz_store_tile(dx0 + j * p.dx_stride[1], smem, out_row, j0, n);
      }
      if (!kDwpBand && lane < kp) {  // lag s = lane over the warp's rows: band 0 rows 16w .., band 1 rows 32 + 8w ..
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          const int r = 16 * warp + i;
          const float v = band0[band_index(r, lane)];
          sum += r <= 63 - lane ? v : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int r = 32 + 8 * warp + i;
          const float v = band1[band_index(r - 32, lane)];
          sum += r >= 64 - lane ? v : 0.0f;
        }
        add_to_row(proj_sum, sum);
      }
    }
  }

  // The block's partial: dwp rows, dwm, dskip (b2b_backward_slots' order).
  dskip = warp_sum(dskip);
  __syncthreads();  // the tile buffers are free
  // [kMixerBlocks][2 halves][64] lag sums (lag 64 a + t), [4] dskip per warp, then dwp's lag sums:
  // [3][4 warps][32 lags] (over the z rows)
  float* const sums = reinterpret_cast<float*>(smem + 128 * kZRow);
  static_assert(4 * (128 * kMixerBlocks + 4 + 3 * 128) <= 128 * (kHalo + Tile::kChunks), "sums fit the z rows");
  float* const proj_sums = sums + 128 * kMixerBlocks + 4;
#pragma unroll
  for (int a = 0; a < kMixerBlocks; ++a) sums[128 * a + tid] = mix_sum[a];  // tid = 64 half + t
  if (lane == 0) sums[128 * kMixerBlocks + warp] = dskip;
  if constexpr (kDwpBand) {  // each warp's sums per lag (a fixed shuffle tree: reproducible), as the MMA path's
    const int d0 = g + 2 * q;
#pragma unroll
    for (int j = 0; j < 3; ++j)
#pragma unroll
      for (int s = 0; s < kDwpBandLags; ++s) {
        float v = 0.0f;
#pragma unroll
        for (int e = 0; e < 2; ++e) v += 7 - ((d0 + e) & 7) == s ? band_sum[e][j] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) proj_sums[128 * j + 32 * warp + s] = v;
      }
  } else {
#pragma unroll
    for (int j = 0; j < 3; ++j) proj_sums[128 * j + tid] = proj_sum[j];
  }
  __syncthreads();
  if (!partials) return;
  const int slots = 3 * kp + km + 1;
  float* const part = partials + ((c * p.batch + b) * int64_t(gridDim.y) + blockIdx.y) * slots;
  if (tid < 3 * kp) {  // dwp row j's tap k: lag kp - 1 - k, the warps in order
    const int j = tid / kp, s = kp - 1 - (tid - j * kp);
    float sum = 0.0f;
    for (int w = 0; w < Tile::kThreads / 32; ++w) sum += proj_sums[128 * j + 32 * w + s];
    part[tid] = sum;
  }
  for (int k = tid; k < km; k += Tile::kThreads) {
    const int s = km - 1 - k;  // lag s = 64 a + t: sums[128 a + t] and sums[128 a + 64 + t]
    const float* const lag = sums + 128 * (s >> 6) + (s & 63);
    part[3 * kp + k] = lag[0] + lag[64];
  }
  if (tid == 0) {
    float sum = 0.0f;
    for (int w = 0; w < Tile::kThreads / 32; ++w) sum += sums[128 * kMixerBlocks + w];
    part[slots - 1] = sum;
  }
#endif
}

}  // namespace causalconv::detail
