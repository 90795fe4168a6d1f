// Launchers of the fused b2b_causal_conv1d backward (the kernels: b2b_backward_kernel.cuh).
#include "b2b/b2b_backward_kernel.cuh"
#include "b2b/b2b_kernels.h"
#include "b2b/b2b_tiling.cuh"
#include "common/cuda_runtime.h"

namespace causalconv::detail {
namespace {

using Tile = B2BBackwardTile;

int64_t parts_per_channel(const B2BBackwardParams& p) {
  return p.batch * make_b2b_tiling(p.length, Tile::kOutputs, kB2BBackwardTilesPerBlock).tile_blocks;
}

template <typename T>
void launch_typed(const B2BBackwardParams& p, float* partials, cudaStream_t stream) {
  const B2BTiling tiling = make_b2b_tiling(p.length, Tile::kOutputs, kB2BBackwardTilesPerBlock);
  if (p.batch > 0 && tiling.tiles > 0) {  // else dx is empty and the weight gradients are zero
    const size_t smem = sizeof(float) * size_t(b2b_backward_smem_floats(p.proj_width, p.mixer_width));
    if (smem > 48 * 1024)
      check_cuda(
          cudaFuncSetAttribute(b2b_backward_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
          "b2b_causal_conv1d backward (shared-memory opt-in)");
    const dim3 grid(unsigned(p.batch * p.dim), unsigned(tiling.tile_blocks));
    b2b_backward_kernel<T><<<grid, Tile::kThreads, smem, stream>>>(p, tiling, partials);
    check_launch("b2b_causal_conv1d backward");
  }
  b2b_weight_grad_reduce<T><<<unsigned(p.dim), Tile::kThreads, 0, stream>>>(p, parts_per_channel(p), partials);
  check_launch("b2b_causal_conv1d backward (weight-gradient reduction)");
}

}  // namespace

size_t b2b_backward_workspace_bytes(const B2BBackwardParams& p) {
  return sizeof(float) *
         size_t(p.dim * parts_per_channel(p) * b2b_backward_slots(p.proj_width, p.mixer_width));
}

void launch_b2b_backward(const B2BBackwardParams& p, void* workspace, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  float* partials = static_cast<float*>(workspace);
  switch (p.dtype) {
    case DType::f32: launch_typed<float>(p, partials, s); break;
    case DType::f16: launch_typed<__half>(p, partials, s); break;
    case DType::bf16: launch_typed<__nv_bfloat16>(p, partials, s); break;
    case DType::f64: break;  // rejected by validation
  }
}

}  // namespace causalconv::detail
