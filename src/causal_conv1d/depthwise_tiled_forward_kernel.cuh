// Depthwise causal conv forward, the tiled kernel: channel-first sequences with a unit time stride
// that the window and tensor-core kernels do not take (fp32 at K >= 9, any type at a dilation > 1,
// rows off the 16-byte boundaries), and the residue classes of a long dilated reach
// (depthwise_tiling.cuh). A block stages one time tile of one sequence plus its causal halo in
// shared memory as fp32, then makes the tile's 2048 outputs in one of two ways:
//  * the tap loop (any dilation): each thread makes 16 outputs interleaved by 128, one shared load
//    per FMA: bound by shared-memory bandwidth (fp32 B1 C4096 L8192 K128: 0.60 ms on the H200, ~20 %
//    of the FMA peak);
//  * the register window (dilation 1 within the sequence, K >= kRegisterWindowMinWidth): each
//    thread makes 16 consecutive outputs from a 32-value window of the staged row in registers,
//    the taps in chunks of 16: 256 FMAs per 16 window loads and 4 (broadcast) weight loads. The
//    staged row is skewed, a pad word after every 16 (skewed_index), so that the threads' windows,
//    16 words apart, fall in distinct banks; the outputs go back through the staged row and leave
//    interleaved, in coalesced stores. Per output the taps are added in the same order as the tap
//    loop's, so both give the same bits.
#pragma once

#include "causal_conv1d/depthwise_kernels.h"
#include "causal_conv1d/depthwise_tiling.cuh"
#include "common/cuda_math.cuh"

namespace causalconv::detail {

using TiledForwardTile = ForwardTile;

// The register window from this width on (below, the tap loop's 16 loads per 16 FMAs are cheap),
// when kDepthwiseTiledRegisterWindow. Off until measured on the H200: written in session 28 after the
// device time ran out; emulated tests pass (tests/cpp/test_depthwise_tiled_emulated.cpp), bitwise
// equal to the tap loop. Predicted: fp32 B1 C4096 L8192 K128 forward 0.60 -> ~0.18 ms (FMA-bound:
// 4.3 G FMAs at 70 % of the 33 T/s peak), fp32 K9-K32 at the copy rate.
constexpr bool kDepthwiseTiledRegisterWindow = false;
constexpr int64_t kRegisterWindowMinWidth = 9;

// Shared-memory word of staged position s under the register window's skew.
__host__ __device__ constexpr int skewed_index(int s) { return s + (s >> 4); }

// Shared memory of the tiled forward (fp32 words): the filter, then the staged row. The register
// window reads up to 16 positions past the staged ones (window loads of a last, partial tap chunk
// whose values no tap uses); the kernel zeroes them once.
struct TiledForwardSmem {
  int filter_words, row_words;
  __host__ __device__ constexpr int total_words() const { return filter_words + row_words; }
};
__host__ __device__ constexpr TiledForwardSmem tiled_forward_smem(int width, int halo, bool register_window) {
  return register_window ? TiledForwardSmem{(width + 3) / 4 * 4, skewed_index(halo + kTileOutputs + 16) + 1}
                         : TiledForwardSmem{width, halo + kTileOutputs};
}

#ifndef CAUSALCONV_CUDA_EMULATION
__device__ __forceinline__ float* tiled_forward_shared() {
  extern __shared__ float4 tiled_forward_smem_words[];
  return reinterpret_cast<float*>(tiled_forward_smem_words);
}
#endif

struct SkewedIndex {  // stage_row's index map under the register window
  __device__ __forceinline__ int operator()(int s) const { return skewed_index(s); }
};

// acc[e] = bias + sum_k w_s[k] * x_s[o + e + k] for o = 16 * threadIdx.x, e < 16, k < width, the
// taps added in order; x_s skewed (position s at skewed_index(s)).
__device__ __forceinline__ void register_window_outputs(float (&acc)[16], const float* x_s, const float* w_s,
                                                        int width, float bias) {
  const int o = 16 * int(threadIdx.x);
#pragma unroll
  for (int e = 0; e < 16; ++e) acc[e] = bias;
  float win[32];  // win[j] = position o + k0 + j
  {
    const float* next = x_s + skewed_index(o);  // o is a multiple of 16: the 16 positions are contiguous words
#pragma unroll
    for (int j = 0; j < 16; ++j) win[16 + j] = next[j];
  }
  auto slide = [&](int k0) {
    const float* next = x_s + skewed_index(o + k0 + 16);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      win[j] = win[16 + j];
      win[16 + j] = next[j];
    }
  };
  const int full = width / 16 * 16;
#pragma unroll 1
  for (int k0 = 0; k0 < full; k0 += 16) {
    slide(k0);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 w4 = reinterpret_cast<const float4*>(w_s + k0)[q];
      const float wq[4] = {w4.x, w4.y, w4.z, w4.w};
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int e = 0; e < 16; ++e) acc[e] = fmaf(wq[r], win[4 * q + r + e], acc[e]);
    }
  }
  if (full < width) {  // the last width % 16 taps
    slide(full);
#pragma unroll
    for (int kk = 0; kk < 15; ++kk) {
      if (full + kk >= width) break;
      const float wk = w_s[full + kk];
#pragma unroll
      for (int e = 0; e < 16; ++e) acc[e] = fmaf(wk, win[kk + e], acc[e]);
    }
  }
}

// kUnitStride: rows are not split by residue, so neighbours along time are adjacent.
// kRegisterWindow: the register window (tiling.dilation == 1); else the tap loop.
template <typename T, bool kUnitStride, bool kRegisterWindow>
__global__ void __launch_bounds__(TiledForwardTile::kThreads, 4)
    depthwise_forward_tiled(DepthwiseForwardParams p, DepthwiseTiling tiling) {
  using Tile = TiledForwardTile;
  static_assert(!kRegisterWindow || Tile::kPerThread == 16, "the window makes 16 consecutive outputs a thread");
  const int width = int(p.width), halo = int(tiling.halo), dil = int(tiling.dilation);
  const TiledForwardSmem layout = tiled_forward_smem(width, halo, kRegisterWindow);
  float* const w_s = tiled_forward_shared();     // [width]
  float* const x_s = w_s + layout.filter_words;  // [halo + kTileOutputs], skewed under the register window
  const int64_t seq = blockIdx.x;
  const int64_t bc = tiling.residues == 1 ? seq : div_nonneg(seq, tiling.residues);
  const int64_t r = seq - bc * tiling.residues;
  const int64_t b = div_nonneg(bc, p.channels), c = bc - b * p.channels;
  const int64_t n = tiling.residues == 1 ? p.length : div_nonneg(p.length - r + tiling.step - 1, tiling.step);
  const T* x = static_cast<const T*>(p.x) + b * p.x_stride[0] + c * p.x_stride[1] + r * p.x_stride[2];
  T* y = static_cast<T*>(p.y) + b * p.y_stride[0] + c * p.y_stride[1] + r * p.y_stride[2];
  const int64_t xs = tiling.step * p.x_stride[2], ys = tiling.step * p.y_stride[2];

  for (int k = threadIdx.x; k < width; k += Tile::kThreads)
    w_s[k] = to_float(static_cast<const T*>(p.weight)[c * p.w_stride[0] + k * p.w_stride[1]]);
  const float bias = p.bias ? to_float(static_cast<const T*>(p.bias)[c * p.bias_stride]) : 0.0f;
  if (kRegisterWindow)  // the words past the staged row that the window loads but no tap uses
    for (int i = skewed_index(halo + kTileOutputs) + int(threadIdx.x); i < layout.row_words; i += Tile::kThreads)
      x_s[i] = 0.0f;

#pragma unroll 1
  for (int64_t tile = blockIdx.y; tile < tiling.tiles; tile += gridDim.y) {
    const int64_t j0 = tile * kTileOutputs;
    if (j0 >= n) break;
    __syncthreads();  // the previous tile's reads of x_s are done
    float acc[Tile::kPerThread];
    if constexpr (kRegisterWindow) {
      stage_row<Tile, kUnitStride>(x_s, x, xs, j0, n, halo, 0, SkewedIndex{});
      __syncthreads();
      register_window_outputs(acc, x_s, w_s, width, bias);
      __syncthreads();  // every window read: x_s takes the outputs, to leave interleaved
      const int o = 16 * int(threadIdx.x);
#pragma unroll
      for (int e = 0; e < 16; ++e) x_s[skewed_index(o + e)] = acc[e];
      __syncthreads();
#pragma unroll
      for (int e = 0; e < Tile::kPerThread; ++e) acc[e] = x_s[skewed_index(int(threadIdx.x) + e * Tile::kThreads)];
    } else {
      stage_row<Tile, kUnitStride>(x_s, x, xs, j0, n, halo, 0);
      __syncthreads();
#pragma unroll
      for (int e = 0; e < Tile::kPerThread; ++e) acc[e] = bias;
#pragma unroll 1  // Tile::kPerThread loads per tap are enough in flight; unrolling taps only spills
      for (int k = 0; k < width; ++k) {
        const float wk = w_s[k];
        const float* xk = x_s + k * dil + threadIdx.x;  // x_s[halo + jl - (K-1-k)*dil]
#pragma unroll
        for (int e = 0; e < Tile::kPerThread; ++e) acc[e] = fmaf(wk, xk[e * Tile::kThreads], acc[e]);
      }
    }
    if (p.silu) {
#pragma unroll
      for (int e = 0; e < Tile::kPerThread; ++e) acc[e] = silu<T>(acc[e]);
    }
    store_tile<Tile, kUnitStride>(y + j0 * ys, ys, n - j0, acc);
  }
}

}  // namespace causalconv::detail
