// Depthwise causal conv backward, fused: one pass over x and dy per tile gives dx,
// and per-tile partial sums of dweight and dbias; a second small kernel reduces the
// partials in a fixed order, so weight gradients are bitwise deterministic.
//
// Per block (sequence, tile [j0, j0+T)), with H = (K-1)*d:
//   g[j]  = dy[j] * silu'(pre[j])             for j in [j0, j0+T+H)   (dx needs the future)
//   dx[j] = sum_k w[k] g[j + (K-1-k)d]          for j in the tile
//   dw[k] += sum_j g[j] x[j - (K-1-k)d],  db += sum_j g[j]   over the tile
// The tiled kernel (rows no other kernel takes): depthwise_tiled_kernels.cuh.
#include <algorithm>

#include "causal_conv1d/depthwise_channel_last_kernel.cuh"
#include "causal_conv1d/depthwise_kernels.h"
#include "causal_conv1d/depthwise_tiled_kernels.cuh"
#include "causalconv/error.h"
#include "causal_conv1d/depthwise_tiling.cuh"
#include "causal_conv1d/depthwise_weight_grad_reduce.cuh"
#include "causal_conv1d/depthwise_window_kernels.cuh"
#include "common/cuda_math.cuh"
#include "common/cuda_runtime.h"
#include "common/vector_access.cuh"
#include "common/width_dispatch.h"

namespace causalconv::detail {
namespace {

using Tile = BackwardTile;

// ---- channel-last kernels: x, dy, dx with unit channel stride ----
// Dilation 1 and K <= ChannelLastTile::kMaxBackwardWidth: depthwise_backward_channel_last_unit
// (depthwise_channel_last_kernel.cuh; 128 channels x time tiles staged by cp.async, a
// register window per thread). Otherwise, reach up to kMaxChannelLastBackwardReach, the
// general kernel below.
//
// General kernel: a block owns 32 channels (one per lane: each row of a tile is one coalesced access)
// and kChannelLastSteps time steps of one sequence; its 8 warps interleave over time.
// It stages x (with the causal halo before and, for silu, after) and g = dy * silu'
// (with the look-ahead halo) in shared memory, writes dx, and writes the tile's
// weight-gradient partials in the layout the ordered reduction reads.
constexpr int kChannelLastThreads = 256;
constexpr int kChannelLastChannels = 32;
constexpr int kChannelLastSteps = 128;
constexpr int kChannelLastWarps = kChannelLastThreads / 32;

struct ChannelLastTiling {
  int64_t halo;        // (K-1) * d
  int64_t time_tiles;  // per sequence
  int64_t channel_tiles;
};

inline ChannelLastTiling make_channel_last_tiling(const DepthwiseBackwardParams& p) {
  return {(p.width - 1) * p.dilation, (p.length + kChannelLastSteps - 1) / kChannelLastSteps,
          (p.channels + kChannelLastChannels - 1) / kChannelLastChannels};
}

// w[32][K] | x[H + T + H][32] | g[T + H][32] | per-warp sums[8][32], in floats.
inline size_t channel_last_smem_bytes(const DepthwiseBackwardParams& p, int64_t halo) {
  const int64_t rows = (2 * halo + kChannelLastSteps) + (kChannelLastSteps + halo);
  return sizeof(float) * size_t(kChannelLastChannels * (p.width + rows + kChannelLastWarps));
}

template <typename T>
__global__ void __launch_bounds__(kChannelLastThreads)
    depthwise_backward_channel_last(DepthwiseBackwardParams p, ChannelLastTiling tiling, float* partials) {
  extern __shared__ float smem[];
  constexpr int kC = kChannelLastChannels, kT = kChannelLastSteps;
  const int width = int(p.width), halo = int(tiling.halo), dil = int(p.dilation);
  const int x_rows = 2 * halo + kT, g_rows = kT + halo;
  float* w_s = smem;                   // [kC][K]
  float* x_s = w_s + kC * width;       // [x_rows][kC]: x[t0 - H + r]
  float* g_s = x_s + x_rows * kC;      // [g_rows][kC]: g[t0 + r]
  float* red_s = g_s + g_rows * kC;    // [warps][kC]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t c0 = int64_t(blockIdx.x) * kC;
  const int64_t c = c0 + lane;
  const bool live = c < p.channels;
  const int64_t n = p.length;

  for (int i = threadIdx.x; i < kC * width; i += kChannelLastThreads) {
    const int64_t cc = c0 + i / width;
    w_s[i] = cc < p.channels
                 ? to_float(static_cast<const T*>(p.weight)[cc * p.w_stride[0] + (i % width) * p.w_stride[1]])
                 : 0.0f;
  }
  const float bias = p.bias && live ? to_float(static_cast<const T*>(p.bias)[c * p.bias_stride]) : 0.0f;
  const float* w_c = w_s + lane * width;
  const int x_needed = p.silu ? x_rows : halo + kT;  // silu needs x after the tile for g's halo
  const int64_t parts_per_channel = p.batch * tiling.time_tiles;

  // One (sequence, time tile) pair after another: grid.y is capped at 65535.
  for (int64_t part = blockIdx.y; part < parts_per_channel; part += gridDim.y) {
    const int64_t b = div_nonneg(part, tiling.time_tiles);
    const int64_t t0 = (part - b * tiling.time_tiles) * kT;
    const T* x = static_cast<const T*>(p.x) + b * p.x_stride[0] + c;
    const T* dy = static_cast<const T*>(p.dy) + b * p.dy_stride[0] + c;
    __syncthreads();  // the previous tile is done with the shared buffers (and w_s is written)
    for (int r = warp; r < x_needed; r += kChannelLastWarps) {
      const int64_t t = t0 - halo + r;
      x_s[r * kC + lane] = live && t >= 0 && t < n ? to_float(x[t * p.x_stride[2]]) : 0.0f;
    }
    for (int r = warp; r < g_rows; r += kChannelLastWarps) {
      const int64_t t = t0 + r;
      g_s[r * kC + lane] = live && t < n ? to_float(dy[t * p.dy_stride[2]]) : 0.0f;
    }
    __syncthreads();
    if (p.silu) {
      for (int r = warp; r < g_rows; r += kChannelLastWarps) {
        float u = bias;
        for (int k = 0; k < width; ++k) u = fmaf(w_c[k], x_s[(r + halo - (width - 1 - k) * dil) * kC + lane], u);
        g_s[r * kC + lane] *= silu_derivative<T>(u);
      }
      __syncthreads();
    }
    if (p.dx && live) {
      T* dx = static_cast<T*>(p.dx) + b * p.dx_stride[0] + c;
      for (int r = warp; r < kT && t0 + r < n; r += kChannelLastWarps) {
        float acc = 0.0f;
        for (int k = 0; k < width; ++k) acc = fmaf(w_c[k], g_s[(r + (width - 1 - k) * dil) * kC + lane], acc);
        dx[(t0 + r) * p.dx_stride[2]] = from_float<T>(acc);
      }
    }
    if (partials) {
      // Tap k of channel c: sum over the tile of g[t] * x[t - (K-1-k)d]; slot K is the bias.
      // Each warp sums its interleaved steps, then warp 0 adds the warps in order.
      for (int k = 0; k <= width; ++k) {
        const int shift = k < width ? halo - (width - 1 - k) * dil : 0;
        float sum = 0.0f;
        for (int r = warp; r < kT; r += kChannelLastWarps)
          sum = fmaf(g_s[r * kC + lane], k < width ? x_s[(r + shift) * kC + lane] : 1.0f, sum);
        red_s[warp * kC + lane] = sum;
        __syncthreads();
        if (warp == 0 && live) {
          float total = 0.0f;
          for (int v = 0; v < kChannelLastWarps; ++v) total += red_s[v * kC + lane];
          partials[(c * parts_per_channel + part) * (width + 1) + k] = total;
        }
        __syncthreads();
      }
    }
  }
}

template <typename T>
bool channel_last_applies(const DepthwiseBackwardParams& p) {
  const ChannelLastTiling t = make_channel_last_tiling(p);
  return p.x_stride[1] == 1 && p.dy_stride[1] == 1 && (!p.dx || p.dx_stride[1] == 1) && p.channels > 1 &&
         t.halo <= kMaxChannelLastBackwardReach && t.channel_tiles <= kMaxGridX;
}

// x's, dy's and dx's channel-last rows all 16-byte aligned.
template <typename T>
bool channel_last_vectors(const DepthwiseBackwardParams& p) {
  const int64_t sx[2] = {p.x_stride[0], p.x_stride[2]}, sdy[2] = {p.dy_stride[0], p.dy_stride[2]},
                sdx[2] = {p.dx_stride[0], p.dx_stride[2]};
  return vector_aligned<T>(p.x, sx, 2) && vector_aligned<T>(p.dy, sdy, 2) && (!p.dx || vector_aligned<T>(p.dx, sdx, 2));
}

template <typename T>
ChannelLastGrid channel_last_unit_grid(const DepthwiseBackwardParams& p) {
  return make_channel_last_grid<T>(p.batch, p.channels, p.length, p.width, p.dilation, channel_last_vectors<T>(p),
                                   true);
}

// Only with channel_last_applies: the per-warp ring kernel's conditions, a grid that fits.
template <typename T>
bool channel_last_warp_ring_applies(const DepthwiseBackwardParams& p) {
  return channel_last_backward_warp_ring<T>(p.channels, p.width, p.dilation, channel_last_vectors<T>(p)) &&
         make_warp_ring_grid(p.batch, p.channels, p.length).blocks <= kMaxGridX;
}

template <typename T, int kWidth>
void launch_channel_last_warp_ring(const DepthwiseBackwardParams& p, float* partials, cudaStream_t stream) {
  const WarpRingGrid g = make_warp_ring_grid(p.batch, p.channels, p.length);
  constexpr size_t smem = warp_ring_smem_bytes<T>(2);
  auto kernel = p.silu ? depthwise_backward_channel_last_warp_ring<T, kWidth, true>
                       : depthwise_backward_channel_last_warp_ring<T, kWidth, false>;
  allow_dynamic_shared_memory(kernel, smem, "causal_conv1d backward (depthwise, channel-last)");
  kernel<<<unsigned(g.blocks), ChannelLastWarpRing::kThreads, smem, stream>>>(p, g, partials);
}

// Only with channel_last_applies: dilation 1, a width with a kernel, a grid that fits.
template <typename T>
bool channel_last_unit_applies(const DepthwiseBackwardParams& p) {
  return p.dilation == 1 && p.width <= ChannelLastTile::kMaxBackwardWidth &&
         p.batch * channel_last_unit_grid<T>(p).blocks() <= kMaxGridX;
}

template <typename T, int kWidth>
void launch_channel_last_unit(const DepthwiseBackwardParams& p, const ChannelLastGrid& g, float* partials,
                              cudaStream_t stream) {
  const size_t smem = channel_last_backward_smem_bytes<T>(kWidth);
  auto kernel = p.silu ? depthwise_backward_channel_last_unit<T, kWidth, true>
                       : depthwise_backward_channel_last_unit<T, kWidth, false>;
  allow_dynamic_shared_memory(kernel, smem, "causal_conv1d backward (depthwise, channel-last)");
  kernel<<<unsigned(p.batch * g.blocks()), ChannelLastTile::kThreads, smem, stream>>>(p, g, partials);
}

template <typename T>
void launch_channel_last(const DepthwiseBackwardParams& p, float* partials, cudaStream_t stream) {
  if (channel_last_warp_ring_applies<T>(p)) {
    with_width<2, ChannelLastWarpRing::kMaxWidth>(
        p.width, [&](auto k) { launch_channel_last_warp_ring<T, decltype(k)::value>(p, partials, stream); });
    return;
  }
  if (channel_last_unit_applies<T>(p)) {
    const ChannelLastGrid g = channel_last_unit_grid<T>(p);
    with_width<2, ChannelLastTile::kMaxBackwardWidth>(
        p.width, [&](auto k) { launch_channel_last_unit<T, decltype(k)::value>(p, g, partials, stream); });
    return;
  }
  const ChannelLastTiling t = make_channel_last_tiling(p);
  const size_t smem = channel_last_smem_bytes(p, t.halo);
  allow_dynamic_shared_memory(depthwise_backward_channel_last<T>, smem,
                              "causal_conv1d backward (depthwise, channel-last)");
  const dim3 grid(unsigned(t.channel_tiles), unsigned(std::min(p.batch * t.time_tiles, kMaxGridY)));
  depthwise_backward_channel_last<T><<<grid, kChannelLastThreads, smem, stream>>>(p, t, partials);
}

// Which rows the window kernel takes: none, 16-byte aligned ones, or (kShifted) rows that start
// the same distance past a 16-byte boundary in x, dy and dx.
enum class WindowRows { none, aligned, shifted };

// The window kernel's runs per row, and its spans per run.
struct WindowGrid {
  int64_t runs_per_row;
  int spans_per_run;
};

template <typename T>
WindowGrid window_grid(const DepthwiseBackwardParams& p, WindowRows rows) {
  const int64_t span = backward_ring_span<T>();
  const int64_t spans_per_row = rows == WindowRows::shifted ? window_spans_per_row<T, true>(p.length, span)
                                                            : window_spans_per_row<T, false>(p.length, span);
  const int64_t run = backward_ring_spans_per_run(p.batch * p.channels, spans_per_row);
  return {(spans_per_row + run - 1) / run, int(run)};
}

template <typename T>
WindowRows window_rows(const DepthwiseBackwardParams& p) {
  if (p.dilation != 1 || p.width > kMaxWindowWidth || p.x_stride[2] != 1 || p.dy_stride[2] != 1 ||
      (p.dx && p.dx_stride[2] != 1))
    return WindowRows::none;
  const bool aligned = vector_aligned<T>(p.x, p.x_stride, 2) && vector_aligned<T>(p.dy, p.dy_stride, 2) &&
                       (!p.dx || vector_aligned<T>(p.dx, p.dx_stride, 2));
  const bool shifted = !aligned && vector_shifts_match<T>(p.x, p.x_stride, p.dy, p.dy_stride, 2) &&
                       (!p.dx || vector_shifts_match<T>(p.x, p.x_stride, p.dx, p.dx_stride, 2));
  const WindowRows rows = aligned ? WindowRows::aligned : shifted ? WindowRows::shifted : WindowRows::none;
  if (rows != WindowRows::none && p.batch * p.channels * window_grid<T>(p, rows).runs_per_row / kWarpsPerBlock >= kMaxGridX)
    return WindowRows::none;
  return rows;
}

template <typename T, int kWidth, bool kShifted>
void launch_window(const DepthwiseBackwardParams& p, float* partials, cudaStream_t stream) {
  const WindowGrid grid = window_grid<T>(p, kShifted ? WindowRows::shifted : WindowRows::aligned);
  const int64_t warps = p.batch * p.channels * grid.runs_per_row;
  const unsigned blocks = unsigned((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
  if (p.silu) {
    depthwise_backward_window<T, kWidth, kShifted, true><<<blocks, kVectorThreads, backward_ring_smem_bytes(), stream>>>(
        p, grid.runs_per_row, warps, grid.spans_per_run, partials);
    return;
  }
  depthwise_backward_window<T, kWidth, kShifted><<<blocks, kVectorThreads, backward_ring_smem_bytes(), stream>>>(
      p, grid.runs_per_row, warps, grid.spans_per_run, partials);
}

template <typename T, bool kShifted>
void launch_window_width(const DepthwiseBackwardParams& p, float* partials, cudaStream_t stream) {
  with_width<2, kMaxWindowWidth>(p.width,
                                 [&](auto k) { launch_window<T, decltype(k)::value, kShifted>(p, partials, stream); });
}

template <typename T>
void launch_window(const DepthwiseBackwardParams& p, WindowRows rows, float* partials, cudaStream_t stream) {
  if (rows == WindowRows::aligned)
    launch_window_width<T, false>(p, partials, stream);
  else
    launch_window_width<T, true>(p, partials, stream);
}

template <typename T>
int64_t parts_per_channel(const DepthwiseBackwardParams& p) {
  if (channel_last_applies<T>(p))
    return p.batch * (channel_last_warp_ring_applies<T>(p)
                          ? make_warp_ring_grid(p.batch, p.channels, p.length).run_groups
                      : channel_last_unit_applies<T>(p) ? channel_last_unit_grid<T>(p).ranges
                                                        : make_channel_last_tiling(p).time_tiles);
  if (const WindowRows rows = window_rows<T>(p); rows != WindowRows::none)
    return p.batch * window_grid<T>(p, rows).runs_per_row;
  if (const int64_t tiles = depthwise_backward_tc_tiles(p); tiles > 0) return p.batch * tiles;
  const DepthwiseTiling t =
      make_depthwise_tiling(p.batch, p.channels, p.length, p.width, p.dilation, kBackwardTilesPerBlock);
  return p.batch * t.residues * t.tiles;
}

template <typename T>
void launch_reduce(const DepthwiseBackwardParams& p, float* partials, cudaStream_t stream) {
  if (!partials) return;
  const int64_t blocks = weight_grad_reduce_blocks(p);  // C * (K + 1) / 256: far below the grid's limit
  if (blocks == 0) return;
  depthwise_weight_grad_reduce<T><<<unsigned(blocks), kReduceThreads, 0, stream>>>(p, parts_per_channel<T>(p),
                                                                                    partials);
  check_launch("causal_conv1d backward (depthwise weight-gradient reduction)");
}

template <typename T>
void launch_typed(const DepthwiseBackwardParams& p, float* partials, cudaStream_t stream) {
  if (channel_last_applies<T>(p)) {
    if (p.batch * p.length > 0) {
      launch_channel_last<T>(p, partials, stream);
      check_launch("causal_conv1d backward (depthwise, channel-last)");
    }
    launch_reduce<T>(p, partials, stream);
    return;
  }
  if (const WindowRows rows = window_rows<T>(p); rows != WindowRows::none) {
    if (p.batch * p.channels * p.length > 0) {
      launch_window<T>(p, rows, partials, stream);
      check_launch("causal_conv1d backward (depthwise)");
    }
    launch_reduce<T>(p, partials, stream);
    return;
  }
  if (try_launch_depthwise_backward_tc(p, partials, stream)) {  // 16-bit, dilation 1, K >= 9: tensor cores
    check_launch("causal_conv1d backward (depthwise, tensor cores)");
    launch_reduce<T>(p, partials, stream);
    return;
  }
  const DepthwiseTiling tiling =
      make_depthwise_tiling(p.batch, p.channels, p.length, p.width, p.dilation, kBackwardTilesPerBlock);
  const bool register_window = tiled_register_window_applies(tiling, p.width, true);
  const size_t smem =
      sizeof(float) * size_t(tiled_backward_smem(int(p.width), int(tiling.halo), register_window).total_words());
  if (tiling.sequences > kMaxGridX)
    throw Error(ErrorKind::not_implemented, "causal_conv1d backward: more than 2^31-1 (batch, channel) rows");
  if (tiling.sequences > 0 && tiling.tiles > 0) {  // else dx is empty and the weight gradients are zero
    const dim3 grid(unsigned(tiling.sequences), unsigned(tiling.tile_blocks));
    with_tiled_variant(tiling, register_window, [&](auto unit_stride, auto window) {
      auto* const kernel = depthwise_backward_tiled<T, decltype(unit_stride)::value, decltype(window)::value>;
      allow_dynamic_shared_memory(kernel, smem, "causal_conv1d backward (depthwise)");
      kernel<<<grid, Tile::kThreads, smem, stream>>>(p, tiling, partials);
    });
    check_launch("causal_conv1d backward (depthwise)");
  }
  launch_reduce<T>(p, partials, stream);
}

template <typename T>
size_t workspace_bytes(const DepthwiseBackwardParams& p) {
  return sizeof(float) * size_t(p.channels * parts_per_channel<T>(p) * (p.width + 1));
}

}  // namespace

size_t depthwise_backward_workspace_bytes(const DepthwiseBackwardParams& p) {
  if (!p.dweight && !p.dbias) return 0;
  switch (p.dtype) {
    case DType::f32: return workspace_bytes<float>(p);
    case DType::f16: return workspace_bytes<__half>(p);
    case DType::bf16: return workspace_bytes<__nv_bfloat16>(p);
    case DType::f64: break;  // rejected by validation
  }
  return 0;
}

bool depthwise_backward_takes_channel_last(const DepthwiseBackwardParams& p) {
  switch (p.dtype) {
    case DType::f32: return channel_last_applies<float>(p);
    case DType::f16: return channel_last_applies<__half>(p);
    case DType::bf16: return channel_last_applies<__nv_bfloat16>(p);
    case DType::f64: break;  // rejected by validation
  }
  return false;
}

void launch_depthwise_backward(const DepthwiseBackwardParams& p, void* workspace, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  float* partials = (p.dweight || p.dbias) ? static_cast<float*>(workspace) : nullptr;
  switch (p.dtype) {
    case DType::f32: launch_typed<float>(p, partials, s); break;
    case DType::f16: launch_typed<__half>(p, partials, s); break;
    case DType::bf16: launch_typed<__nv_bfloat16>(p, partials, s); break;
    case DType::f64: break;  // rejected by validation
  }
}

}  // namespace causalconv::detail
