// Fused b2b_causal_conv1d forward with the mixer on the tensor cores (fp16/bf16,
// Km >= kB2BTcMinMixerWidth): the blocked Toeplitz form of common/toeplitz_mma.cuh.
//
// A block owns channel c of batch b and walks 2048-step tiles, as b2b_forward_kernel
// does. Per tile [j0, j0+T), with Hp = Kp-1 and H = Toeplitz blocks - 1 halo chunks:
//   x row 3c over [j0-Hp, j0+T) and rows 3c+1, 3c+2 over [j0-16H-Hp, j0+T) are staged as
//   fp32 (the same staging as the CUDA-core kernel);
//   z = x1 * v over [j0-16H, j0+T) is computed in fp32 on the CUDA cores and rounded to
//   the storage type into the swizzled Toeplitz input tile (zero before t = 0, as x is);
//   each warp makes 32 output chunks of sum_k wm[k] z[t-(Km-1-k)] with mma.sync;
//   the epilogue adds skip * z[t] (z as rounded for the MMA), multiplies by the gate
//   x2[t] = sum_k wp[3c][k] x[3c][t-(Hp-k)] (fp32), and the block writes the tile back
//   in 16-byte units through shared memory.
// z is rounded once to the 16-bit type: a relative error of 2^-9 (bf16) / 2^-11 (fp16)
// per z value, below the output's own rounding in the relative L2 sense.
#pragma once

#include <type_traits>

#include "b2b/b2b_kernels.h"
#include "b2b/b2b_tiling.cuh"
#include "common/toeplitz_mma.cuh"

namespace causalconv::detail {

template <typename T, int kMaxBlocks>
__global__ void __launch_bounds__(ToeplitzTile::kThreads)
    b2b_forward_tc_kernel(B2BForwardParams p, B2BTiling tiling) {
  using Tile = ToeplitzTile;
  using Stage = B2BForwardTile;  // fp32 row staging: 128 threads x 16 = 2048 steps
  static_assert(Stage::kThreads == Tile::kThreads && Stage::kOutputs == Tile::kOutputs, "one tile shape");
  constexpr bool kHalf = std::is_same<T, __half>::value;
  constexpr int kT = Tile::kOutputs;
  const int kp = int(p.proj_width), km = int(p.mixer_width);
  const int blocks = toeplitz_blocks(km), halo = blocks - 1, hz = 16 * halo, hp = kp - 1;

  unsigned char* smem = toeplitz_shared();
  unsigned char* z_s = smem;                                                  // swizzled z chunks
  T* out_s = reinterpret_cast<T*>(smem + ToeplitzStage<kMaxBlocks>::kInBytes);  // [kT]
  T* wr_s = out_s + kT;                                                      // [16 * (kMaxBlocks + 1)]
  float* wp_s = reinterpret_cast<float*>(wr_s + 16 * (kMaxBlocks + 1));      // [3][Kp]
  float* x0_s = wp_s + 3 * kp;             // x[3c]   at time j0 - Hp + i
  float* x1_s = x0_s + hp + kT;            // x[3c+1] at time j0 - 16H - Hp + i
  float* x2_s = x1_s + hz + hp + kT;       // x[3c+2] at time j0 - 16H - Hp + i

  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int64_t b = div_nonneg(int64_t(blockIdx.x), p.dim);
  const int64_t c = int64_t(blockIdx.x) - b * p.dim;
  const int64_t n = p.length;
  const T* x0 = static_cast<const T*>(p.x) + b * p.x_stride[0] + 3 * c * p.x_stride[1];
  const T* x1 = x0 + p.x_stride[1];
  const T* x2 = x1 + p.x_stride[1];
  T* out = static_cast<T*>(p.out) + b * p.out_stride[0] + c * p.out_stride[1];

  const T* wp = static_cast<const T*>(p.weight_proj);
  for (int i = int(threadIdx.x); i < 3 * kp; i += Tile::kThreads) {
    const int j = i / kp, k = i - j * kp;
    wp_s[i] = to_float(wp[(3 * c + j) * p.wp_stride[0] + k * p.wp_stride[1]]);
  }
  // wr_s[16 + s] = wm[Km-1-s] for lag s in [0, Km), zero elsewhere in [-16, 16 * kMaxBlocks).
  const T* wm = static_cast<const T*>(p.weight_mixer) + c * p.wm_stride[0];
  for (int i = int(threadIdx.x); i < 16 * (kMaxBlocks + 1); i += Tile::kThreads) {
    const int s = i - 16;
    wr_s[i] = (s >= 0 && s < km) ? wm[int64_t(km - 1 - s) * p.wm_stride[1]] : from_float<T>(0.0f);
  }
  const float skip = to_float(static_cast<const T*>(p.skip_bias)[c * p.skip_stride]);
  __syncthreads();
  uint32_t a[kMaxBlocks][4];
  toeplitz_a_fragments<kMaxBlocks>(a, wr_s, blocks, lane);

#pragma unroll 1
  for (int64_t tile = blockIdx.y; tile < tiling.tiles; tile += gridDim.y) {
    const int64_t j0 = tile * kT;  // < n
    __syncthreads();               // the previous tile is done with every buffer
    b2b_stage_row<Stage>(x0_s, x0, j0, n, hp, 0);
    b2b_stage_row<Stage>(x1_s, x1, j0, n, hz + hp, 0);
    b2b_stage_row<Stage>(x2_s, x2, j0, n, hz + hp, 0);
    __syncthreads();

    // z at local step i (time j0 - 16H + i): p at that time reads x at j0 - 16H + i - Hp + k.
    const float* w1 = wp_s + kp;
    const float* w2 = wp_s + 2 * kp;
    for (int i = int(threadIdx.x); i < hz + kT; i += Tile::kThreads) {
      float u = 0.0f, v = 0.0f;
      for (int k = 0; k < kp; ++k) {
        u = fmaf(w1[k], x1_s[i + k], u);
        v = fmaf(w2[k], x2_s[i + k], v);
      }
      const int pos = i & 15;
      *reinterpret_cast<T*>(z_s + toeplitz_unit_offset(i >> 4, pos >> 3) + 2 * (pos & 7)) = from_float<T>(u * v);
    }
    __syncthreads();

    float acc[Tile::kWarpTiles][4];
    toeplitz_warp_tile<kHalf, kMaxBlocks>(acc, a, z_s, blocks, halo, warp, lane);
    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int t = 0; t < Tile::kWarpTiles; ++t) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int chunk = warp * Tile::kWarpChunks + 8 * t + 2 * q + (e & 1), step = g + 8 * (e >> 1);
        const int i = chunk * Tile::kChunk + step;  // tile-local output step
        const float z = to_float(
            *reinterpret_cast<const T*>(z_s + toeplitz_unit_offset(chunk + halo, step >> 3) + 2 * (step & 7)));
        float gate = 0.0f;
        for (int k = 0; k < kp; ++k) gate = fmaf(wp_s[k], x0_s[i + k], gate);
        out_s[i] = from_float<T>(gate * fmaf(skip, z, acc[t][e]));
      }
    }
    __syncthreads();
    toeplitz_store_outputs(out, out_s, j0, n);
  }
}

}  // namespace causalconv::detail
