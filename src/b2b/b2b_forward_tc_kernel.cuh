// Fused b2b_causal_conv1d forward on the tensor cores (fp16/bf16, Km >= kB2BTcMinMixerWidth):
// the three projections and the mixer in the blocked Toeplitz form of common/toeplitz_mma.cuh.
//
// A block owns channel c of batch b and walks 2048-step tiles (128 chunks of 16), as
// b2b_forward_kernel does. With H = mixer blocks - 1 and Hp = projection blocks - 1 halo
// chunks, per tile starting at chunk J0:
//   1. rows 3c, 3c+1, 3c+2 of x over chunks [J0-H-Hp, J0-H+Z) are staged as raw 16-bit
//      values in swizzled tiles (local chunk m = global chunk J0-H-Hp+m), zero outside
//      [0, L), where Z = 128 + H rounded up to whole tile pairs (16 chunks) of z;
//   2. z over chunks [J0-H, J0-H+Z): the warps share its m16n8 tile pairs; per pair
//      x1 = Tp1 * x[3c+1] and v = Tp2 * x[3c+2] (fp32 accumulators, same fragment layout)
//      and z = x1 * v, rounded to the storage type into the swizzled z tile;
//   3. each warp's 32 output chunks: h = Tm * z (mixer), gate = Tp0 * x[3c], and in fp32
//      out = gate * (h + skip * z) (z as rounded for the MMA) into an output tile that the
//      block writes back in 16-byte units.
// Times before 0 read zero x, so p and z are zero there, as the causal padding asks.
// z is rounded once to the 16-bit type: a relative error of 2^-9 (bf16) / 2^-11 (fp16)
// per z value, below the output's own rounding in the relative L2 sense. kGuard: a tile with an
// output that is not finite is recomputed by direct loops (common/toeplitz_guard.cuh: the blocks'
// zero lags must not meet a NaN or infinity; b2b_direct.cuh).
#pragma once

#include <type_traits>

#include "b2b/b2b_direct.cuh"
#include "b2b/b2b_kernels.h"
#include "b2b/b2b_tiling.cuh"
#include "common/toeplitz_mma.cuh"

namespace causalconv::detail {

// Layout of the kernel's shared memory for kMaxBlocks mixer blocks (all offsets in bytes,
// multiples of 16): two stages of the three x rows, z, the output tile, the lag-ordered
// filters, then the mixer's A fragments (one 16-byte entry per block and lane).
template <int kMaxBlocks>
struct B2BTcLayout {
  static constexpr int kProjBlocks = kB2BTcMaxProjBlocks;
  static constexpr int kZChunks = (ToeplitzTile::kChunks + kMaxBlocks - 1 + 15) / 16 * 16;  // z chunks, max
  static constexpr int kXUnits = 2 * (kZChunks + kProjBlocks - 1);                          // per x row, max
  static constexpr int kXBytes = 16 * kXUnits;
  static constexpr int kStage = 3 * kXBytes;  // x rows 3c, 3c+1, 3c+2 of one tile
  static constexpr int kZ = 2 * kStage;
  static constexpr int kOut = kZ + 32 * kZChunks;
  static constexpr int kWm = kOut + 2 * ToeplitzTile::kOutputs;   // lag-ordered mixer filter
  static constexpr int kWp = kWm + 32 * (kMaxBlocks + 1);          // [3] lag-ordered projection filters
  static constexpr int kFrag = kWp + 3 * 32 * (kProjBlocks + 1);
  static constexpr int kBytes = kFrag + 16 * 32 * kMaxBlocks;
  static_assert(kFrag % 16 == 0, "16-byte fragment entries");
};

// dst[16 + s] = w[(K-1-s) * stride] for lag s in [0, K), zero for the other s in [-16, 16 * blocks).
template <typename T>
__device__ __forceinline__ void stage_lag_ordered(T* dst, const T* w, int64_t stride, int width, int blocks) {
  for (int i = int(threadIdx.x); i < 16 * (blocks + 1); i += ToeplitzTile::kThreads) {
    const int s = i - 16;
    dst[i] = (s >= 0 && s < width) ? w[int64_t(width - 1 - s) * stride] : from_float<T>(0.0f);
  }
}

// The channel's lag-ordered mixer filter (wm_s) and its three projection filters (wp_s, row j
// at wp_s + 16 * (kP + 1) * j) into shared memory; returns its skip bias.
template <typename T, int kMaxBlocks, int kP>
__device__ __forceinline__ float b2b_tc_stage_filters(T* wm_s, T* wp_s, const B2BForwardParams& p, int64_t c) {
  stage_lag_ordered(wm_s, static_cast<const T*>(p.weight_mixer) + c * p.wm_stride[0], p.wm_stride[1],
                    int(p.mixer_width), kMaxBlocks);
  for (int j = 0; j < 3; ++j)
    stage_lag_ordered(wp_s + 16 * (kP + 1) * j, static_cast<const T*>(p.weight_proj) + (3 * c + j) * p.wp_stride[0],
                      p.wp_stride[1], int(p.proj_width), kP);
  return to_float(static_cast<const T*>(p.skip_bias)[c * p.skip_stride]);
}

// Step 2, z over local z chunks [0, z_chunks) (global J0 - H + m) of a tile, from the staged
// rows x1_s (3c+1) and x2_s (3c+2): x chunk = z chunk + Hp - i. The warps share its tile pairs.
template <typename T, int kP>
__device__ __forceinline__ void b2b_tc_z_tile(unsigned char* z_s, const unsigned char* x1_s,
                                              const unsigned char* x2_s, const T* wp_s, int pblocks, int z_chunks,
                                              int warp, int lane) {
  constexpr bool kHalf = std::is_same<T, __half>::value;
  const int phalo = pblocks - 1, g = lane >> 2, q = lane & 3;
  uint32_t a1[kP][4], a2[kP][4];
  toeplitz_a_fragments<kP>(a1, wp_s + 16 * (kP + 1), pblocks, lane);
  toeplitz_a_fragments<kP>(a2, wp_s + 32 * (kP + 1), pblocks, lane);
#pragma unroll 1
  for (int pair = warp; pair < z_chunks / 16; pair += ToeplitzTile::kWarps) {
    float u[2][4], v[2][4];
    toeplitz_mma_tiles<kHalf, kP, 2>(u, a1, x1_s, pblocks, 16 * pair + phalo, lane);
    toeplitz_mma_tiles<kHalf, kP, 2>(v, a2, x2_s, pblocks, 16 * pair + phalo, lane);
#pragma unroll
    for (int t = 0; t < 2; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int chunk = 16 * pair + 8 * t + 2 * q + (e & 1), step = g + 8 * (e >> 1);
        *reinterpret_cast<T*>(z_s + toeplitz_element_offset(chunk, step)) = from_float<T>(u[t][e] * v[t][e]);
      }
  }
}

// Step 3 after the mixer (h over the warp's output chunks): gate = Tp0 * x[3c] (x chunk =
// output chunk + H + Hp - i) and out = gate * (h + skip * z) into out_s; true when one of this
// thread's outputs is not finite (in fp32).
template <typename T, int kP>
__device__ __forceinline__ bool b2b_tc_gate_output(T* out_s, const float (&h)[ToeplitzTile::kWarpTiles][4],
                                                   const unsigned char* x0_s, const unsigned char* z_s,
                                                   const T* wp_s, int pblocks, int halo, float skip, int warp,
                                                   int lane) {
  using Tile = ToeplitzTile;
  constexpr bool kHalf = std::is_same<T, __half>::value;
  const int g = lane >> 2, q = lane & 3;
  float gate[Tile::kWarpTiles][4];
  {
    uint32_t a0[kP][4];
    toeplitz_a_fragments<kP>(a0, wp_s, pblocks, lane);
    toeplitz_mma_tiles<kHalf, kP, Tile::kWarpTiles>(gate, a0, x0_s, pblocks,
                                                     warp * Tile::kWarpChunks + halo + pblocks - 1, lane);
  }
  bool vote = false;
#pragma unroll
  for (int t = 0; t < Tile::kWarpTiles; ++t) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int chunk = warp * Tile::kWarpChunks + 8 * t + 2 * q + (e & 1), step = g + 8 * (e >> 1);
      const float z = to_float(*reinterpret_cast<const T*>(z_s + toeplitz_element_offset(chunk + halo, step)));
      const float out = gate[t][e] * fmaf(skip, z, h[t][e]);
      vote = vote || nonfinite(out);
      out_s[chunk * Tile::kChunk + step] = from_float<T>(out);
    }
  }
  return vote;
}

// Block (b*D + c, y) walks tiles y, y + gridDim.y, ...: the next tile's x rows are copied by
// cp.async into the other stage while it computes this one (16-byte aligned rows; others by
// element, synchronously), and the mixer's A fragments are read from shared memory.
template <typename T, int kMaxBlocks, bool kGuard>
__global__ void __launch_bounds__(ToeplitzTile::kThreads)
    b2b_forward_tc_kernel(B2BForwardParams p, B2BTiling tiling) {
  using Tile = ToeplitzTile;
  using Layout = B2BTcLayout<kMaxBlocks>;
  constexpr int kP = Layout::kProjBlocks;
  constexpr bool kHalf = std::is_same<T, __half>::value;
  const int kp = int(p.proj_width), km = int(p.mixer_width);
  const int blocks = toeplitz_blocks(km), halo = blocks - 1;
  const int pblocks = toeplitz_blocks(kp), phalo = pblocks - 1;
  const int z_chunks = (Tile::kChunks + halo + 15) / 16 * 16;  // whole tile pairs of z
  const int x_units = 2 * (z_chunks + phalo);

  unsigned char* smem = toeplitz_shared();
  unsigned char* z_s = smem + Layout::kZ;
  T* out_s = reinterpret_cast<T*>(smem + Layout::kOut);
  T* wm_s = reinterpret_cast<T*>(smem + Layout::kWm);
  T* wp_s = reinterpret_cast<T*>(smem + Layout::kWp);  // row j at wp_s + 16 * (kP + 1) * j
  uint4* frag_s = reinterpret_cast<uint4*>(smem + Layout::kFrag);
  auto x_stage = [&](int slot, int j) { return smem + slot * Layout::kStage + j * Layout::kXBytes; };

  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int64_t b = div_nonneg(int64_t(blockIdx.x), p.dim);
  const int64_t c = int64_t(blockIdx.x) - b * p.dim;
  const int64_t n = p.length;
  const T* x0 = static_cast<const T*>(p.x) + b * p.x_stride[0] + 3 * c * p.x_stride[1];
  T* out = static_cast<T*>(p.out) + b * p.out_stride[0] + c * p.out_stride[1];
  auto stage = [&](int slot, int64_t tile) {
    const int64_t x_first = tile * Tile::kOutputs - 16 * int64_t(halo + phalo);  // step of local x chunk 0
    for (int j = 0; j < 3; ++j) {
      const T* row = x0 + j * p.x_stride[1];
      toeplitz_stage<Layout::kXUnits>(x_stage(slot, j), row, (reinterpret_cast<uintptr_t>(row) & 15) == 0, x_first,
                                      x_units, n);
    }
  };

  if (int64_t(blockIdx.y) < tiling.tiles) stage(0, blockIdx.y);
  cp_async_commit();
  const float skip = b2b_tc_stage_filters<T, kMaxBlocks, kP>(wm_s, wp_s, p, c);
  __syncthreads();
  toeplitz_fragments_to_shared<false>(frag_s, wm_s, blocks);

  int slot = 0;
#pragma unroll 1
  for (int64_t tile = blockIdx.y; tile < tiling.tiles; tile += gridDim.y, slot ^= 1) {
    const int64_t j0 = tile * Tile::kOutputs;  // < n
    cp_async_wait<0>();  // this tile's copies are done
    __syncthreads();     // ... every thread's; the other stage, z_s and out_s are free
    if (tile + gridDim.y < tiling.tiles) stage(slot ^ 1, tile + gridDim.y);
    cp_async_commit();
    b2b_tc_z_tile<T, kP>(z_s, x_stage(slot, 1), x_stage(slot, 2), wp_s, pblocks, z_chunks, warp, lane);
    __syncthreads();
    // 3. The warp's output chunks: z chunk = output chunk + H - i.
    float h[Tile::kWarpTiles][4];
    toeplitz_mma_tiles_shared<kHalf, false, Tile::kWarpTiles>(h, frag_s, z_s, blocks,
                                                               warp * Tile::kWarpChunks + halo, lane);
    const bool vote =
        b2b_tc_gate_output<T, kP>(out_s, h, x_stage(slot, 0), z_s, wp_s, pblocks, halo, skip, warp, lane);
    if (guarded_tile_barrier<kGuard>(vote)) {
      b2b_direct_tile<Tile::kOutputs, Tile::kThreads>(B2BDirectChannel<T>(p, x0, c), j0,
                                                      [out_s](int i, float v) { out_s[i] = from_float<T>(v); });
      __syncthreads();
    }
    toeplitz_store_outputs(out, out_s, j0, n);
  }
}

}  // namespace causalconv::detail
