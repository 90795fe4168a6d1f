// Launchers of the tensor-core depthwise forwards: the warpgroup-MMA form on sm_90a
// (depthwise_forward_wgmma_kernel.cuh) for 16-byte aligned rows, the mma.sync form
// (depthwise_forward_tc_kernel.cuh) otherwise.
#include <algorithm>

#include "causal_conv1d/depthwise_forward_tc_kernel.cuh"
#include "causal_conv1d/depthwise_forward_wgmma_kernel.cuh"
#include "causal_conv1d/depthwise_kernels.h"
#include "causal_conv1d/depthwise_tiling.cuh"
#include "common/cuda_runtime.h"

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

template <typename T, int kBlocks>
void launch_wgmma(const DepthwiseForwardParams& p, cudaStream_t stream) {
  using Tile = WgmmaToeplitzTile;
  constexpr int kSmem = DepthwiseWgmmaSmem<kBlocks>::kBytes;
  static_assert(kSmem <= 48 * 1024, "within the default dynamic shared memory limit");
  const int64_t tiles = (p.length + Tile::kOutputs - 1) / Tile::kOutputs;
  const int64_t tile_blocks = std::min((tiles + kTcTilesPerBlock - 1) / kTcTilesPerBlock, kMaxGridY);
  const dim3 grid(unsigned(p.batch * p.channels), unsigned(tile_blocks));
  depthwise_forward_wgmma_kernel<T, kBlocks><<<grid, Tile::kThreads, kSmem, stream>>>(p, tiles);
}

template <typename T>
void launch_wgmma_width(const DepthwiseForwardParams& p, cudaStream_t stream) {
  switch (toeplitz64_blocks(int(p.width))) {
    case 2: launch_wgmma<T, 2>(p, stream); break;  // K <= 65
    case 3: launch_wgmma<T, 3>(p, stream); break;  // K <= 129
    case 4: launch_wgmma<T, 4>(p, stream); break;  // K <= 193
    default: launch_wgmma<T, 5>(p, stream); break;  // K <= 256
  }
}

// The wgmma form from this width on. Measured side by side on the H200 (bf16 B1 D4096 L8192,
// docs/performance.md, session 14, both forms with the stmatrix epilogue): they tie from K9 to
// K33 (42-43 us), the wgmma form wins from there (K48 44.9 -> 42.5 us, K64 46.6 -> 42.7); session 8
// found it ahead from K65 (K128 0.058 against 0.064 ms, K256 79 against 94 us).
constexpr int64_t kWgmmaMinWidth = 33;

// The wgmma form reads and writes rows by 16-byte units: every row of x and y starts 16-byte
// aligned. It needs an sm_90a image and a compute capability 9.0 device.
bool wgmma_form_applies(const DepthwiseForwardParams& p) {
#ifdef CAUSALCONV_HAS_SM90A
  if (p.width < kWgmmaMinWidth) return false;
  auto aligned_rows = [&](const void* base, const int64_t* stride) {
    return reinterpret_cast<uintptr_t>(base) % 16 == 0 && (p.batch == 1 || stride[0] % 8 == 0) &&
           (p.channels == 1 || stride[1] % 8 == 0);
  };
  if (!aligned_rows(p.x, p.x_stride) || !aligned_rows(p.y, p.y_stride)) return false;
  return current_device_is_sm90("causal_conv1d forward");
#else
  (void)p;
  return false;
#endif
}

}  // namespace

bool try_launch_depthwise_forward_tc(const DepthwiseForwardParams& p, cudaStream_t stream) {
  if ((p.dtype != DType::f16 && p.dtype != DType::bf16) || p.dilation != 1 || p.width < kDepthwiseTcMinWidth ||
      p.width > kDepthwiseTcMaxWidth || p.x_stride[2] != 1 || p.y_stride[2] != 1 || p.length <= 0 ||
      p.batch * p.channels <= 0 || p.batch * p.channels > kMaxGridX)
    return false;
  const bool wgmma = wgmma_form_applies(p);
  if (p.dtype == DType::f16)
    wgmma ? launch_wgmma_width<__half>(p, stream) : launch_width<__half>(p, stream);
  else
    wgmma ? launch_wgmma_width<__nv_bfloat16>(p, stream) : launch_width<__nv_bfloat16>(p, stream);
  return true;
}

}  // namespace causalconv::detail
