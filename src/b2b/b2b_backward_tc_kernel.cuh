// Fused b2b_causal_conv1d backward on the tensor cores (fp16/bf16, Km >= kB2BTcMinMixerWidth,
// Kp <= 32): every convolution of the backward, and the weight gradients, in the blocked
// Toeplitz form of common/toeplitz_mma.cuh. Written for wide mixers, where the CUDA-core
// kernels spend O(Km) FMAs per step on h, dz and dwm.
//
// A block owns channel c of batch b and walks 2048-step tiles (128 chunks of 16) strided
// by gridDim.y, as the tensor-core forward does. H = mixer blocks - 1, Hp = projection
// blocks - 1 (1 or 2), DP = 144 chunks (the tile and the projection's look-ahead, in whole
// pairs of m16n8 tiles), ZD = DP + 2H rounded up to a pair. Per tile starting at chunk J0:
//   0. staging (raw 16-bit, swizzled; zero outside [0, L)): the three x rows from chunk
//      J0 - H - Hp (ZD + Hp chunks), dout from J0 - H (ZD chunks);
//   1. over ZD chunks from J0 - H: z = (Tp1 x1)(Tp2 x2) and dh = dout (Tp0 x0) in fp32,
//      each rounded to the storage type into its tile (the MMA operand); dskip += dh z
//      over the tile's own chunks from the fp32 values (per thread: both in one lane);
//   2. over DP chunks from J0: h = Tm z + skip z, dz = Um dh + skip dh (Um: the transposed
//      blocks, look-ahead), x1 and v again (two small MMAs rather than two fp32 rows of
//      shared memory), then dp0 = dout h, dp1 = dz v, dp2 = dz x1 rounded into three tiles;
//   3. dx_j = Up_j dp_j over the tile (look-ahead), stored from the accumulators; the
//      weight gradients as lag-block x time products (toeplitz_lag_block_mma): dwm from
//      (dh, z), dwp_j from (dp_j, x_j), summed over the tile in registers, then stored over
//      the staging buffers (dead by then) and reduced to taps in a fixed order
//      (toeplitz_lag_sum) into the block's running sums.
// The block writes its sums as one partial per (c, b, blockIdx.y) in the layout of the
// CUDA-core kernels; b2b_weight_grad_reduce sums them in a fixed order (bitwise
// reproducible, no atomics). Inputs past L are staged as zero, so dout, dh and every dp
// are zero there and no sum needs a mask; x before 0 is zero, so z is too.
//
// Accuracy. z, dh and the dp rows are rounded once each to the 16-bit type (relative
// error <= 2^-9 bf16 / 2^-11 fp16, random in sign); each dx element sees at most three
// such roundings on any path (z or dh, dp, the output), each dwm or dwp term two (dskip
// sums the fp32 values: a single channel's sum cancels too much for rounded operands).
// fp16 dh and dp overflow where they exceed 65504, as fp16 z does in the forward.
#pragma once

#include <type_traits>

#include "b2b/b2b_kernels.h"
#include "b2b/b2b_tiling.cuh"
#include "common/toeplitz_mma.cuh"

namespace causalconv::detail {

// Shared memory of the kernel for kMaxBlocks mixer blocks, in bytes from the start.
template <int kMaxBlocks>
struct B2BTcBackwardLayout {
  static constexpr int kP = kB2BTcMaxProjBlocks;                                     // projection blocks, max
  static constexpr int kDpChunks = (ToeplitzTile::kChunks + kP - 1 + 15) / 16 * 16;  // 144
  static constexpr int kZdChunks = (kDpChunks + 2 * (kMaxBlocks - 1) + 15) / 16 * 16;  // z, dh, dout, max
  static constexpr int kXChunks = kZdChunks + kP - 1;                                // each x tile, max
  static constexpr int kXUnits = 2 * kXChunks, kGUnits = 2 * kZdChunks;
  static constexpr int kX0 = 0;                       // [3] x rows 3c, 3c+1, 3c+2
  static constexpr int kG = kX0 + 3 * 32 * kXChunks;  // dout
  static constexpr int kZ = kG + 32 * kZdChunks;
  static constexpr int kDh = kZ + 32 * kZdChunks;
  static constexpr int kDp = kDh + 32 * kZdChunks;    // [3] rows of kDpChunks
  static constexpr int kTileEnd = kDp + 3 * 32 * kDpChunks;
  // Lag blocks (float [16][16] each): dwm's, then dwp row j's. They alias the tile buffers
  // above once a tile's MMAs are done.
  static constexpr int kLagBlocks = kMaxBlocks + 3 * kP;
  static constexpr int kLag = 0;
  static constexpr int kMixerFrags = kTileEnd;                            // uint4 [kMaxBlocks][32]: Tm
  static constexpr int kMixerFragsT = kMixerFrags + 512 * kMaxBlocks;     // Um
  static constexpr int kProjFrags = kMixerFragsT + 512 * kMaxBlocks;      // [3][kP][32]: Tp_j
  static constexpr int kProjFragsT = kProjFrags + 3 * 512 * kP;           // Up_j
  static constexpr int kSlotSums = kProjFragsT + 3 * 512 * kP;            // float [slots]
  static constexpr int kMaxSlots = 3 * 32 + 256 + 1;                      // b2b_backward_slots(32, 256)
  static constexpr int kSkipSums = kSlotSums + 4 * kMaxSlots;             // float [kWarps]
  static constexpr int kBytes = kSkipSums + 4 * ToeplitzTile::kWarps;
  // The lag-ordered filters (toeplitz_lag_filter), read only to build the fragments before
  // the first tile is staged, also go over the tile buffers (3 blocks per SM at kMaxBlocks 17).
  static constexpr int kMixerFilter = 0;
  static constexpr int kProjFilters = kMixerFilter + 2 * toeplitz_lag_filter_size<kMaxBlocks>();  // [3]
  static_assert(kLag + 1024 * kLagBlocks <= kTileEnd, "the lag blocks fit over the tile buffers");
  static_assert(kProjFilters + 3 * 2 * toeplitz_lag_filter_size<kP>() <= kTileEnd, "so do the filters");
};

template <typename T, int kMaxBlocks>
__global__ void __launch_bounds__(ToeplitzTile::kThreads)
    b2b_backward_tc_kernel(B2BBackwardParams p, B2BTiling tiling, float* partials) {
  using Tile = ToeplitzTile;
  using Layout = B2BTcBackwardLayout<kMaxBlocks>;
  constexpr int kP = Layout::kP;
  constexpr bool kHalf = std::is_same<T, __half>::value;
  constexpr int kTasksPerWarp = (Layout::kLagBlocks + Tile::kWarps - 1) / Tile::kWarps;
  constexpr int kProjFilter = toeplitz_lag_filter_size<kP>();
  const int kp = int(p.proj_width), km = int(p.mixer_width);
  const int blocks = toeplitz_blocks(km), halo = blocks - 1;
  const int pblocks = toeplitz_blocks(kp), phalo = pblocks - 1;
  const int zd_chunks = (Layout::kDpChunks + 2 * halo + 15) / 16 * 16;
  const int x_units = 2 * (zd_chunks + phalo), g_units = 2 * zd_chunks;
  const int slots = 3 * kp + km + 1;   // dwp rows 3c..3c+2, dwm, dskip (b2b_backward_slots)
  const int tasks = blocks + 3 * pblocks;  // lag blocks: dwm's, then dwp row j's

  unsigned char* smem = toeplitz_shared();
  auto x_tile = [&](int j) { return smem + Layout::kX0 + 32 * Layout::kXChunks * j; };  // x[3c + j]
  unsigned char* g_s = smem + Layout::kG;
  unsigned char* z_s = smem + Layout::kZ;
  unsigned char* dh_s = smem + Layout::kDh;
  auto dp_tile = [&](int j) { return smem + Layout::kDp + 32 * Layout::kDpChunks * j; };
  float* lag_s = reinterpret_cast<float*>(smem + Layout::kLag);
  uint4* mix_frag = reinterpret_cast<uint4*>(smem + Layout::kMixerFrags);
  uint4* mix_frag_t = reinterpret_cast<uint4*>(smem + Layout::kMixerFragsT);
  uint4* proj_frag = reinterpret_cast<uint4*>(smem + Layout::kProjFrags);    // row j at + 32 kP j
  uint4* proj_frag_t = reinterpret_cast<uint4*>(smem + Layout::kProjFragsT);
  T* wm_s = reinterpret_cast<T*>(smem + Layout::kMixerFilter);
  T* wp_s = reinterpret_cast<T*>(smem + Layout::kProjFilters);  // row j at + kProjFilter j
  float* slot_s = reinterpret_cast<float*>(smem + Layout::kSlotSums);
  float* skip_s = reinterpret_cast<float*>(smem + Layout::kSkipSums);

  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, g = lane >> 2, q = lane & 3;
  const int64_t b = div_nonneg(int64_t(blockIdx.x), p.dim);
  const int64_t c = int64_t(blockIdx.x) - b * p.dim;
  const int64_t n = p.length;
  const T* x0 = static_cast<const T*>(p.x) + b * p.x_stride[0] + 3 * c * p.x_stride[1];  // row j at + j stride
  T* dx0 = static_cast<T*>(p.dx) + b * p.dx_stride[0] + 3 * c * p.dx_stride[1];
  const T* dout = static_cast<const T*>(p.dout) + b * p.dout_stride[0] + c * p.dout_stride[1];
  const bool dout_aligned = (reinterpret_cast<uintptr_t>(dout) & 15) == 0;

  toeplitz_lag_filter<kMaxBlocks>(wm_s, static_cast<const T*>(p.weight_mixer) + c * p.wm_stride[0], p.wm_stride[1],
                                  km);
  for (int j = 0; j < 3; ++j)
    toeplitz_lag_filter<kP>(wp_s + kProjFilter * j, static_cast<const T*>(p.weight_proj) + (3 * c + j) * p.wp_stride[0],
                            p.wp_stride[1], kp);
  for (int s = int(threadIdx.x); s < slots; s += Tile::kThreads) slot_s[s] = 0.0f;  // owned by thread s % kThreads
  const float skip = to_float(static_cast<const T*>(p.skip_bias)[c * p.skip_stride]);
  __syncthreads();
  toeplitz_fragments_to_shared<false>(mix_frag, wm_s, blocks);
  toeplitz_fragments_to_shared<true>(mix_frag_t, wm_s, blocks);
  for (int j = 0; j < 3; ++j) {
    toeplitz_fragments_to_shared<false>(proj_frag + 32 * kP * j, wp_s + kProjFilter * j, pblocks);
    toeplitz_fragments_to_shared<true>(proj_frag_t + 32 * kP * j, wp_s + kProjFilter * j,
                                       pblocks);
  }  // (visible after the first tile's barriers)
  float dskip = 0.0f;  // this thread's sum over all its tiles

#pragma unroll 1
  for (int64_t tile = blockIdx.y; tile < tiling.tiles; tile += gridDim.y) {
    const int64_t j0 = tile * Tile::kOutputs;  // < n
    __syncthreads();  // the previous tile's lag sums are read: the buffers are free
#pragma unroll
    for (int j = 0; j < 3; ++j) {
      const T* row = x0 + j * p.x_stride[1];
      const bool aligned = (reinterpret_cast<uintptr_t>(row) & 15) == 0;
      toeplitz_stage<Layout::kXUnits>(x_tile(j), row, aligned, j0 - 16 * (halo + phalo), x_units, n);
    }
    toeplitz_stage<Layout::kGUnits>(g_s, dout, dout_aligned, j0 - 16 * halo, g_units, n);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    // 1. Pair `pair` of ZD: z and dh chunk m (global J0 - H + m) read x chunk m + Hp - i.
#pragma unroll 1
    for (int pair = warp; pair < zd_chunks / 16; pair += Tile::kWarps) {
      float u[2][4], v[2][4], gate[2][4];
      toeplitz_mma_tiles_shared<kHalf, false, 2>(u, proj_frag + 32 * kP, x_tile(1), pblocks, 16 * pair + phalo, lane);
      toeplitz_mma_tiles_shared<kHalf, false, 2>(v, proj_frag + 64 * kP, x_tile(2), pblocks, 16 * pair + phalo, lane);
      toeplitz_mma_tiles_shared<kHalf, false, 2>(gate, proj_frag, x_tile(0), pblocks, 16 * pair + phalo, lane);
#pragma unroll
      for (int t = 0; t < 2; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int chunk = 16 * pair + 8 * t + 2 * q + (e & 1);
          const int off = toeplitz_element_offset(chunk, g + 8 * (e >> 1));
          const float z = u[t][e] * v[t][e], dh = to_float(*reinterpret_cast<const T*>(g_s + off)) * gate[t][e];
          *reinterpret_cast<T*>(z_s + off) = from_float<T>(z);
          *reinterpret_cast<T*>(dh_s + off) = from_float<T>(dh);
          if (chunk >= halo && chunk < halo + Tile::kChunks) dskip = fmaf(dh, z, dskip);  // the tile's own
        }
    }
    __syncthreads();

    // 2. Pair `pair` of DP (chunk m, global J0 + m): h reads z chunk m + H - i, dz dh chunk
    //    m + H + i, x1 and v x chunk m + H + Hp - i; dout, z and dh at m are chunk m + H.
#pragma unroll 1
    for (int pair = warp; pair < Layout::kDpChunks / 16; pair += Tile::kWarps) {
      float h[2][4], dz[2][4], a1[2][4], v[2][4];
      toeplitz_mma_tiles_shared<kHalf, false, 2>(h, mix_frag, z_s, blocks, 16 * pair + halo, lane);
      toeplitz_mma_tiles_shared<kHalf, true, 2>(dz, mix_frag_t, dh_s, blocks, 16 * pair + halo, lane);
      toeplitz_mma_tiles_shared<kHalf, false, 2>(a1, proj_frag + 32 * kP, x_tile(1), pblocks, 16 * pair + halo + phalo,
                                                 lane);
      toeplitz_mma_tiles_shared<kHalf, false, 2>(v, proj_frag + 64 * kP, x_tile(2), pblocks, 16 * pair + halo + phalo,
                                                 lane);
#pragma unroll
      for (int t = 0; t < 2; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int chunk = 16 * pair + 8 * t + 2 * q + (e & 1), step = g + 8 * (e >> 1);
          const int off = toeplitz_element_offset(chunk, step), in = toeplitz_element_offset(chunk + halo, step);
          const float zr = to_float(*reinterpret_cast<const T*>(z_s + in));
          const float dhr = to_float(*reinterpret_cast<const T*>(dh_s + in));
          const float gv = to_float(*reinterpret_cast<const T*>(g_s + in));
          const float dzv = fmaf(skip, dhr, dz[t][e]);
          *reinterpret_cast<T*>(dp_tile(0) + off) = from_float<T>(gv * fmaf(skip, zr, h[t][e]));
          *reinterpret_cast<T*>(dp_tile(1) + off) = from_float<T>(dzv * v[t][e]);
          *reinterpret_cast<T*>(dp_tile(2) + off) = from_float<T>(dzv * a1[t][e]);
        }
    }
    __syncthreads();

    // 3. dx_j over the warp's 32 chunks: dp_j chunk m + i.
#pragma unroll 1
    for (int j = 0; j < 3; ++j) {
      float acc[Tile::kWarpTiles][4];
      toeplitz_mma_tiles_shared<kHalf, true, Tile::kWarpTiles>(acc, proj_frag_t + 32 * kP * j, dp_tile(j), pblocks,
                                                               warp * Tile::kWarpChunks, lane);
      T* dx = dx0 + j * p.dx_stride[1];
      const bool fast = (reinterpret_cast<uintptr_t>(dx) & 3) == 0 && j0 + Tile::kOutputs <= n;
#pragma unroll
      for (int t = 0; t < Tile::kWarpTiles; ++t) {
        T vals[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) vals[e] = from_float<T>(acc[t][e]);
        uint32_t pair[2];
        toeplitz_output_pairs(pair, vals, lane);
        toeplitz_store_pairs(dx, j0, warp * Tile::kWarpChunks + 8 * t + 2 * q + (g & 1), g & ~1, pair, fast, n);
      }
    }

    //    Lag blocks over the tile's chunks m: task a < blocks: (dh chunk m + H, z chunk
    //    m + H - a); task blocks + j pblocks + a: (dp_j chunk m, x_j chunk m + H + Hp - a).
    float dw[kTasksPerWarp][2][4];
#pragma unroll
    for (int l = 0; l < kTasksPerWarp; ++l)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 4; ++e) dw[l][h][e] = 0.0f;
#pragma unroll 1
    for (int m = 0; m < Tile::kChunks; m += 16) {
#pragma unroll
      for (int l = 0; l < kTasksPerWarp; ++l) {
        const int task = warp + Tile::kWarps * l;
        if (task >= tasks) break;  // uniform over the warp
        if (task < blocks) {
          toeplitz_lag_block_mma<kHalf>(dw[l], dh_s, m + halo, z_s, m + halo - task, lane);
        } else {
          const int j = (task - blocks) / pblocks, a = task - blocks - j * pblocks;
          toeplitz_lag_block_mma<kHalf>(dw[l], dp_tile(j), m, x_tile(j), m + halo + phalo - a, lane);
        }
      }
    }
    __syncthreads();  // every warp is done with the tile buffers: the lag blocks go over them
#pragma unroll
    for (int l = 0; l < kTasksPerWarp; ++l) {
      const int task = warp + Tile::kWarps * l;
      if (task >= tasks) break;
      toeplitz_lag_block_store(lag_s + 256 * task, dw[l], lane);
    }
    __syncthreads();
    for (int s = int(threadIdx.x); s < slots - 1; s += Tile::kThreads) {
      float sum;
      if (s < 3 * kp) {
        const int j = s / kp, k = s - j * kp;
        sum = toeplitz_lag_sum(lag_s + 256 * (blocks + j * pblocks), pblocks, kp - 1 - k);
      } else {
        sum = toeplitz_lag_sum(lag_s, blocks, km - 1 - (s - 3 * kp));
      }
      slot_s[s] += sum;
    }
  }

  // dskip: a shuffle tree per warp, the warps in order.
  dskip = warp_sum(dskip);
  if (lane == 0) skip_s[warp] = dskip;
  __syncthreads();
  if (!partials) return;
  float* part = partials + ((c * p.batch + b) * int64_t(gridDim.y) + blockIdx.y) * slots;
  for (int s = int(threadIdx.x); s < slots; s += Tile::kThreads) {
    float sum = 0.0f;
    if (s < slots - 1) {
      sum = slot_s[s];
    } else {
      for (int w = 0; w < Tile::kWarps; ++w) sum += skip_s[w];
    }
    part[s] = sum;
  }
}

}  // namespace causalconv::detail
