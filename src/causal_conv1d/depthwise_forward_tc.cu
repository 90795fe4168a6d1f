// Launcher of the tensor-core depthwise forward (the kernel: depthwise_forward_tc_kernel.cuh).
#include <algorithm>

#include "causal_conv1d/depthwise_forward_tc_kernel.cuh"
#include "causal_conv1d/depthwise_kernels.h"
#include "causal_conv1d/depthwise_tiling.cuh"

namespace causalconv::detail {
namespace {

// Tiles walked by one block: the Toeplitz fragments are built once per block.
constexpr int64_t kTcTilesPerBlock = 8;

template <typename T, int kMaxBlocks>
void launch(const DepthwiseForwardParams& p, cudaStream_t stream) {
  const int64_t tiles = (p.length + ToeplitzTile::kOutputs - 1) / ToeplitzTile::kOutputs;
  const int64_t tile_blocks = std::min((tiles + kTcTilesPerBlock - 1) / kTcTilesPerBlock, kMaxGridY);
  const dim3 grid(unsigned(p.batch * p.channels), unsigned(tile_blocks));
  depthwise_forward_tc_kernel<T, kMaxBlocks>
      <<<grid, ToeplitzTile::kThreads, depthwise_tc_smem_bytes<kMaxBlocks>(), stream>>>(p, tiles);
}

template <typename T>
void launch_width(const DepthwiseForwardParams& p, cudaStream_t stream) {
  const int blocks = toeplitz_blocks(int(p.width));
  if (blocks <= 3)
    launch<T, 3>(p, stream);  // K <= 32
  else if (blocks <= 5)
    launch<T, 5>(p, stream);  // K <= 64
  else if (blocks <= 9)
    launch<T, 9>(p, stream);  // K <= 128
  else
    launch<T, 17>(p, stream);  // K <= 256
}

}  // namespace

bool try_launch_depthwise_forward_tc(const DepthwiseForwardParams& p, cudaStream_t stream) {
  if ((p.dtype != DType::f16 && p.dtype != DType::bf16) || p.dilation != 1 || p.width < kDepthwiseTcMinWidth ||
      p.width > kDepthwiseTcMaxWidth || p.x_stride[2] != 1 || p.y_stride[2] != 1 || p.length <= 0 ||
      p.batch * p.channels <= 0 || p.batch * p.channels > kMaxGridX)
    return false;
  if (p.dtype == DType::f16)
    launch_width<__half>(p, stream);
  else
    launch_width<__nv_bfloat16>(p, stream);
  return true;
}

}  // namespace causalconv::detail
