// Launcher of the tensor-core depthwise backward (the kernel: depthwise_backward_tc_kernel.cuh).
#include <algorithm>

#include "causal_conv1d/depthwise_backward_tc_kernel.cuh"
#include "causal_conv1d/depthwise_kernels.h"
#include "causal_conv1d/depthwise_tiling.cuh"
#include "common/cuda_runtime.h"

namespace causalconv::detail {
namespace {

// Tiles walked by one block: the filter's fragments are built once per block.
constexpr int64_t kTcTilesPerBlock = 8;

// The tensor-core backward takes 16-bit rows of unit time stride at dilation 1, widths
// kDepthwiseTcMinWidth .. kDepthwiseTcMaxWidth.
bool tc_backward_applies(const DepthwiseBackwardParams& p) {
  return (p.dtype == DType::f16 || p.dtype == DType::bf16) && p.dilation == 1 && p.width >= kDepthwiseTcMinWidth &&
         p.width <= kDepthwiseTcMaxWidth && p.x_stride[2] == 1 && p.dy_stride[2] == 1 &&
         (!p.dx || p.dx_stride[2] == 1) && p.length > 0 && p.batch * p.channels > 0 &&
         p.batch * p.channels <= kMaxGridX;
}

// Every row of x, dy and dx starts 16-byte aligned.
bool rows_aligned(const DepthwiseBackwardParams& p) {
  return rows_16byte_aligned(p.x, p.x_stride, p.batch, p.channels, 2) &&
         rows_16byte_aligned(p.dy, p.dy_stride, p.batch, p.channels, 2) &&
         (!p.dx || rows_16byte_aligned(p.dx, p.dx_stride, p.batch, p.channels, 2));
}

// Tiles a row: rows off the 16-byte boundary may be walked from the one before them
// (kToeplitzShiftedRows).
int64_t walk_tiles(const DepthwiseBackwardParams& p) {
  return (toeplitz_walk_length(p.length, rows_aligned(p), 2) + ToeplitzTile::kOutputs - 1) / ToeplitzTile::kOutputs;
}

template <typename T, int kMaxBlocks>
void launch(const DepthwiseBackwardParams& p, int64_t tiles, float* partials, cudaStream_t stream) {
  const int64_t tile_blocks = std::min((tiles + kTcTilesPerBlock - 1) / kTcTilesPerBlock, kMaxGridY);
  const dim3 grid(unsigned(p.batch * p.channels), unsigned(tile_blocks));
  constexpr int smem = DepthwiseTcBackwardSmem<kMaxBlocks>::kBytes;
  with_row_walk(rows_aligned(p), [&](auto shifted) {
    auto* const kernel = depthwise_backward_tc_kernel<T, kMaxBlocks, kToeplitzNonFiniteGuard, decltype(shifted)::value>;
    allow_dynamic_shared_memory(kernel, smem, "causal_conv1d backward (depthwise, tensor cores)");
    kernel<<<grid, ToeplitzTile::kThreads, smem, stream>>>(p, tiles, partials);
  });
}

template <typename T>
void launch_width(const DepthwiseBackwardParams& p, float* partials, cudaStream_t stream) {
  const int64_t tiles = walk_tiles(p);
  with_toeplitz_max_blocks(
      p.width, [&](auto max_blocks) { launch<T, decltype(max_blocks)::value>(p, tiles, partials, stream); });
}

}  // namespace

int64_t depthwise_backward_tc_tiles(const DepthwiseBackwardParams& p) {
  return tc_backward_applies(p) ? walk_tiles(p) : 0;
}

bool try_launch_depthwise_backward_tc(const DepthwiseBackwardParams& p, float* partials, CUstream_st* stream) {
  if (!tc_backward_applies(p)) return false;
  if (p.dtype == DType::f16)
    launch_width<__half>(p, partials, stream);
  else
    launch_width<__nv_bfloat16>(p, partials, stream);
  return true;
}

}  // namespace causalconv::detail
