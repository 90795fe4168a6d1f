// Depthwise causal conv on channel-last data (unit channel stride; x_blc.transpose(1, 2)):
// the forward, and the fused backward (dx plus per-block weight-gradient partials, reduced
// in a fixed order by depthwise_backward.cu).
//
// A block owns 128 channels of one sequence, lane l channels 4l..4l+3, so every warp
// access to a time step covers the block's 128 channels (256 or 512 contiguous bytes),
// and time tiles of 8 warps x kRun steps, warp w taking steps [w kRun, (w+1) kRun). It
// stages a tile's input steps plus the causal halo in shared memory as stored (raw 16-bit
// or fp32 values): 16-byte cp.async copies, all in flight at once, when rows are 16-byte
// aligned; element copies otherwise. Each thread then slides its taps down its run of
// steps: with the width a template argument and dilation 1, every staged step is read
// from shared memory and decoded once per thread. The 16-bit forward at K 2..8 (dilation 1)
// walks several tiles per block, staging the next while it computes one.
//
// Device code only (plus host-side sizing), so tests/cpp compiles it as host C++ under
// cuda_emulation.h and checks it on machines without a GPU.
#pragma once

#include <algorithm>
#include <cstdint>

#include "causal_conv1d/depthwise_kernels.h"
#include "common/async_copy.cuh"
#include "common/cuda_math.cuh"
#include "common/vector_access.cuh"

namespace causalconv::detail {

// Largest reach (K-1)*d staged as a halo (fp32: (255 + 64) steps x 512 bytes = 160 KB);
// beyond it the forward takes the direct kernel.
constexpr int64_t kMaxChannelLastReach = kMaxChannelLastBackwardReach;

struct ChannelLastTile {
  static constexpr int kThreads = 256;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kChannels = 32 * 4;  // per block: 4 per lane
  // Forward: the largest width kept in registers (templated); wider ones loop over taps.
  static constexpr int kMaxUnrolledWidth = 8;
  // Backward (dilation 1): widths with a kernel here; the rest take the general kernel.
  static constexpr int kMaxBackwardWidth = 4;
  // Backward: at most this many time tiles per block; fewer while the grid has fewer
  // than kMinBackwardBlocks blocks (fixed numbers: the partials' count and order, and so
  // the weight gradients' bits, depend only on the shape).
  static constexpr int64_t kMaxTilesPerBlock = 8;
  static constexpr int64_t kMinBackwardBlocks = 1024;
  // Pipelined forward (16-bit): at most this many time tiles per block (fewer while the grid has
  // fewer than kMinBackwardBlocks blocks).
  static constexpr int64_t kMaxForwardTilesPerBlock = 4;
};

// The 16-bit forward at dilation 1 and widths 2..8 runs on a two-tile ring: a block walks
// consecutive time tiles, its copies of tile i + 1 in flight while it computes tile i (the staged
// kernel waits for its one tile before any compute, so nothing overlaps a block's compute phase).
// H200, session 17, side by side with the staged kernel (bf16 B4 C4096 L8192 K4): 0.144 -> 0.142
// ms, with bias + silu 0.179 -> 0.174; 8 tiles per block instead of 4: 0.147 / 0.172. Not for fp32:
// 0.284 -> 0.322 ms (not profiled; likely fewer bytes in flight: the ring's 69 KB fit 3 blocks per
// SM, the staged kernel's 34 KB up to 6).
template <typename T>
inline bool channel_last_forward_pipelined(int64_t width, int64_t dilation) {
  return sizeof(T) == 2 && dilation == 1 && width >= 2 && width <= ChannelLastTile::kMaxUnrolledWidth;
}

// Steps per thread: 16 for 16-bit types, 8 for fp32 (tiles of 128 or 64 steps, 32 KB).
template <typename T>
constexpr int channel_last_run() {
  return sizeof(T) == 2 ? 16 : 8;
}
template <typename T>
constexpr int channel_last_tile_steps() {
  return ChannelLastTile::kWarps * channel_last_run<T>();
}

struct ChannelLastGrid {
  int64_t channel_tiles;    // ceil(C / 128)
  int64_t time_tiles;       // ceil(L / tile steps)
  int64_t tiles_per_block;  // time tiles walked by one block (forward: 1)
  int64_t ranges;           // blocks along a sequence: ceil(time_tiles / tiles_per_block)
  int64_t halo;             // (K-1) * d
  bool vectors;             // rows 16-byte aligned, C % Vec16 == 0: cp.async staging, quad stores
  int64_t blocks() const { return channel_tiles * ranges; }  // times the batch
};

template <typename T>
inline ChannelLastGrid make_channel_last_grid(int64_t batch, int64_t channels, int64_t length, int64_t width,
                                              int64_t dilation, bool vectors, bool backward) {
  ChannelLastGrid g{};
  g.channel_tiles = (channels + ChannelLastTile::kChannels - 1) / ChannelLastTile::kChannels;
  g.time_tiles = (length + channel_last_tile_steps<T>() - 1) / channel_last_tile_steps<T>();
  g.tiles_per_block = backward                                          ? ChannelLastTile::kMaxTilesPerBlock
                      : channel_last_forward_pipelined<T>(width, dilation) ? ChannelLastTile::kMaxForwardTilesPerBlock
                                                                        : 1;
  const auto ranges = [&] { return (g.time_tiles + g.tiles_per_block - 1) / g.tiles_per_block; };
  while (g.tiles_per_block > 1 && batch * g.channel_tiles * ranges() < ChannelLastTile::kMinBackwardBlocks)
    g.tiles_per_block /= 2;
  g.ranges = ranges();
  g.halo = (width - 1) * dilation;
  g.vectors = vectors && channels % Vec16<T>::kElems == 0;
  return g;
}

// Forward shared memory: weights [K][128] fp32 (unrolled widths only), then the input
// steps [halo + tile][128] as stored.
template <typename T>
inline size_t channel_last_forward_smem_bytes(int64_t width, int64_t halo) {
  const int64_t w = width <= ChannelLastTile::kMaxUnrolledWidth ? width : 0;
  return size_t(ChannelLastTile::kChannels) *
         (sizeof(float) * size_t(w) + sizeof(T) * size_t(halo + channel_last_tile_steps<T>()));
}

// Pipelined forward shared memory: weights [K][128] fp32, then two buffers of the input steps
// [K-1 + tile][128] as stored.
template <typename T>
inline size_t channel_last_forward_pipelined_smem_bytes(int64_t width) {
  return size_t(ChannelLastTile::kChannels) *
         (sizeof(float) * size_t(width) + sizeof(T) * 2 * size_t(width - 1 + channel_last_tile_steps<T>()));
}

// Backward shared memory (dilation 1, H = K-1): weights [K][128] fp32, x [H + tile + H][128]
// and dy [tile + H][128] as stored; after the last tile the per-warp weight-gradient sums
// [warps][K+1][128] fp32 reuse the x and dy space.
template <typename T>
inline size_t channel_last_backward_smem_bytes(int64_t width) {
  const int64_t halo = width - 1, tile = channel_last_tile_steps<T>();
  const size_t staged = sizeof(T) * size_t((tile + 2 * halo) + (tile + halo));
  const size_t sums = sizeof(float) * size_t(ChannelLastTile::kWarps * (width + 1));
  return size_t(ChannelLastTile::kChannels) * (sizeof(float) * size_t(width) + std::max(staged, sums));
}

#ifndef CAUSALCONV_CUDA_EMULATION
// The block's dynamic shared memory (16-byte aligned).
__device__ __forceinline__ float* channel_last_shared() {
  extern __shared__ float4 channel_last_smem[];
  return reinterpret_cast<float*>(channel_last_smem);
}
#endif

// dst[r][c] = src[(first + r) * t_stride + c] for r < rows, c < 128, as stored; zero for
// steps outside [0, n) and channels from valid_channels on. src: channel c0 of one sequence.
// Element by element (rows not 16-byte aligned).
template <typename T>
__device__ __forceinline__ void stage_channel_last_elements(T* dst, const T* src, int64_t t_stride, int64_t first,
                                                            int rows, int64_t n, int valid_channels) {
  constexpr int kC = ChannelLastTile::kChannels;
  for (int i = int(threadIdx.x); i < rows * kC; i += ChannelLastTile::kThreads) {
    const int r = i / kC, c = i % kC;
    const int64_t t = first + r;
    dst[r * kC + c] = t >= 0 && t < n && c < valid_channels ? src[t * t_stride + c] : from_float<T>(0.0f);
  }
}

// As stage_channel_last_elements; 16-byte cp.async copies when `vectors`, waited for here.
template <typename T>
__device__ __forceinline__ void stage_channel_last(T* dst, const T* src, int64_t t_stride, int64_t first, int rows,
                                                   int64_t n, int valid_channels, bool vectors) {
  constexpr int kC = ChannelLastTile::kChannels;
  if (vectors) {  // valid_channels is a multiple of the vector
    constexpr int kVec = Vec16<T>::kElems, kRowVectors = kC / kVec;
    for (int i = int(threadIdx.x); i < rows * kRowVectors; i += ChannelLastTile::kThreads) {
      const int r = i / kRowVectors, c = (i % kRowVectors) * kVec;
      const int64_t t = first + r;
      T* d = dst + r * kC + c;
      if (t >= 0 && t < n && c < valid_channels)
        copy_async16(d, src + t * t_stride + c);
      else
        *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
    }
    copy_async_wait_all();
  } else {
    stage_channel_last_elements(dst, src, t_stride, first, rows, n, valid_channels);
  }
}

// As stage_channel_last, but the vector copies stay in flight (this thread's cp.async group,
// committed by the caller; zero-filled outside the sequence and the block's channels); element
// staging (rows not 16-byte aligned) is done on return.
template <typename T>
__device__ __forceinline__ void issue_channel_last_stage(T* dst, const T* src, int64_t t_stride, int64_t first,
                                                         int rows, int64_t n, int valid_channels, bool vectors) {
  constexpr int kC = ChannelLastTile::kChannels;
  if (vectors) {  // valid_channels is a multiple of the vector
    constexpr int kVec = Vec16<T>::kElems, kRowVectors = kC / kVec;
    for (int i = int(threadIdx.x); i < rows * kRowVectors; i += ChannelLastTile::kThreads) {
      const int r = i / kRowVectors, c = (i % kRowVectors) * kVec;
      const int64_t t = first + r;
      const bool inside = t >= 0 && t < n && c < valid_channels;
      cp_async16(dst + r * kC + c, inside ? src + t * t_stride + c : src, inside ? 16 : 0);
    }
  } else {
    stage_channel_last_elements(dst, src, t_stride, first, rows, n, valid_channels);
  }
}

// A lane's 4 channels of one step; valid: how many of them exist (<= 0: none).
template <typename T>
__device__ __forceinline__ void store_channel_last(T* dst, const float (&v)[4], int valid, bool vectors) {
  if (vectors && valid >= 4) {
    store_quad(dst, v);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (i < valid) dst[i] = from_float<T>(v[i]);
  }
}

// Block b -> (batch, position along the sequence, channel tile), channel tiles fastest:
// neighbouring blocks read neighbouring channels of the same time steps.
struct ChannelLastBlock {
  int64_t batch, along, c0;
  int valid_channels;  // of the block's 128
};

__device__ __forceinline__ ChannelLastBlock locate_channel_last_block(const ChannelLastGrid& g, int64_t channels,
                                                                      int64_t along_count) {
  const int64_t block = blockIdx.x;
  const int64_t rest = div_nonneg(block, g.channel_tiles);
  const int64_t c0 = (block - rest * g.channel_tiles) * ChannelLastTile::kChannels;
  const int64_t b = div_nonneg(rest, along_count);
  return {b, rest - b * along_count, c0, int(std::min(int64_t(ChannelLastTile::kChannels), channels - c0))};
}

// Weights of the block's channels as w_s[k][128] in fp32 (zero past the last channel).
template <typename T, int kWidth>
__device__ __forceinline__ void stage_channel_last_weights(float* w_s, const void* weight, const int64_t (&stride)[2],
                                                           int64_t c0, int valid_channels) {
  const T* w = static_cast<const T*>(weight);
  for (int i = int(threadIdx.x); i < kWidth * ChannelLastTile::kChannels; i += ChannelLastTile::kThreads) {
    const int c = i / kWidth, k = i % kWidth;  // neighbouring threads: neighbouring taps of a channel
    w_s[k * ChannelLastTile::kChannels + c] =
        c < valid_channels ? to_float(w[(c0 + c) * stride[0] + k * stride[1]]) : 0.0f;
  }
}

template <typename T>
__device__ __forceinline__ void load_channel_last_bias(float (&bias)[4], const void* b, int64_t stride, int64_t c,
                                                       int valid) {
#pragma unroll
  for (int i = 0; i < 4; ++i) bias[i] = b && i < valid ? to_float(static_cast<const T*>(b)[(c + i) * stride]) : 0.0f;
}

// ---- forward ----
// One thread's run of kRun outputs of its 4 channels at dilation 1, taps and input window in
// registers: xr is the run's first staged row (K-1 rows before its first output), rows kC apart;
// outputs y, y + y_step, ...; only the first `steps` are stored (the rest lie past the sequence).
// A thread's 4 channels at the newest step of its K-step input window: slide the window one step
// (win[K-1] is then the caller's to fill), and the output bias + sum_k w[k] win[k], through silu.
template <int kWidth>
__device__ __forceinline__ void slide_quad_window(float (&win)[kWidth][4]) {
#pragma unroll
  for (int k = 0; k + 1 < kWidth; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) win[k][i] = win[k + 1][i];
}
template <typename T, int kWidth>
__device__ __forceinline__ void forward_quad(const float (&win)[kWidth][4], const float (&w)[kWidth][4],
                                             const float (&bias)[4], bool apply_silu, float (&out)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float acc = bias[i];
#pragma unroll
    for (int k = 0; k < kWidth; ++k) acc = fmaf(w[k][i], win[k][i], acc);
    out[i] = apply_silu ? silu<T>(acc) : acc;
  }
}

template <typename T, int kWidth>
__device__ __forceinline__ void channel_last_forward_run(const T* xr, T* y, int64_t y_step, int steps,
                                                         const float (&w)[kWidth][4], const float (&bias)[4],
                                                         bool apply_silu, int lane_valid, bool vectors) {
  constexpr int kC = ChannelLastTile::kChannels, kRun = channel_last_run<T>();
  float win[kWidth][4];  // win[k]: row s + k
#pragma unroll
  for (int k = 1; k < kWidth; ++k) load_quad(xr + (k - 1) * kC, win[k]);
#pragma unroll
  for (int s = 0; s < kRun; ++s) {
    slide_quad_window(win);
    load_quad(xr + (s + kWidth - 1) * kC, win[kWidth - 1]);
    float out[4];
    forward_quad<T>(win, w, bias, apply_silu, out);
    if (s < steps) store_channel_last(y + s * y_step, out, lane_valid, vectors);
  }
}

// The staged kernel: one tile per block, staged and waited for before any compute; the overlap of
// loads with compute comes from other blocks on the SM. Serves fp32 and the tap loop.
// kWidth > 0: that width with dilation 1, taps and the input window in registers.
// kWidth == 0: any width and dilation; taps in an outer loop, weights read per tap.
template <typename T, int kWidth>
__global__ void __launch_bounds__(ChannelLastTile::kThreads)
    depthwise_forward_channel_last(DepthwiseForwardParams p, ChannelLastGrid g) {
  using Tile = ChannelLastTile;
  constexpr int kC = Tile::kChannels, kRun = channel_last_run<T>(), kSteps = channel_last_tile_steps<T>();
  const int halo = int(g.halo);
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const ChannelLastBlock blk = locate_channel_last_block(g, p.channels, g.time_tiles);
  const int64_t t0 = blk.along * kSteps;
  float* w_s = channel_last_shared();                   // [kWidth][kC]
  T* x_s = reinterpret_cast<T*>(w_s + kWidth * kC);     // [halo + kSteps][kC]: step t0 - halo + r
  if constexpr (kWidth > 0) stage_channel_last_weights<T, kWidth>(w_s, p.weight, p.w_stride, blk.c0, blk.valid_channels);
  stage_channel_last(x_s, static_cast<const T*>(p.x) + blk.batch * p.x_stride[0] + blk.c0, p.x_stride[2],
                     t0 - halo, halo + kSteps, p.length, blk.valid_channels, g.vectors);
  __syncthreads();

  const int lane_valid = blk.valid_channels - 4 * lane;
  float bias[4];
  load_channel_last_bias<T>(bias, p.bias, p.bias_stride, blk.c0 + 4 * lane, lane_valid);
  const int j0 = warp * kRun;                    // this thread's first step in the tile
  const T* xr = x_s + j0 * kC + 4 * lane;  // output j0 + s, tap k: x_s row j0 + s + k d
  T* y = static_cast<T*>(p.y) + blk.batch * p.y_stride[0] + blk.c0 + 4 * lane + (t0 + j0) * p.y_stride[2];
  const int steps = int(std::min(int64_t(kRun), p.length - t0 - j0));  // outputs inside the sequence (may be <= 0)

  if constexpr (kWidth > 0) {
    float w[kWidth][4];
#pragma unroll
    for (int k = 0; k < kWidth; ++k)
#pragma unroll
      for (int i = 0; i < 4; ++i) w[k][i] = w_s[k * kC + 4 * lane + i];
    channel_last_forward_run<T, kWidth>(xr, y, p.y_stride[2], steps, w, bias, p.silu, lane_valid, g.vectors);
  } else {
    float acc[kRun][4];
#pragma unroll
    for (int s = 0; s < kRun; ++s)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[s][i] = bias[i];
    const T* weight = static_cast<const T*>(p.weight) + (blk.c0 + 4 * lane) * p.w_stride[0];
    const int dil = int(p.dilation);  // halo <= the launcher's reach limit, so this fits
#pragma unroll 1
    for (int k = 0; k < int(p.width); ++k) {
      float wk[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) wk[i] = i < lane_valid ? to_float(weight[i * p.w_stride[0] + k * p.w_stride[1]]) : 0.0f;
      const T* xk = xr + k * dil * kC;
#pragma unroll
      for (int s = 0; s < kRun; ++s) {
        float xv[4];
        load_quad(xk + s * kC, xv);
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[s][i] = fmaf(wk[i], xv[i], acc[s][i]);
      }
    }
#pragma unroll
    for (int s = 0; s < kRun; ++s) {
      if (p.silu) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[s][i] = silu<T>(acc[s][i]);
      }
      if (s < steps) store_channel_last(y + s * p.y_stride[2], acc[s], lane_valid, g.vectors);
    }
  }
}

// 16-bit, dilation 1, width kWidth in 2..8. Block = (batch, range of up to
// g.tiles_per_block time tiles, channel tile); tile i is staged into buffer i % 2 (its K-1 halo
// steps copied again, from L2) while tile i - 1 is computed from the other. Two 33 KB buffers per
// block: 3 blocks fill 207 of the SM's 228 KB, so registers are bounded for 3.
template <typename T, int kWidth>
__global__ void __launch_bounds__(ChannelLastTile::kThreads, 3)
    depthwise_forward_channel_last_pipelined(DepthwiseForwardParams p, ChannelLastGrid g) {
  using Tile = ChannelLastTile;
  constexpr int kC = Tile::kChannels, kRun = channel_last_run<T>(), kSteps = channel_last_tile_steps<T>();
  constexpr int kRows = kWidth - 1 + kSteps;  // a buffer: steps t0 - (K-1) .. t0 + kSteps - 1
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const ChannelLastBlock blk = locate_channel_last_block(g, p.channels, g.ranges);
  float* w_s = channel_last_shared();                // [kWidth][kC]
  T* x_s = reinterpret_cast<T*>(w_s + kWidth * kC);  // [2][kRows][kC]
  const T* x = static_cast<const T*>(p.x) + blk.batch * p.x_stride[0] + blk.c0;
  const int64_t first_tile = blk.along * g.tiles_per_block;
  const int64_t end_tile = std::min(g.time_tiles, first_tile + g.tiles_per_block);
  issue_channel_last_stage(x_s, x, p.x_stride[2], first_tile * kSteps - (kWidth - 1), kRows, p.length,
                           blk.valid_channels, g.vectors);
  cp_async_commit();
  stage_channel_last_weights<T, kWidth>(w_s, p.weight, p.w_stride, blk.c0, blk.valid_channels);
  __syncthreads();

  const int lane_valid = blk.valid_channels - 4 * lane;
  float bias[4], w[kWidth][4];
  load_channel_last_bias<T>(bias, p.bias, p.bias_stride, blk.c0 + 4 * lane, lane_valid);
#pragma unroll
  for (int k = 0; k < kWidth; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) w[k][i] = w_s[k * kC + 4 * lane + i];
  const int j0 = warp * kRun;  // this thread's first step in a tile
  T* const y_lane = static_cast<T*>(p.y) + blk.batch * p.y_stride[0] + blk.c0 + 4 * lane;

#pragma unroll 1
  for (int64_t tile = first_tile; tile < end_tile; ++tile) {
    const int buffer = int(tile - first_tile) & 1;
    if (tile + 1 < end_tile)  // the other buffer: read by the previous tile, released by its barrier below
      issue_channel_last_stage(x_s + (buffer ^ 1) * kRows * kC, x, p.x_stride[2], (tile + 1) * kSteps - (kWidth - 1),
                               kRows, p.length, blk.valid_channels, g.vectors);
    cp_async_commit();  // possibly empty: one group per tile either way
    cp_async_wait<1>();  // this thread's copies of this tile have landed
    __syncthreads();     // ... and every thread's

    const int64_t t0 = tile * kSteps;
    const T* xr = x_s + buffer * kRows * kC + j0 * kC + 4 * lane;  // output j0 + s, tap k: row j0 + s + k
    T* y = y_lane + (t0 + j0) * p.y_stride[2];
    const int steps = int(std::min(int64_t(kRun), p.length - t0 - j0));  // outputs inside the sequence
    channel_last_forward_run<T, kWidth>(xr, y, p.y_stride[2], steps, w, bias, p.silu, lane_valid, g.vectors);
    __syncthreads();  // every thread is done with this buffer before the next tile refills it
  }
}

// ---- the ring kernels' grid (below: the forward per lane, the backward per warp) ----
// A warp owns a tile of channels of one sequence and a run of time steps; 4 warps to a block,
// taken in order by the forward (the backward groups a block's warps by run: WarpRingGrid).
constexpr int kRingWarpsPerBlock = 4;

struct ChannelLastRingGrid {
  int64_t channel_tiles;  // ceil(C / channels per warp)
  int64_t runs;           // ceil(L / steps per run)
  int64_t warps;          // batch * runs * channel_tiles
  int64_t blocks() const { return (warps + kRingWarpsPerBlock - 1) / kRingWarpsPerBlock; }
};

inline ChannelLastRingGrid make_channel_last_ring_grid(int64_t batch, int64_t channels, int64_t length,
                                                       int64_t tile_channels, int64_t run_steps) {
  ChannelLastRingGrid g{};
  g.channel_tiles = (channels + tile_channels - 1) / tile_channels;
  g.runs = (length + run_steps - 1) / run_steps;
  g.warps = batch * g.runs * g.channel_tiles;
  return g;
}

// This thread's warp as (batch, run, first channel of its tile); false past the grid. Channel
// tiles fastest: neighbouring warps read neighbouring channels of the same steps.
struct RingWarp {
  int64_t batch, run, c0;
};
__device__ __forceinline__ bool locate_ring_warp(const ChannelLastRingGrid& g, int64_t tile_channels, RingWarp& w) {
  const int64_t warp = int64_t(blockIdx.x) * kRingWarpsPerBlock + threadIdx.x / 32;
  if (warp >= g.warps) return false;
  const int64_t rest = div_nonneg(warp, g.channel_tiles);
  w.c0 = (warp - rest * g.channel_tiles) * tile_channels;
  w.batch = div_nonneg(rest, g.runs);
  w.run = rest - w.batch * g.runs;
  return true;
}

// ---- forward on per-lane rings ----
// Dilation 1, K 2..8, 16-byte aligned rows and C a multiple of the 16-byte vector. A warp owns
// 32 vectors of channels (256 for 16-bit types, 128 for fp32) and a run of time steps; lane l
// copies and computes only its own vector of channels, so its ring in shared memory is its own:
// no barrier of any kind, each thread streams down its run with kChunks - 1 chunks of rows in
// flight while it computes one, and its K-step window carries from chunk to chunk in registers.
// The tile kernels above wait at block barriers between staging and compute, so silu's compute
// phase shows almost whole. ptxas (CUDA 13.0, no spills): bf16 K4 128 registers (4 blocks of 4
// warps per SM, 96 KB in flight), K8 197, fp32 K4 80. Measured (session 18, B4 C4096 L8192 K4,
// CUDA graphs): bf16 with bias and silu 0.159 ms against the two-tile ring's 0.174 (Dao 0.172);
// fp32 0.281 against the staged kernel's 0.284; bf16 without silu 0.147 against the two-tile
// ring's 0.143, which keeps the 16-bit calls without silu (runs of 64 or 256 steps and 6 ring
// slots: within 0.002 ms).

struct ChannelLastLaneRing {
  static constexpr int kThreads = 32 * kRingWarpsPerBlock;
  static constexpr int kChunkRows = 4;  // time steps per cp.async group
  static constexpr int kChunks = 4;     // ring slots of a lane
  static constexpr int kRows = kChunkRows * kChunks;
  static constexpr int kRunSteps = 128;  // time steps per warp (a multiple of kChunkRows)
  static constexpr int kMinBlocksPerSm = 0;  // __launch_bounds__' second argument (0: ptxas's choice)
};

// A warp's channels: 32 vectors.
template <typename T>
constexpr int lane_ring_channels() {
  return 32 * Vec16<T>::kElems;
}

template <typename T>
inline ChannelLastRingGrid make_lane_ring_grid(int64_t batch, int64_t channels, int64_t length) {
  return make_channel_last_ring_grid(batch, channels, length, lane_ring_channels<T>(), ChannelLastLaneRing::kRunSteps);
}

// vectors: x's and y's rows 16-byte aligned (and C a multiple of the vector).
template <typename T>
inline bool channel_last_forward_lane_ring(int64_t channels, int64_t width, int64_t dilation, bool vectors,
                                           bool silu) {
  return (silu || sizeof(T) == 4) && vectors && channels % Vec16<T>::kElems == 0 && dilation == 1 && width >= 2 &&
         width <= ChannelLastTile::kMaxUnrolledWidth;
}

constexpr size_t lane_ring_smem_bytes() {
  return size_t(kRingWarpsPerBlock) * ChannelLastLaneRing::kRows * 32 * 16;
}

template <typename T, int kWidth>
__global__ void __launch_bounds__(ChannelLastLaneRing::kThreads, ChannelLastLaneRing::kMinBlocksPerSm)
    depthwise_forward_channel_last_lane_ring(DepthwiseForwardParams p, ChannelLastRingGrid g) {
  using R = ChannelLastLaneRing;
  constexpr int kVec = Vec16<T>::kElems;
  const int lane = int(threadIdx.x) % 32;
  RingWarp rw;
  if (!locate_ring_warp(g, lane_ring_channels<T>(), rw)) return;  // no barriers below: a thread may leave alone
  const int64_t b = rw.batch, run = rw.run;
  const int64_t c = rw.c0 + lane * kVec;  // this lane's first channel
  const bool lane_valid = c < p.channels;                           // C % kVec == 0: all or none
  const int64_t n = p.length, t_begin = run * R::kRunSteps;
  const int steps = int(std::min(int64_t(R::kRunSteps), n - t_begin));
  const int chunks = (steps + R::kChunkRows - 1) / R::kChunkRows;
  const T* x = static_cast<const T*>(p.x) + b * p.x_stride[0] + (lane_valid ? c : 0);
  T* y = static_cast<T*>(p.y) + b * p.y_stride[0] + c;
  const int64_t x_step = p.x_stride[2], y_step = p.y_stride[2];
  // Row r of this lane's ring at ring[r * 32]: a warp's 32 vectors of a row are 512 contiguous bytes.
  uint4* const ring = reinterpret_cast<uint4*>(channel_last_shared()) + (threadIdx.x / 32) * R::kRows * 32 + lane;

  // Chunk q: steps t_begin + q kChunkRows .. + kChunkRows - 1 into slot q % kChunks (zero past
  // the sequence); always one group, empty past the run, so that the waits count evenly.
  const auto issue_chunk = [&](int q) {
    if (q < chunks) {
#pragma unroll
      for (int r = 0; r < R::kChunkRows; ++r) {
        const int64_t t = t_begin + int64_t(q) * R::kChunkRows + r;
        const bool inside = lane_valid && t < n;
        cp_async16(ring + ((q % R::kChunks) * R::kChunkRows + r) * 32, inside ? x + t * x_step : x, inside ? 16 : 0);
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int q = 0; q + 1 < R::kChunks; ++q) issue_chunk(q);

  float w[kWidth][kVec], bias[kVec];
  const T* weight = static_cast<const T*>(p.weight);
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
#pragma unroll
    for (int k = 0; k < kWidth; ++k)
      w[k][j] = lane_valid ? to_float(weight[(c + j) * p.w_stride[0] + k * p.w_stride[1]]) : 0.0f;
    bias[j] = lane_valid && p.bias ? to_float(static_cast<const T*>(p.bias)[(c + j) * p.bias_stride]) : 0.0f;
  }
  float win[kWidth][kVec];  // win[k]: x at step t - (K-1-k), t the newest step
#pragma unroll
  for (int k = 1; k < kWidth; ++k) {  // the K-1 steps before the run, straight from global memory
    const int64_t t = t_begin - (kWidth - k);
    if (lane_valid && t >= 0)
      load_vec16<T>(x + t * x_step, win[k]);
    else
#pragma unroll
      for (int j = 0; j < kVec; ++j) win[k][j] = 0.0f;
  }

#pragma unroll 1
  for (int q = 0; q < chunks; ++q) {
    issue_chunk(q + R::kChunks - 1);  // into the slot of chunk q - 1, which this thread has read
    cp_async_wait<R::kChunks - 1>();  // chunk q has landed
#pragma unroll
    for (int r = 0; r < R::kChunkRows; ++r) {
#pragma unroll
      for (int k = 0; k + 1 < kWidth; ++k)
#pragma unroll
        for (int j = 0; j < kVec; ++j) win[k][j] = win[k + 1][j];
      decode16<T>(ring[((q % R::kChunks) * R::kChunkRows + r) * 32], win[kWidth - 1]);
      float out[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        float acc = bias[j];
#pragma unroll
        for (int k = 0; k < kWidth; ++k) acc = fmaf(w[k][j], win[k][j], acc);
        out[j] = p.silu ? silu<T>(acc) : acc;
      }
      const int s = q * R::kChunkRows + r;
      if (lane_valid && s < steps) store_vec16<T>(y + (t_begin + s) * y_step, out);
    }
  }
  cp_async_wait<0>();  // no copy outlives the block's shared memory
}

// ---- backward (dilation 1, H = K-1) ----
// The dilation-1 backward's step for a thread's 4 channels, shared by its two kernels. Windows:
// xw[k] = x at step i - (K-1-k), gw[k] = g there, i the newest step.
template <int kWidth>
__device__ __forceinline__ void slide_backward_windows(float (&xw)[kWidth][4], float (&gw)[kWidth][4]) {
#pragma unroll
  for (int k = 0; k + 1 < kWidth; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      xw[k][i] = xw[k + 1][i];
      gw[k][i] = gw[k + 1][i];
    }
}

// gv: dy at step i (x at i in xw[K-1]) -> g[i] = dy[i] silu'(pre[i]), pushed into gw; with
// own_step, the weight gradients take g[i] x[i - (K-1-k)] (dw[K]: the bias gradient).
template <typename T, int kWidth, bool kSilu>
__device__ __forceinline__ void take_backward_step(float (&gv)[4], const float (&xw)[kWidth][4],
                                                   float (&gw)[kWidth][4], float (&dw)[kWidth + 1][4],
                                                   const float (&w)[kWidth][4], const float (&bias)[4],
                                                   bool own_step) {
  if (kSilu) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float pre = bias[i];
#pragma unroll
      for (int k = 0; k < kWidth; ++k) pre = fmaf(w[k][i], xw[k][i], pre);
      gv[i] *= silu_derivative<T>(pre);
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) gw[kWidth - 1][i] = gv[i];
  if (own_step) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int k = 0; k < kWidth; ++k) dw[k][i] = fmaf(gv[i], xw[k][i], dw[k][i]);
      dw[kWidth][i] += gv[i];
    }
  }
}

// dx at step i - (K-1): sum_k w[k] g[i - k].
template <int kWidth>
__device__ __forceinline__ void dx_from_g_window(const float (&w)[kWidth][4], const float (&gw)[kWidth][4],
                                                 float (&out)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < kWidth; ++k) acc = fmaf(w[k][i], gw[kWidth - 1 - k][i], acc);
    out[i] = acc;
  }
}

// A block walks g.tiles_per_block consecutive time tiles. Per tile it stages x over
// [t0 - H, t0 + tile + H) (the part after the tile only with silu: the pre-activation of
// g's look-ahead) and dy over [t0, t0 + tile + H). Each thread streams down its run:
// step i's x enters a K-step register window, g[i] = dy[i] * silu'(pre[i]) enters a
// K-step window of g, the weight gradients take g[i] * x[i - (K-1-k)] for i in the run,
// and dx[i - H] = sum_k w[k] g[i - k] once the window holds it. g is thus evaluated for
// kRun + H steps per kRun outputs (the look-ahead), with no second pass and no g in
// shared memory. The weight-gradient sums stay in registers across the tiles; at the end
// the block adds its 8 warps in order and writes one partial per (channel, tap) and bias.
template <typename T, int kWidth, bool kSilu>
__global__ void __launch_bounds__(ChannelLastTile::kThreads, 2)
    depthwise_backward_channel_last_unit(DepthwiseBackwardParams p, ChannelLastGrid g, float* partials) {
  using Tile = ChannelLastTile;
  constexpr int kC = Tile::kChannels, kRun = channel_last_run<T>(), kSteps = channel_last_tile_steps<T>();
  constexpr int kHalo = kWidth - 1;
  constexpr int kXRows = kHalo + kSteps + kHalo, kDyRows = kSteps + kHalo;
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const ChannelLastBlock blk = locate_channel_last_block(g, p.channels, g.ranges);
  float* w_s = channel_last_shared();                  // [kWidth][kC]
  T* x_s = reinterpret_cast<T*>(w_s + kWidth * kC);    // [kXRows][kC]: step t0 - H + r
  T* dy_s = x_s + kXRows * kC;                         // [kDyRows][kC]: step t0 + r
  stage_channel_last_weights<T, kWidth>(w_s, p.weight, p.w_stride, blk.c0, blk.valid_channels);
  __syncthreads();

  const int lane_valid = blk.valid_channels - 4 * lane;
  float w[kWidth][4], bias[4];
#pragma unroll
  for (int k = 0; k < kWidth; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) w[k][i] = w_s[k * kC + 4 * lane + i];
  load_channel_last_bias<T>(bias, p.bias, p.bias_stride, blk.c0 + 4 * lane, lane_valid);
  const T* x = static_cast<const T*>(p.x) + blk.batch * p.x_stride[0] + blk.c0;
  const T* dy = static_cast<const T*>(p.dy) + blk.batch * p.dy_stride[0] + blk.c0;
  T* dx = p.dx ? static_cast<T*>(p.dx) + blk.batch * p.dx_stride[0] + blk.c0 + 4 * lane : nullptr;
  const int j0 = warp * kRun;
  const T* xr = x_s + j0 * kC + 4 * lane;   // row j0 + r: x at step t0 + j0 - H + r
  const T* dyr = dy_s + j0 * kC + 4 * lane;  // row j0 + r: dy at step t0 + j0 + r

  float dw[kWidth + 1][4] = {};  // slot kWidth: the bias gradient
  const int64_t first_tile = blk.along * g.tiles_per_block;
  const int64_t end_tile = std::min(g.time_tiles, first_tile + g.tiles_per_block);
#pragma unroll 1
  for (int64_t tile = first_tile; tile < end_tile; ++tile) {
    const int64_t t0 = tile * kSteps;
    __syncthreads();  // the previous tile's reads are done
    stage_channel_last(x_s, x, p.x_stride[2], t0 - kHalo, kSilu ? kXRows : kXRows - kHalo, p.length,
                       blk.valid_channels, g.vectors);
    stage_channel_last(dy_s, dy, p.dy_stride[2], t0, kDyRows, p.length, blk.valid_channels, g.vectors);
    __syncthreads();

    const int steps = int(std::min(int64_t(kRun), p.length - t0 - j0));  // dx rows inside the sequence
    float xw[kWidth][4];      // xw[k]: x at step i - (K-1-k), i the newest step
    float gw[kWidth][4] = {};  // gw[k]: g at step i - (K-1-k)
#pragma unroll
    for (int k = 1; k < kWidth; ++k) load_quad(xr + (k - 1) * kC, xw[k]);
#pragma unroll
    for (int m = 0; m < kRun + kHalo; ++m) {  // newest step i = t0 + j0 + m
      slide_backward_windows(xw, gw);
      if (kSilu || m < kRun) load_quad(xr + (m + kHalo) * kC, xw[kWidth - 1]);
      float gv[4];
      load_quad(dyr + m * kC, gv);
      // step i is this thread's: weight gradients (zero past the sequence: dy was)
      take_backward_step<T, kWidth, kSilu>(gv, xw, gw, dw, w, bias, m < kRun);
      if (m >= kHalo && dx) {  // dx at step i - H: sum_k w[k] g[i - k]
        const int s = m - kHalo;
        float out[4];
        dx_from_g_window(w, gw, out);
        if (s < steps) store_channel_last(dx + (t0 + j0 + s) * p.dx_stride[2], out, lane_valid, g.vectors);
      }
    }
  }

  if (!partials) return;
  __syncthreads();  // done with x_s and dy_s: the warps' sums go there
  float* sums = w_s + kWidth * kC;  // [warps][kWidth + 1][kC]
#pragma unroll
  for (int k = 0; k <= kWidth; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) sums[(warp * (kWidth + 1) + k) * kC + 4 * lane + i] = dw[k][i];
  __syncthreads();
  const int64_t parts = p.batch * g.ranges, part = blk.batch * g.ranges + blk.along;
  for (int e = int(threadIdx.x); e < (kWidth + 1) * kC; e += Tile::kThreads) {
    const int c = e / (kWidth + 1), k = e % (kWidth + 1);  // neighbouring threads: neighbouring slots
    if (c >= blk.valid_channels) continue;
    float total = 0.0f;
#pragma unroll
    for (int v = 0; v < Tile::kWarps; ++v) total += sums[(v * (kWidth + 1) + k) * kC + c];
    partials[((blk.c0 + c) * parts + part) * (kWidth + 1) + k] = total;
  }
}

// ---- backward on per-warp rings ----
// Dilation 1, K 2..4, x, dy and dx with 16-byte aligned rows, C a multiple of the vector. A
// warp owns 128 channels (lane l: 4l..4l+3) and a run of kRunSteps dx steps; it streams x and dy
// down the run plus the K-1 steps after it (the look-ahead of dx, whose g it recomputes) through
// a ring of cp.async chunks, kChunks - 1 in flight while it computes one, and does what the unit
// kernel above does per step: g[i] = dy[i] silu'(pre[i]) into a K-step window, dx[i - (K-1)]
// out, g[i] x[i - (K-1-k)] into the weight-gradient sums. Only __syncwarp until the block adds
// its warps' sums. The unit kernel's block barriers between staging and compute are what its
// silu calls paid for: ncu (session 18, bf16 B4 C4096 L8192 K4) 330 us for the unit kernel with
// silu, 296 for this one. Measured as fwd+bwd minus fwd (same shape, CUDA graphs): bf16 with
// bias and silu 0.340 -> 0.242 ms, without 0.237 -> 0.223; fp32 0.421 -> 0.423. The unit kernel
// keeps unaligned rows and C not a multiple of the vector.
struct ChannelLastWarpRing {
  static constexpr int kThreads = 32 * kRingWarpsPerBlock;
  static constexpr int kChannels = 128;  // per warp, 4 per lane
  static constexpr int kChunkRows = 4;   // time steps per cp.async group
  static constexpr int kChunks = 4;      // ring slots
  static constexpr int kRows = kChunkRows * kChunks;
  static constexpr int kRunSteps = 128;  // dx steps per warp
  static constexpr int kMaxWidth = 4;
};

// A block's warps take kRingWarpsPerBlock consecutive runs of one channel tile (channel tiles
// fastest across blocks) and add their weight-gradient sums in order: one partial per channel,
// batch and run group. A partial per run (call 2 of session 18) made 21 MB of partials at
// B4 C4096 L8192, whose reduction cost more than the ring saved.
struct WarpRingGrid {
  int64_t channel_tiles;  // ceil(C / 128)
  int64_t run_groups;     // ceil(runs / kRingWarpsPerBlock)
  int64_t blocks;         // batch * run_groups * channel_tiles
};

inline WarpRingGrid make_warp_ring_grid(int64_t batch, int64_t channels, int64_t length) {
  const ChannelLastRingGrid runs = make_channel_last_ring_grid(batch, channels, length, ChannelLastWarpRing::kChannels,
                                                               ChannelLastWarpRing::kRunSteps);
  WarpRingGrid g{};
  g.channel_tiles = runs.channel_tiles;
  g.run_groups = (runs.runs + kRingWarpsPerBlock - 1) / kRingWarpsPerBlock;
  g.blocks = batch * g.run_groups * g.channel_tiles;
  return g;
}

// vectors: x's, dy's and dx's rows 16-byte aligned.
template <typename T>
inline bool channel_last_backward_warp_ring(int64_t channels, int64_t width, int64_t dilation, bool vectors) {
  return vectors && channels % Vec16<T>::kElems == 0 && dilation == 1 && width >= 2 &&
         width <= ChannelLastWarpRing::kMaxWidth;
}

// Per warp: one ring per tensor streamed (the backward's x and dy), kRows rows of 128 channels each.
template <typename T>
constexpr size_t warp_ring_smem_bytes(int tensors) {
  return size_t(kRingWarpsPerBlock) * tensors * ChannelLastWarpRing::kRows * ChannelLastWarpRing::kChannels *
         sizeof(T);
}

// Chunk q of a warp's rings, one per tensor: steps t_begin + q kChunkRows + r of its 128 channels
// from src[j] (rows stride[j] apart) into ring[j]'s rows (q % kChunks) kChunkRows + r, zero past the
// sequence and past the channels (C a multiple of the vector; c0 the warp's first). Lane l copies
// 16-byte vectors l, l + 32, ...: 16-bit rows take two lanes' quads per copy, so readers wait at a
// __syncwarp.
template <typename T, int kTensors>
__device__ __forceinline__ void copy_warp_ring_chunk(T* const (&ring)[kTensors], const T* const (&src)[kTensors],
                                                     const int64_t (&stride)[kTensors], int64_t t_begin, int q,
                                                     int64_t length, int64_t c0, int64_t channels, int lane) {
  using R = ChannelLastWarpRing;
  constexpr int kVec = Vec16<T>::kElems, kRowVectors = R::kChannels / kVec;  // 16-byte vectors per row
  constexpr int kChunkVectors = R::kChunkRows * kRowVectors;
  static_assert(kChunkVectors % 32 == 0, "whole copies per lane");
#pragma unroll
  for (int e = 0; e < kChunkVectors / 32; ++e) {
    const int v = e * 32 + lane, r = v / kRowVectors, col = (v % kRowVectors) * kVec;
    const int64_t t = t_begin + int64_t(q) * R::kChunkRows + r;
    const bool inside = t < length && c0 + col < channels;
    const int row = (q % R::kChunks) * R::kChunkRows + r;
#pragma unroll
    for (int j = 0; j < kTensors; ++j)
      cp_async16(ring[j] + row * R::kChannels + col, inside ? src[j] + t * stride[j] + col : src[j], inside ? 16 : 0);
  }
}

// Step q of a warp ring: chunk q + kChunks - 1 issued into the slot of chunk q - 1 once every lane
// is done with it, then chunk q landed for every lane (issue_chunk commits one group per call).
template <typename IssueChunk>
__device__ __forceinline__ void advance_warp_ring(const IssueChunk& issue_chunk, int q) {
  __syncwarp();
  issue_chunk(q + ChannelLastWarpRing::kChunks - 1);
  cp_async_wait<ChannelLastWarpRing::kChunks - 1>();
  __syncwarp();
}

// A warp-ring lane's taps w[k][i] of channels c + i (zero from lane_valid on), and the K-1 steps of
// its window before the run (win[k] = x at t_begin - (K-k) for k >= 1; zero before the sequence,
// or all zero when !load), straight from global memory.
template <typename T, int kWidth>
__device__ __forceinline__ void load_quad_taps(float (&w)[kWidth][4], const void* weight, const int64_t (&w_stride)[2],
                                               int64_t c, int lane_valid) {
#pragma unroll
  for (int k = 0; k < kWidth; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      w[k][i] =
          i < lane_valid ? to_float(static_cast<const T*>(weight)[(c + i) * w_stride[0] + k * w_stride[1]]) : 0.0f;
}
template <typename T, int kWidth>
__device__ __forceinline__ void load_window_before_run(float (&win)[kWidth][4], const T* x_lane, int64_t step_stride,
                                                       int64_t t_begin, bool load) {
#pragma unroll
  for (int k = 1; k < kWidth; ++k) {
    const int64_t t = t_begin - (kWidth - k);
    if (load && t >= 0)
      load_quad(x_lane + t * step_stride, win[k]);
    else
#pragma unroll
      for (int i = 0; i < 4; ++i) win[k][i] = 0.0f;
  }
}

template <typename T, int kWidth, bool kSilu>
__global__ void __launch_bounds__(ChannelLastWarpRing::kThreads)
    depthwise_backward_channel_last_warp_ring(DepthwiseBackwardParams p, WarpRingGrid g, float* partials) {
  using R = ChannelLastWarpRing;
  constexpr int kHalo = kWidth - 1;
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const int64_t rest = div_nonneg(int64_t(blockIdx.x), g.channel_tiles);
  const int64_t c0 = (int64_t(blockIdx.x) - rest * g.channel_tiles) * R::kChannels;
  const int64_t b = div_nonneg(rest, g.run_groups), group = rest - b * g.run_groups;
  const int lane_valid = int(std::min(int64_t(R::kChannels), p.channels - c0)) - 4 * lane;  // channels of the lane's 4
  const int64_t n = p.length, t_begin = (group * kRingWarpsPerBlock + warp) * R::kRunSteps;
  // dx steps of the run; none for a warp past the last run (it still joins the block's sum)
  const int steps = int(std::max(int64_t(0), std::min(int64_t(R::kRunSteps), n - t_begin)));
  const int chunks = steps > 0 ? (steps + kHalo + R::kChunkRows - 1) / R::kChunkRows : 0;  // the run and its look-ahead
  const T* x = static_cast<const T*>(p.x) + b * p.x_stride[0] + c0;
  const T* dy = static_cast<const T*>(p.dy) + b * p.dy_stride[0] + c0;
  T* dx = p.dx ? static_cast<T*>(p.dx) + b * p.dx_stride[0] + c0 + 4 * lane : nullptr;
  T* const x_ring = reinterpret_cast<T*>(channel_last_shared()) + (threadIdx.x / 32) * 2 * R::kRows * R::kChannels;
  T* const dy_ring = x_ring + R::kRows * R::kChannels;

  // Chunk q of x and dy; always one group (empty past the stream) so the waits count evenly.
  const auto issue_chunk = [&](int q) {
    if (q < chunks) {
      copy_warp_ring_chunk<T, 2>({x_ring, dy_ring}, {x, dy}, {p.x_stride[2], p.dy_stride[2]}, t_begin, q, n, c0,
                                 p.channels, lane);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int q = 0; q + 1 < R::kChunks; ++q) issue_chunk(q);

  float w[kWidth][4], bias[4];
  load_quad_taps<T>(w, p.weight, p.w_stride, c0 + 4 * lane, lane_valid);
  load_channel_last_bias<T>(bias, p.bias, p.bias_stride, c0 + 4 * lane, lane_valid);
  float xw[kWidth][4];       // xw[k]: x at step i - (K-1-k), i the newest step
  float gw[kWidth][4] = {};  // gw[k]: g at step i - (K-1-k)
  load_window_before_run(xw, x + 4 * lane, p.x_stride[2], t_begin, lane_valid > 0 && steps > 0);

  float dw[kWidth + 1][4] = {};  // slot kWidth: the bias gradient
#pragma unroll 1
  for (int q = 0; q < chunks; ++q) {
    advance_warp_ring(issue_chunk, q);
#pragma unroll
    for (int r = 0; r < R::kChunkRows; ++r) {
      const int m = q * R::kChunkRows + r;  // newest step i = t_begin + m
      const int row = (q % R::kChunks) * R::kChunkRows + r;
      slide_backward_windows(xw, gw);
      load_quad(x_ring + row * R::kChannels + 4 * lane, xw[kWidth - 1]);
      float gv[4];
      load_quad(dy_ring + row * R::kChannels + 4 * lane, gv);
      // step i is this run's: weight gradients (zero past the sequence: dy was)
      take_backward_step<T, kWidth, kSilu>(gv, xw, gw, dw, w, bias, m < steps);
      const int s = m - kHalo;  // dx at step i - H: sum_k w[k] g[i - k]
      if (dx && s >= 0 && s < steps) {
        float out[4];
        dx_from_g_window(w, gw, out);
        store_channel_last(dx + (t_begin + s) * p.dx_stride[2], out, lane_valid, true);
      }
    }
  }
  cp_async_wait<0>();  // no copy outlives the block's shared memory
  if (!partials) return;
  // The warps' sums over the drained rings, then added in warp order: the run order.
  __syncthreads();
  float* const sums = reinterpret_cast<float*>(channel_last_shared());  // [warps][kWidth + 1][128]
  static_assert(
      size_t(kRingWarpsPerBlock) * (kWidth + 1) * R::kChannels * sizeof(float) <= warp_ring_smem_bytes<T>(2),
      "the sums fit in the rings");
#pragma unroll
  for (int k = 0; k <= kWidth; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) sums[(warp * (kWidth + 1) + k) * R::kChannels + 4 * lane + i] = dw[k][i];
  __syncthreads();
  const int64_t parts = p.batch * g.run_groups, part = b * g.run_groups + group;
  const int valid_channels = int(std::min(int64_t(R::kChannels), p.channels - c0));
  for (int e = int(threadIdx.x); e < (kWidth + 1) * R::kChannels; e += R::kThreads) {
    const int c = e / (kWidth + 1), k = e % (kWidth + 1);  // neighbouring threads: neighbouring slots
    if (c >= valid_channels) continue;
    float total = 0.0f;
#pragma unroll
    for (int v = 0; v < kRingWarpsPerBlock; ++v) total += sums[(v * (kWidth + 1) + k) * R::kChannels + c];
    partials[((c0 + c) * parts + part) * (kWidth + 1) + k] = total;
  }
}

}  // namespace causalconv::detail
