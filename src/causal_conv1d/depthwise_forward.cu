// Depthwise causal conv forward. Four kernels, picked in launch_typed:
//
// Window kernel (depthwise_window_kernels.cuh; channel-first rows, 16-byte aligned,
// dilation 1, K <= 8): each thread loads 16-byte vectors of inputs plus their halos into
// registers and slides the K taps over them (K is a template argument).
// Channel-last kernel (stride(1) == 1, reach <= kMaxChannelLastReach): a block stages a
// time tile x 128 channels plus the causal halo in shared memory; each thread slides the
// taps down a run of steps of 4 channels (depthwise_channel_last_kernel.cuh). 16-bit types at
// K 2..8, dilation 1: a block walks several tiles on a two-tile ring instead.
// Tiled kernel (other rows with unit time stride; depthwise_tiled_kernels.cuh): a block
// stages one time tile of one sequence plus its causal halo in shared memory as fp32, then makes
// its outputs by a tap loop or, at dilation 1, from a register window of the staged row.
// Direct kernel (anything else, e.g. channel-last data with a longer reach): one output
// per thread, threads walking the unit-stride dim.
#include <algorithm>

#include "causal_conv1d/depthwise_channel_last_kernel.cuh"
#include "causal_conv1d/depthwise_direct.cuh"
#include "causal_conv1d/depthwise_kernels.h"
#include "causal_conv1d/depthwise_tiled_kernels.cuh"
#include "causal_conv1d/depthwise_tiling.cuh"
#include "causal_conv1d/depthwise_window_kernels.cuh"
#include "common/cuda_math.cuh"
#include "common/cuda_runtime.h"
#include "common/vector_access.cuh"
#include "common/width_dispatch.h"

namespace causalconv::detail {
namespace {

using Tile = ForwardTile;

template <typename T, int kWidth, bool kShifted>
void launch_window(const DepthwiseForwardParams& p, cudaStream_t stream) {
  const int64_t spans_per_row = window_spans_per_row<T, kShifted>(p.length, forward_window_span<T>());
  const int64_t spans = p.batch * p.channels * spans_per_row;
  const unsigned blocks = unsigned((spans + kWarpsPerBlock - 1) / kWarpsPerBlock);
  depthwise_forward_window<T, kWidth, kShifted><<<blocks, kVectorThreads, 0, stream>>>(p, spans_per_row, spans);
}

template <typename T, bool kShifted>
void launch_window_width(const DepthwiseForwardParams& p, cudaStream_t stream) {
  with_width<2, kMaxWindowWidth>(p.width, [&](auto k) { launch_window<T, decltype(k)::value, kShifted>(p, stream); });
}

template <typename T>
bool try_launch_window(const DepthwiseForwardParams& p, bool channel_last, cudaStream_t stream) {
  if (channel_last || p.dilation != 1 || p.width < 2 || p.width > kMaxWindowWidth || p.x_stride[2] != 1 ||
      p.y_stride[2] != 1)
    return false;
  const bool aligned = vector_aligned<T>(p.x, p.x_stride, 2) && vector_aligned<T>(p.y, p.y_stride, 2);
  const bool shifted = !aligned && vector_shifts_match<T>(p.x, p.x_stride, p.y, p.y_stride, 2);
  if (!aligned && !shifted) return false;
  const int64_t spans = p.batch * p.channels *
                        (aligned ? window_spans_per_row<T, false>(p.length, forward_window_span<T>())
                                 : window_spans_per_row<T, true>(p.length, forward_window_span<T>()));
  if (spans / kWarpsPerBlock >= kMaxGridX) return false;
  if (aligned)
    launch_window_width<T, false>(p, stream);
  else
    launch_window_width<T, true>(p, stream);
  return true;
}

// ---- channel-last kernel (depthwise_channel_last_kernel.cuh) ----
template <typename T, int kWidth>
void launch_channel_last(const DepthwiseForwardParams& p, const ChannelLastGrid& g, cudaStream_t stream) {
  // kWidth > 0 only at dilation 1: for 16-bit types, channel_last_forward_pipelined<T> holds (and
  // sized the grid); the staged kernel is not instantiated for them.
  if constexpr (kWidth > 0 && sizeof(T) == 2) {
    const size_t smem = channel_last_forward_pipelined_smem_bytes<T>(kWidth);
    allow_dynamic_shared_memory(depthwise_forward_channel_last_pipelined<T, kWidth>, smem,
                                "causal_conv1d forward (depthwise, channel-last)");
    depthwise_forward_channel_last_pipelined<T, kWidth>
        <<<unsigned(p.batch * g.blocks()), ChannelLastTile::kThreads, smem, stream>>>(p, g);
  } else {
    const size_t smem = channel_last_forward_smem_bytes<T>(kWidth, g.halo);
    allow_dynamic_shared_memory(depthwise_forward_channel_last<T, kWidth>, smem,
                                "causal_conv1d forward (depthwise, channel-last)");
    depthwise_forward_channel_last<T, kWidth>
        <<<unsigned(p.batch * g.blocks()), ChannelLastTile::kThreads, smem, stream>>>(p, g);
  }
}

// The lane ring: a grid of warps, fixed shared memory.
template <typename T, int kWidth>
void launch_lane_ring(const DepthwiseForwardParams& p, const ChannelLastRingGrid& g, cudaStream_t stream) {
  constexpr size_t smem = lane_ring_smem_bytes();
  allow_dynamic_shared_memory(depthwise_forward_channel_last_lane_ring<T, kWidth>, smem,
                              "causal_conv1d forward (depthwise, channel-last)");
  depthwise_forward_channel_last_lane_ring<T, kWidth>
      <<<unsigned(g.blocks()), ChannelLastLaneRing::kThreads, smem, stream>>>(p, g);
}

template <typename T>
bool try_launch_lane_ring(const DepthwiseForwardParams& p, const ChannelLastRingGrid& g, cudaStream_t stream) {
  return g.blocks() <= kMaxGridX &&
         with_width<2, ChannelLastTile::kMaxUnrolledWidth>(
             p.width, [&](auto k) { launch_lane_ring<T, decltype(k)::value>(p, g, stream); });
}

// Unit channel stride of x and y and reach (K-1)*d <= kMaxChannelLastReach (the staged
// halo); any alignment (unaligned rows or C % Vec16 != 0 stage element by element).
template <typename T>
bool try_launch_channel_last(const DepthwiseForwardParams& p, bool channel_last, cudaStream_t stream) {
  if (!channel_last || (p.width - 1) * p.dilation > kMaxChannelLastReach) return false;
  const int64_t strides_x[2] = {p.x_stride[0], p.x_stride[2]}, strides_y[2] = {p.y_stride[0], p.y_stride[2]};
  const bool vectors = vector_aligned<T>(p.x, strides_x, 2) && vector_aligned<T>(p.y, strides_y, 2);
  if (channel_last_forward_lane_ring<T>(p.channels, p.width, p.dilation, vectors, p.silu) &&
      try_launch_lane_ring<T>(p, make_lane_ring_grid<T>(p.batch, p.channels, p.length), stream))
    return true;
  const ChannelLastGrid g =
      make_channel_last_grid<T>(p.batch, p.channels, p.length, p.width, p.dilation, vectors, false);
  if (p.batch * g.blocks() > kMaxGridX) return false;
  if (p.dilation != 1 || p.width > ChannelLastTile::kMaxUnrolledWidth) {
    launch_channel_last<T, 0>(p, g, stream);
    return true;
  }
  return with_width<2, ChannelLastTile::kMaxUnrolledWidth>(
      p.width, [&](auto k) { launch_channel_last<T, decltype(k)::value>(p, g, stream); });
}

// ---- direct kernel ----
constexpr int kDirectThreads = 256;

// A grid row is one (b, c) sequence (threads walk time) or, for channel-last data,
// one (b, t) step (threads walk channels).
template <typename T, bool channel_last>
__global__ void __launch_bounds__(kDirectThreads) depthwise_forward_direct(DepthwiseForwardParams p) {
  const T* x = static_cast<const T*>(p.x);
  const T* w = static_cast<const T*>(p.weight);
  const T* bias = static_cast<const T*>(p.bias);
  T* y = static_cast<T*>(p.y);
  const int64_t rows = channel_last ? p.batch * p.length : p.batch * p.channels;
  const int64_t cols = channel_last ? p.channels : p.length;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t b = div_nonneg(row, channel_last ? p.length : p.channels);
    const int64_t row_minor = row - b * (channel_last ? p.length : p.channels);
    for (int64_t col = int64_t(blockIdx.y) * kDirectThreads + threadIdx.x; col < cols;
         col += int64_t(gridDim.y) * kDirectThreads) {
      const int64_t c = channel_last ? col : row_minor;
      const int64_t t = channel_last ? row_minor : col;
      const T* xc = x + b * p.x_stride[0] + c * p.x_stride[1];
      const float acc = depthwise_direct_output(xc, p.x_stride[2], w + c * p.w_stride[0], p.w_stride[1], p.width,
                                                p.dilation, t, bias ? to_float(bias[c * p.bias_stride]) : 0.0f, p.silu);
      y[b * p.y_stride[0] + c * p.y_stride[1] + t * p.y_stride[2]] = from_float<T>(acc);
    }
  }
}

template <typename T>
void launch_typed(const DepthwiseForwardParams& p, cudaStream_t stream) {
  if (try_launch_depthwise_forward_tc(p, stream)) return;  // 16-bit, dilation 1, K >= 9: tensor cores
  const bool channel_last = p.x_stride[1] == 1 && p.y_stride[1] == 1 && p.channels > 1;
  const bool unit_time_stride = p.x_stride[2] == 1 && p.y_stride[2] == 1;
  if (try_launch_window<T>(p, channel_last, stream) || try_launch_channel_last<T>(p, channel_last, stream)) return;
  const DepthwiseTiling tiling =
      make_depthwise_tiling(p.batch, p.channels, p.length, p.width, p.dilation, kForwardTilesPerBlock);
  if (unit_time_stride && !channel_last && tiling.sequences <= kMaxGridX) {
    const bool register_window = tiled_register_window_applies(tiling, p.width, false);
    const size_t smem =
        sizeof(float) * size_t(tiled_forward_smem(int(p.width), int(tiling.halo), register_window).total_words());
    const dim3 grid(unsigned(tiling.sequences), unsigned(tiling.tile_blocks));
    with_tiled_variant(tiling, register_window, [&](auto unit_stride, auto window) {
      auto* const kernel = depthwise_forward_tiled<T, decltype(unit_stride)::value, decltype(window)::value>;
      allow_dynamic_shared_memory(kernel, smem, "causal_conv1d forward (depthwise)");
      kernel<<<grid, Tile::kThreads, smem, stream>>>(p, tiling);
    });
    return;
  }
  const int64_t rows = channel_last ? p.batch * p.length : p.batch * p.channels;
  const int64_t cols = channel_last ? p.channels : p.length;
  const dim3 grid(unsigned(std::min(rows, kMaxGridX)),
                  unsigned(std::min((cols + kDirectThreads - 1) / kDirectThreads, kMaxGridY)));
  if (channel_last)
    depthwise_forward_direct<T, true><<<grid, kDirectThreads, 0, stream>>>(p);
  else
    depthwise_forward_direct<T, false><<<grid, kDirectThreads, 0, stream>>>(p);
}

}  // namespace

void launch_depthwise_forward(const DepthwiseForwardParams& p, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  switch (p.dtype) {
    case DType::f32: launch_typed<float>(p, s); break;
    case DType::f16: launch_typed<__half>(p, s); break;
    case DType::bf16: launch_typed<__nv_bfloat16>(p, s); break;
    case DType::f64: break;  // rejected by validation
  }
  check_launch("causal_conv1d forward (depthwise)");
}

}  // namespace causalconv::detail
