// Launcher of the fused b2b_causal_conv1d forward (the kernel: b2b_forward_kernel.cuh).
#include "b2b/b2b_forward_kernel.cuh"
#include "b2b/b2b_kernels.h"
#include "b2b/b2b_tiling.cuh"
#include "common/cuda_runtime.h"

namespace causalconv::detail {
namespace {

using Tile = B2BForwardTile;

template <typename T>
void launch_typed(const B2BForwardParams& p, cudaStream_t stream) {
  const B2BTiling tiling = make_b2b_tiling(p.length, Tile::kOutputs, kB2BForwardTilesPerBlock);
  const size_t smem = sizeof(float) * size_t(b2b_forward_smem_floats(p.proj_width, p.mixer_width));
  if (smem > 48 * 1024)
    check_cuda(cudaFuncSetAttribute(b2b_forward_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
               "b2b_causal_conv1d forward (shared-memory opt-in)");
  const dim3 grid(unsigned(p.batch * p.dim), unsigned(tiling.tile_blocks));
  b2b_forward_kernel<T><<<grid, Tile::kThreads, smem, stream>>>(p, tiling);
}

}  // namespace

void launch_b2b_forward(const B2BForwardParams& p, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  switch (p.dtype) {
    case DType::f32: launch_typed<float>(p, s); break;
    case DType::f16: launch_typed<__half>(p, s); break;
    case DType::bf16: launch_typed<__nv_bfloat16>(p, s); break;
    case DType::f64: return;  // rejected by validation
  }
  check_launch("b2b_causal_conv1d forward");
}

}  // namespace causalconv::detail
