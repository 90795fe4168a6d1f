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

template <typename T, int kMaxBlocks>
void launch(const DepthwiseBackwardParams& p, float* partials, cudaStream_t stream) {
  const int64_t tiles = (p.length + ToeplitzTile::kOutputs - 1) / ToeplitzTile::kOutputs;
  const int64_t tile_blocks = std::min((tiles + kTcTilesPerBlock - 1) / kTcTilesPerBlock, kMaxGridY);
  const dim3 grid(unsigned(p.batch * p.channels), unsigned(tile_blocks));
  constexpr int smem = DepthwiseTcBackwardSmem<kMaxBlocks>::kBytes;
  allow_dynamic_shared_memory(depthwise_backward_tc_kernel<T, kMaxBlocks, kToeplitzNonFiniteGuard>, smem,
                              "causal_conv1d backward (depthwise, tensor cores)");
  depthwise_backward_tc_kernel<T, kMaxBlocks, kToeplitzNonFiniteGuard>
      <<<grid, ToeplitzTile::kThreads, smem, stream>>>(p, tiles, partials);
}

template <typename T>
void launch_width(const DepthwiseBackwardParams& p, float* partials, cudaStream_t stream) {
  with_toeplitz_max_blocks(p.width,
                           [&](auto max_blocks) { launch<T, decltype(max_blocks)::value>(p, partials, stream); });
}

}  // namespace

bool try_launch_depthwise_backward_tc(const DepthwiseBackwardParams& p, float* partials, CUstream_st* stream) {
  if ((p.dtype != DType::f16 && p.dtype != DType::bf16) || p.dilation != 1 || p.width < kDepthwiseTcMinWidth ||
      p.width > kDepthwiseTcMaxWidth || p.x_stride[2] != 1 || p.dy_stride[2] != 1 || (p.dx && p.dx_stride[2] != 1) ||
      p.length <= 0 || p.batch * p.channels <= 0 || p.batch * p.channels > kMaxGridX)
    return false;
  if (p.dtype == DType::f16)
    launch_width<__half>(p, partials, stream);
  else
    launch_width<__nv_bfloat16>(p, partials, stream);
  return true;
}

}  // namespace causalconv::detail
