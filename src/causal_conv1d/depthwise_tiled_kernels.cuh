// The tiled depthwise kernels, forward and (below) backward: channel-first sequences with a unit
// time stride that the window and tensor-core kernels do not take (fp32 at K >= 9, any type at a
// dilation > 1, rows off the 16-byte boundaries), and the residue classes of a long dilated reach
// (depthwise_tiling.cuh). The forward: a block stages one time tile of one sequence plus its causal
// halo in shared memory as fp32, then makes the tile's 2048 outputs in one of two ways:
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

#include <type_traits>

#include "causal_conv1d/depthwise_kernels.h"
#include "causal_conv1d/depthwise_tiling.cuh"
#include "common/cuda_math.cuh"

namespace causalconv::detail {

using TiledForwardTile = ForwardTile;

// The register windows: the forward's from kRegisterWindowMinWidth, the backward's from
// kRegisterWindowMinBackwardWidth (below, the tap loops' loads are cheap). Measured in session 33
// (H100, fp32 B1 C4096 L8192, docs/performance.md) against the tap loops: forward K9 108 -> 105 us;
// forward+backward K9 348 -> 394 us, K33 715 -> 507, K128 2379 -> 935. The backward alone grows by
// ~14.5 us a tap on the tap loop and ~3.9 on the window, 49 us apart at K9: even near K13.
constexpr bool kDepthwiseTiledRegisterWindow = true;
constexpr int64_t kRegisterWindowMinWidth = 9;
constexpr int64_t kRegisterWindowMinBackwardWidth = 16;

// Whether the tiled forward (backward: backward = true) takes the register window for this cut.
inline bool tiled_register_window_applies(const DepthwiseTiling& tiling, int64_t width, bool backward) {
  return kDepthwiseTiledRegisterWindow && tiling.dilation == 1 &&
         width >= (backward ? kRegisterWindowMinBackwardWidth : kRegisterWindowMinWidth);
}

// Calls f(unit_stride, register_window) as std::bool_constant values: the tiled kernels' template
// arguments for this cut (unit stride: the rows are not split by residue).
template <typename F>
void with_tiled_variant(const DepthwiseTiling& tiling, bool register_window, F&& f) {
  if (tiling.step == 1)
    register_window ? f(std::true_type{}, std::true_type{}) : f(std::true_type{}, std::false_type{});
  else
    register_window ? f(std::false_type{}, std::true_type{}) : f(std::false_type{}, std::false_type{});
}

// Shared-memory word of staged position s under the skew of a register window of kOutputs
// consecutive outputs a thread (a pad word after every kOutputs positions).
template <int kOutputs>
__host__ __device__ constexpr int skewed_index(int s) { return s + int(unsigned(s) / kOutputs); }

// Shared memory of the tiled forward (fp32 words): the filter, then the staged row. The register
// window reads up to 16 positions past the staged ones (window loads of a last, partial tap chunk
// whose values no tap uses); the kernel zeroes them once.
struct TiledForwardSmem {
  int filter_words, row_words;
  __host__ __device__ constexpr int total_words() const { return filter_words + row_words; }
};
__host__ __device__ constexpr TiledForwardSmem tiled_forward_smem(int width, int halo, bool register_window) {
  return register_window ? TiledForwardSmem{(width + 3) / 4 * 4, skewed_index<16>(halo + kTileOutputs + 16) + 1}
                         : TiledForwardSmem{width, halo + kTileOutputs};
}

#ifndef CAUSALCONV_CUDA_EMULATION
__device__ __forceinline__ float* tiled_shared() {
  extern __shared__ float4 tiled_smem_words[];
  return reinterpret_cast<float*>(tiled_smem_words);
}
#endif

template <int kOutputs>
struct SkewedIndex {  // stage_row's index map under a register window
  __device__ __forceinline__ int operator()(int s) const { return skewed_index<kOutputs>(s); }
};

// A thread's window of 2 kOutputs consecutive staged positions in registers, slid along a skewed
// row (position s at skewed_index<kOutputs>(s)) in steps of kOutputs: win[j] = position base + j.
template <int kOutputs>
struct RegisterWindow {
  static_assert(kOutputs % 4 == 0, "taps are read 4 at a time");
  float win[2 * kOutputs];
  // Loads positions o .. o + kOutputs - 1 (o a multiple of kOutputs: contiguous words) as the upper half.
  __device__ __forceinline__ void start(const float* row, int o) {
    const float* next = row + skewed_index<kOutputs>(o);
#pragma unroll
    for (int j = 0; j < kOutputs; ++j) win[kOutputs + j] = next[j];
  }
  // The upper half moves down; positions o + k0 + kOutputs .. come in: win[j] = position o + k0 + j.
  __device__ __forceinline__ void slide(const float* row, int o, int k0) {
    const float* next = row + skewed_index<kOutputs>(o + k0 + kOutputs);
#pragma unroll
    for (int j = 0; j < kOutputs; ++j) {
      win[j] = win[kOutputs + j];
      win[kOutputs + j] = next[j];
    }
  }
};

// acc[e] = bias + sum_k w_s[k] * row[o + e + k] for e < kOutputs, k < width, the taps added in
// order; o a multiple of kOutputs (by default the thread's: kOutputs * threadIdx.x); row skewed,
// w_s 16-byte aligned.
template <int kOutputs>
__device__ __forceinline__ void register_window_outputs(float (&acc)[kOutputs], const float* row, const float* w_s,
                                                        int width, float bias,
                                                        int o = kOutputs * int(threadIdx.x)) {
#pragma unroll
  for (int e = 0; e < kOutputs; ++e) acc[e] = bias;
  RegisterWindow<kOutputs> w;
  w.start(row, o);
  const int full = width / kOutputs * kOutputs;
#pragma unroll 1
  for (int k0 = 0; k0 < full; k0 += kOutputs) {
    w.slide(row, o, k0);
#pragma unroll
    for (int q = 0; q < kOutputs / 4; ++q) {
      const float4 w4 = reinterpret_cast<const float4*>(w_s + k0)[q];
      const float wq[4] = {w4.x, w4.y, w4.z, w4.w};
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int e = 0; e < kOutputs; ++e) acc[e] = fmaf(wq[r], w.win[4 * q + r + e], acc[e]);
    }
  }
  if (full < width) {  // the last width % kOutputs taps
    w.slide(row, o, full);
#pragma unroll
    for (int kk = 0; kk < kOutputs - 1; ++kk) {
      if (full + kk >= width) break;
      const float wk = w_s[full + kk];
#pragma unroll
      for (int e = 0; e < kOutputs; ++e) acc[e] = fmaf(wk, w.win[kk + e], acc[e]);
    }
  }
}

// A thread's kOutputs consecutive outputs (positions o = kOutputs * threadIdx.x on) as the
// interleaved ones store_tile takes (positions threadIdx.x + e * Shape::kThreads), through the
// skewed row `buffer`, which every thread of the block has finished reading.
template <typename Shape, int kOutputs>
__device__ __forceinline__ void consecutive_to_interleaved(float (&acc)[kOutputs], float* buffer) {
  static_assert(Shape::kPerThread == kOutputs, "a thread's outputs, both ways");
  const int o = kOutputs * int(threadIdx.x);
#pragma unroll
  for (int e = 0; e < kOutputs; ++e) buffer[skewed_index<kOutputs>(o + e)] = acc[e];
  __syncthreads();
#pragma unroll
  for (int e = 0; e < kOutputs; ++e) acc[e] = buffer[skewed_index<kOutputs>(int(threadIdx.x) + e * Shape::kThreads)];
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
  float* const w_s = tiled_shared();             // [width]
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
    for (int i = skewed_index<16>(halo + kTileOutputs) + int(threadIdx.x); i < layout.row_words; i += Tile::kThreads)
      x_s[i] = 0.0f;

#pragma unroll 1
  for (int64_t tile = blockIdx.y; tile < tiling.tiles; tile += gridDim.y) {
    const int64_t j0 = tile * kTileOutputs;
    if (j0 >= n) break;
    __syncthreads();  // the previous tile's reads of x_s are done
    float acc[Tile::kPerThread];
    if constexpr (kRegisterWindow) {
      stage_row<Tile, kUnitStride>(x_s, x, xs, j0, n, halo, 0, SkewedIndex<16>{});
      __syncthreads();
      register_window_outputs<16>(acc, x_s, w_s, width, bias);
      __syncthreads();  // every window read: x_s takes the outputs, to leave interleaved
      consecutive_to_interleaved<Tile>(acc, x_s);
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

// ---- backward --------------------------------------------------------------------------------
//
// Per block (sequence, tile [j0, j0+T)), with H = (K-1)*d:
//   g[j]  = dy[j] * silu'(pre[j])             for j in [j0, j0+T+H)   (dx needs the future)
//   dx[j] = sum_k w[k] g[j + (K-1-k)d]          for j in the tile
//   dw[k] += sum_j g[j] x[j - (K-1-k)d],  db += sum_j g[j]   over the tile,
// the tile's weight-gradient sums written as its partials (summed in a fixed order by
// depthwise_weight_grad_reduce). Two ways again:
//  * the tap loops (any dilation, silu): 8 outputs a thread interleaved by 256; dx one shared load
//    per FMA, dweight per tap 8 FMAs, 8 loads and a 5-shuffle warp sum;
//  * the register window (dilation 1 within the sequence, K >= kRegisterWindowMinBackwardWidth): 8
//    consecutive positions a thread. With silu, the silu input over the tile and its look-ahead is
//    the forward's window over x; dx is the forward's window over g with the filter reversed;
//    dweight keeps the thread's 8 g values in registers and slides a window of x: per 8 taps 64
//    FMAs and 8 loads give 8 sums, reduced over the warp with 9 shuffles (warp_transpose_sum8).
using TiledBackwardTile = BackwardTile;
constexpr int kTiledBackwardWarps = TiledBackwardTile::kThreads / 32;

// Shared memory of the tiled backward (fp32 words). Tap loops: w[K] | x[H + T + H] | g[T + H] |
// per-warp sums [kWarps][K+1]. Register window: w[K] and w reversed (each rounded up to 4 words) |
// x[H + T + H] and g[T + H], skewed, each with the 16 positions past it that a last window loads |
// the per-warp sums.
struct TiledBackwardSmem {
  int filter_words, x_words, g_words, sum_words;
  __host__ __device__ constexpr int total_words() const { return filter_words + x_words + g_words + sum_words; }
};
__host__ __device__ constexpr TiledBackwardSmem tiled_backward_smem(int width, int halo, bool register_window) {
  return register_window
             ? TiledBackwardSmem{2 * ((width + 3) / 4 * 4), skewed_index<8>(2 * halo + kTileOutputs + 16) + 1,
                                 skewed_index<8>(halo + kTileOutputs + 16) + 1, kTiledBackwardWarps * (width + 1)}
             : TiledBackwardSmem{width, 2 * halo + kTileOutputs, kTileOutputs + halo, kTiledBackwardWarps * (width + 1)};
}

// The warp's sums of v[0..7] by halving exchanges: every lane gets the total of v[tap] for its
// tap = warp_transpose_sum8_tap(lane) (the 4 lanes of a quad share one), with 9 shuffles where
// 8 warp sums take 40.
__device__ __forceinline__ int warp_transpose_sum8_tap(int lane) {
  return ((lane >> 4) & 1) * 4 + ((lane >> 3) & 1) * 2 + ((lane >> 2) & 1);
}
__device__ __forceinline__ float warp_transpose_sum8(const float (&v)[8]) {
  const int lane = int(threadIdx.x) & 31;
  const bool b4 = lane & 16, b3 = lane & 8, b2 = lane & 4;
  float u[4];  // taps 4 b4 + m
#pragma unroll
  for (int m = 0; m < 4; ++m) u[m] = (b4 ? v[m + 4] : v[m]) + __shfl_xor_sync(0xffffffffu, b4 ? v[m] : v[m + 4], 16);
  float t[2];  // taps 4 b4 + 2 b3 + m
#pragma unroll
  for (int m = 0; m < 2; ++m) t[m] = (b3 ? u[m + 2] : u[m]) + __shfl_xor_sync(0xffffffffu, b3 ? u[m] : u[m + 2], 8);
  float r = (b2 ? t[1] : t[0]) + __shfl_xor_sync(0xffffffffu, b2 ? t[0] : t[1], 4);
  r += __shfl_xor_sync(0xffffffffu, r, 2);
  return r + __shfl_xor_sync(0xffffffffu, r, 1);
}

// kUnitStride: rows are not split by residue, so neighbours along time are adjacent.
// kRegisterWindow: the register window (tiling.dilation == 1); else the tap loops.
template <typename T, bool kUnitStride, bool kRegisterWindow>
__global__ void __launch_bounds__(TiledBackwardTile::kThreads)
    depthwise_backward_tiled(DepthwiseBackwardParams p, DepthwiseTiling tiling, float* partials) {
  using Tile = TiledBackwardTile;
  constexpr int kWindow = Tile::kPerThread;  // consecutive positions a thread (register window)
  static_assert(!kRegisterWindow || kWindow == 8, "warp_transpose_sum8 reduces 8 taps");
  const int width = int(p.width), halo = int(tiling.halo), dil = int(tiling.dilation);
  const TiledBackwardSmem layout = tiled_backward_smem(width, halo, kRegisterWindow);
  float* const w_s = tiled_shared();
  float* const w_rev_s = w_s + layout.filter_words / 2;  // register window: w[K-1-j], 16-byte aligned
  float* const x_s = w_s + layout.filter_words;          // x[j0 - H + i]
  float* const g_s = x_s + layout.x_words;               // g[j0 + i]
  float* const red_s = g_s + layout.g_words;             // [kWarps][K+1]

  const int64_t seq = blockIdx.x;
  const int64_t bc = tiling.residues == 1 ? seq : div_nonneg(seq, tiling.residues);
  const int64_t r = seq - bc * tiling.residues;
  const int64_t b = div_nonneg(bc, p.channels), c = bc - b * p.channels;
  const int64_t n = tiling.residues == 1 ? p.length : div_nonneg(p.length - r + tiling.step - 1, tiling.step);
  const int64_t step = tiling.step;  // time stride of a sub-sequence (unit-stride rows)
  const T* x = static_cast<const T*>(p.x) + b * p.x_stride[0] + c * p.x_stride[1] + r;
  const T* dy = static_cast<const T*>(p.dy) + b * p.dy_stride[0] + c * p.dy_stride[1] + r;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  for (int k = threadIdx.x; k < width; k += Tile::kThreads) {
    const float wk = to_float(static_cast<const T*>(p.weight)[c * p.w_stride[0] + k * p.w_stride[1]]);
    w_s[k] = wk;
    if (kRegisterWindow) w_rev_s[width - 1 - k] = wk;
  }
  const float bias = p.bias ? to_float(static_cast<const T*>(p.bias)[c * p.bias_stride]) : 0.0f;
  if (kRegisterWindow)  // the positions past x and g that the last windows load and no sum keeps
    for (int i = threadIdx.x; i < 16; i += Tile::kThreads) {
      x_s[skewed_index<kWindow>(2 * halo + kTileOutputs + i)] = 0.0f;
      g_s[skewed_index<kWindow>(kTileOutputs + halo + i)] = 0.0f;
    }

  for (int64_t tile = blockIdx.y; tile < tiling.tiles; tile += gridDim.y) {
    const int64_t j0 = tile * kTileOutputs;
    float* tile_partials = partials ? partials + (c * tiling.residues * p.batch * tiling.tiles +
                                                  (b * tiling.residues + r) * tiling.tiles + tile) * (width + 1)
                                    : nullptr;
    if (j0 >= n) {  // a short residue class: this tile is empty but its partials are still summed
      for (int k = threadIdx.x; tile_partials && k <= width; k += Tile::kThreads) tile_partials[k] = 0.0f;
      continue;
    }
    __syncthreads();  // the previous tile is done with the shared buffers
    T* const dx = p.dx ? static_cast<T*>(p.dx) + b * p.dx_stride[0] + c * p.dx_stride[1] + r : nullptr;

    if constexpr (kRegisterWindow) {
      // x over [j0 - H, j0 + T + H): the silu input at j needs x back to j - H.
      stage_row<Tile, kUnitStride>(x_s, x, step, j0, n, halo, p.silu ? halo : 0, SkewedIndex<kWindow>{});
      stage_row<Tile, kUnitStride>(g_s, dy, step, j0, n, 0, halo, SkewedIndex<kWindow>{});
      __syncthreads();
      if (p.silu) {  // g *= silu'(pre) at positions [0, T + H): the tile, then its look-ahead
        for (int o = kWindow * int(threadIdx.x); o < kTileOutputs + halo; o += kTileOutputs) {
          float pre[kWindow];
          register_window_outputs<kWindow>(pre, x_s, w_s, width, bias, o);
#pragma unroll
          for (int e = 0; e < kWindow; ++e)
            if (o + e < kTileOutputs + halo) g_s[skewed_index<kWindow>(o + e)] *= silu_derivative<T>(pre[e]);
        }
        __syncthreads();
      }
      const int o = kWindow * int(threadIdx.x);
      if (tile_partials) {
        float g[kWindow], g_sum = 0.0f;
#pragma unroll
        for (int e = 0; e < kWindow; ++e) {
          g[e] = g_s[skewed_index<kWindow>(o + e)];
          g_sum += g[e];
        }
        RegisterWindow<kWindow> xw;  // x positions o + k0 + j: tap k0 + kk of output o + e reads kk + e
        xw.start(x_s, o);
#pragma unroll 1
        for (int k0 = 0; k0 < width; k0 += kWindow) {  // taps past K: summed, not kept
          xw.slide(x_s, o, k0);
          float sums[kWindow];
#pragma unroll
          for (int kk = 0; kk < kWindow; ++kk) {
            sums[kk] = 0.0f;
#pragma unroll
            for (int e = 0; e < kWindow; ++e) sums[kk] = fmaf(g[e], xw.win[kk + e], sums[kk]);
          }
          const float total = warp_transpose_sum8(sums);
          const int k = k0 + warp_transpose_sum8_tap(lane);
          if (lane % 4 == 0 && k < width) red_s[warp * (width + 1) + k] = total;
        }
        g_sum = warp_sum(g_sum);
        if (lane == 0) red_s[warp * (width + 1) + width] = g_sum;
      }
      float acc[kWindow];
      if (dx) register_window_outputs<kWindow>(acc, g_s, w_rev_s, width, 0.0f);
      __syncthreads();  // the windows' reads of x_s and g_s are done; red_s is complete
      if (tile_partials)
        for (int k = threadIdx.x; k <= width; k += Tile::kThreads) {
          float sum = 0.0f;
          for (int w = 0; w < kTiledBackwardWarps; ++w) sum += red_s[w * (width + 1) + k];
          tile_partials[k] = sum;
        }
      if (dx) {  // through x_s, to leave interleaved in coalesced stores
        consecutive_to_interleaved<Tile>(acc, x_s);
        store_tile<Tile, kUnitStride>(dx + j0 * step, step, n - j0, acc);
      }
    } else {
      // x over [j0 - H, j0 + T + H): the silu input at j needs x back to j - H.
      stage_row<Tile, kUnitStride>(x_s, x, step, j0, n, halo, p.silu ? halo : 0);
      stage_row<Tile, kUnitStride>(g_s, dy, step, j0, n, 0, halo);
      __syncthreads();
      if (p.silu) {
        for (int i = threadIdx.x; i < halo + kTileOutputs; i += Tile::kThreads) {
          float u = bias;
          for (int k = 0; k < width; ++k) u = fmaf(w_s[k], x_s[i + k * dil], u);  // x_s[H + i - (K-1-k)d]
          g_s[i] *= silu_derivative<T>(u);
        }
        __syncthreads();
      }

      if (dx) {
        float acc[Tile::kPerThread] = {};
#pragma unroll 2  // as in the forward: more unrolling only spills
        for (int k = 0; k < width; ++k) {
          const float wk = w_s[k];
          const float* gk = g_s + (width - 1 - k) * dil + threadIdx.x;
#pragma unroll
          for (int e = 0; e < Tile::kPerThread; ++e) acc[e] = fmaf(wk, gk[e * Tile::kThreads], acc[e]);
        }
        store_tile<Tile, kUnitStride>(dx + j0 * step, step, n - j0, acc);
      }

      if (tile_partials) {
        // Tile sums per tap: each thread over its interleaved outputs, then a fixed
        // shuffle tree per warp, then warps in order. Slot K holds the bias gradient.
        for (int k = 0; k <= width; ++k) {
          const float* xk = x_s + k * dil + threadIdx.x;  // x[j - (K-1-k)d]
          float s = 0.0f;
#pragma unroll
          for (int e = 0; e < Tile::kPerThread; ++e)
            s = fmaf(g_s[threadIdx.x + e * Tile::kThreads], k < width ? xk[e * Tile::kThreads] : 1.0f, s);
          s = warp_sum(s);
          if (lane == 0) red_s[warp * (width + 1) + k] = s;
        }
        __syncthreads();
        for (int k = threadIdx.x; k <= width; k += Tile::kThreads) {
          float s = 0.0f;
          for (int w = 0; w < kTiledBackwardWarps; ++w) s += red_s[w * (width + 1) + k];
          tile_partials[k] = s;
        }
      }
    }
  }
}

}  // namespace causalconv::detail
