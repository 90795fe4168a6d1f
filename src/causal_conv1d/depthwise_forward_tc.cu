// Launchers of the tensor-core depthwise forwards: on sm_90a the warpgroup-MMA forms
// (depthwise_forward_wgmma_kernel.cuh) for 16-byte aligned rows, streamed by TMA when the rows are
// whole 64-step chunks; the mma.sync form (depthwise_forward_tc_kernel.cuh) otherwise; fp32 by tf32
// MMAs split three ways (depthwise_forward_tf32_kernel.cuh; on warpgroup MMA,
// depthwise_forward_wgmma_tf32_kernel.cuh).
#include <algorithm>

#include "causal_conv1d/depthwise_forward_tc_kernel.cuh"
#include "causal_conv1d/depthwise_forward_tf32_kernel.cuh"
#include "causal_conv1d/depthwise_forward_wgmma_kernel.cuh"
#include "causal_conv1d/depthwise_forward_wgmma_tf32_kernel.cuh"
#include "causal_conv1d/depthwise_kernels.h"
#include "causal_conv1d/depthwise_tiling.cuh"
#include "common/cuda_runtime.h"
#include "common/tensor_map.h"

namespace causalconv::detail {
namespace {

// Tiles walked by one block: the Toeplitz fragments are built once per block.
constexpr int64_t kTcTilesPerBlock = 8;

int elem_bytes(const DepthwiseForwardParams& p) { return p.dtype == DType::f32 ? 4 : 2; }

// Every row of x and y starts 16-byte aligned.
bool rows_aligned(const DepthwiseForwardParams& p) {
  return rows_16byte_aligned(p.x, p.x_stride, p.batch, p.channels, elem_bytes(p)) &&
         rows_16byte_aligned(p.y, p.y_stride, p.batch, p.channels, elem_bytes(p));
}

// Every row of x lies the same distance past a 16-byte boundary as its row of y, so a walk from
// the boundary before them (kToeplitzShiftedRows) has 16-byte units of both.
bool rows_share_lead(const DepthwiseForwardParams& p) {
  const int64_t per_unit = 16 / elem_bytes(p);
  auto same = [&](int64_t a, int64_t b) { return (a - b) % per_unit == 0; };
  return (reinterpret_cast<uintptr_t>(p.x) & 15) == (reinterpret_cast<uintptr_t>(p.y) & 15) &&
         (p.batch == 1 || same(p.x_stride[0], p.y_stride[0])) &&
         (p.channels == 1 || same(p.x_stride[1], p.y_stride[1]));
}

// The row-walking forms' grid: a block column per (b, c) row, blocks along the row each walking up
// to kTcTilesPerBlock of its `tiles` tiles of tile_outputs steps. The forwards tile the row's own
// length: a row walked from the 16-byte boundary before it (kToeplitzShiftedRows) has up to a unit's
// values minus one steps past them, its tail, which the block that walked the last tile computes
// (depthwise_walk_tail; common/toeplitz_mma.cuh, toeplitz_walk_length, says why).
struct RowTileGrid {
  int64_t tiles;
  dim3 grid;
};
RowTileGrid row_tile_grid(const DepthwiseForwardParams& p, int tile_outputs) {
  const int64_t tiles = (p.length + tile_outputs - 1) / tile_outputs;
  const int64_t tile_blocks = std::min((tiles + kTcTilesPerBlock - 1) / kTcTilesPerBlock, kMaxGridY);
  return {tiles, dim3(unsigned(p.batch * p.channels), unsigned(tile_blocks))};
}

template <typename T, int kMaxBlocks>
void launch(const DepthwiseForwardParams& p, cudaStream_t stream) {
  const RowTileGrid g = row_tile_grid(p, ToeplitzTile::kOutputs);
  with_row_walk(rows_aligned(p), [&](auto shifted) {
    depthwise_forward_tc_kernel<T, kMaxBlocks, kToeplitzNonFiniteGuard, decltype(shifted)::value>
        <<<g.grid, ToeplitzTile::kThreads, depthwise_tc_smem_bytes<kMaxBlocks>(), stream>>>(p, g.tiles);
  });
}

void launch_tf32x3(const DepthwiseForwardParams& p, cudaStream_t stream) {
  constexpr int kSmem = DepthwiseTf32Smem::kBytes;
  static_assert(kSmem <= 48 * 1024, "within the default dynamic shared memory limit");
  const RowTileGrid g = row_tile_grid(p, ToeplitzTile::kOutputs);
  with_row_walk(rows_aligned(p), [&](auto shifted) {
    depthwise_forward_tf32x3_kernel<decltype(shifted)::value>
        <<<g.grid, ToeplitzTile::kThreads, kSmem, stream>>>(p, g.tiles);
  });
}

template <int kBlocks>
void launch_wgmma_tf32x3(const DepthwiseForwardParams& p, cudaStream_t stream) {
  using Tile = WgmmaToeplitzTile;
  constexpr int kSmem = DepthwiseWgmmaTf32Smem<kBlocks>::kBytes;
  const RowTileGrid g = row_tile_grid(p, Tile::kOutputs);
  with_row_walk(rows_aligned(p), [&](auto shifted) {
    auto* const kernel = depthwise_forward_wgmma_tf32x3_kernel<kBlocks, decltype(shifted)::value>;
    allow_dynamic_shared_memory(kernel, kSmem, "causal_conv1d forward (depthwise, tensor cores)");
    kernel<<<g.grid, Tile::kThreads, kSmem, stream>>>(p, g.tiles);
  });
}

void launch_wgmma_tf32x3_width(const DepthwiseForwardParams& p, cudaStream_t stream) {
  with_toeplitz64_blocks(p.width, [&](auto blocks) { launch_wgmma_tf32x3<decltype(blocks)::value>(p, stream); });
}

template <typename T>
void launch_width(const DepthwiseForwardParams& p, cudaStream_t stream) {
  with_toeplitz_max_blocks(p.width, [&](auto max_blocks) { launch<T, decltype(max_blocks)::value>(p, stream); });
}

template <typename T, int kBlocks>
void launch_wgmma(const DepthwiseForwardParams& p, cudaStream_t stream) {
  using Tile = WgmmaToeplitzTile;
  constexpr int kSmem = DepthwiseWgmmaSmem<kBlocks>::kBytes;
  static_assert(kSmem <= 48 * 1024, "within the default dynamic shared memory limit");
  const RowTileGrid g = row_tile_grid(p, Tile::kOutputs);
  with_row_walk(rows_aligned(p), [&](auto shifted) {
    depthwise_forward_wgmma_kernel<T, kBlocks, kToeplitzNonFiniteGuard, decltype(shifted)::value>
        <<<g.grid, Tile::kThreads, kSmem, stream>>>(p, g.tiles);
  });
}

template <typename T>
void launch_wgmma_width(const DepthwiseForwardParams& p, cudaStream_t stream) {
  with_toeplitz64_blocks(p.width, [&](auto blocks) { launch_wgmma<T, decltype(blocks)::value>(p, stream); });
}

template <typename T, int kBlocks>
void launch_wgmma_ring(const DepthwiseForwardParams& p, cudaStream_t stream) {
  using Smem = DepthwiseWgmmaRingSmem<kBlocks>;
  const char* const what = "causal_conv1d forward (depthwise, tensor cores)";
  auto* const kernel = depthwise_forward_wgmma_ring_kernel<T, kBlocks, kToeplitzNonFiniteGuard>;
  allow_dynamic_shared_memory(kernel, Smem::kBytes, what);
  const RowChunksView xv = row_chunks_view(p.batch, p.channels, p.length, p.x_stride, Smem::kBoxChunks);
  const RowChunksView yv = row_chunks_view(p.batch, p.channels, p.length, p.y_stride, WgmmaToeplitzTile::kChunks);
  const CUtensorMap x_map = encode_tensor_map(p.x, p.dtype, 4, xv.dims, xv.strides, xv.box, what);
  const CUtensorMap y_map = encode_tensor_map(p.y, p.dtype, 4, yv.dims, yv.strides, yv.box, what);
  const int64_t tiles_per_row = (p.length + WgmmaToeplitzTile::kOutputs - 1) / WgmmaToeplitzTile::kOutputs;
  const int64_t grid = std::min(p.batch * p.channels * tiles_per_row,
                                int64_t(resident_blocks(kernel, Smem::kThreads, Smem::kBytes, what)));
  kernel<<<unsigned(grid), Smem::kThreads, Smem::kBytes, stream>>>(x_map, y_map, p, tiles_per_row);
}

template <typename T>
void launch_wgmma_ring_width(const DepthwiseForwardParams& p, cudaStream_t stream) {
  switch (toeplitz64_blocks(int(p.width))) {  // 3 or more (kWgmmaRingMinWidth)
    case 3: launch_wgmma_ring<T, 3>(p, stream); break;  // K <= 129
    case 4: launch_wgmma_ring<T, 4>(p, stream); break;  // K <= 193
    default: launch_wgmma_ring<T, 5>(p, stream); break;  // K <= 256
  }
}

// The wgmma form from this width on. Measured side by side on the H200 (bf16 B1 D4096 L8192,
// docs/performance.md, session 14, both forms with the stmatrix epilogue): they tie from K9 to
// K33 (42-43 us), the wgmma form wins from there (K48 44.9 -> 42.5 us, K64 46.6 -> 42.7); session 8
// found it ahead from K65 (K128 0.058 against 0.064 ms, K256 79 against 94 us).
constexpr int64_t kWgmmaMinWidth = 33;

// The wgmma forms read and write rows by 16-byte units: every row of x and y starts 16-byte
// aligned, or (kToeplitzShiftedRows; the cp.async form only) lies as far past a boundary as its
// row of y. They need an sm_90a image and a compute capability 9.0 device.
bool wgmma_rows_apply(const DepthwiseForwardParams& p) {
  return (rows_aligned(p) || (kToeplitzShiftedRows && rows_share_lead(p))) && current_device_runs_sm90a();
}

// The streaming form from this width on (3 Toeplitz blocks), where rows are whole chunks. Side by
// side on the H200 (bf16 B1 D4096 L8192, docs/performance.md, session 28), against the form above:
// K33 46.2 against 42.8 us, K64 46.4 / 43.0, K65 47.8 / 43.4 (it loses at 2 blocks); K128 47.9 /
// 49.8, K193 49.5 / 58.7, K256 64.6 / 73.0.
constexpr int64_t kWgmmaRingMinWidth = 66;

// The streaming form on top: 16-byte aligned rows its tensor maps' view describes
// (row_chunks_view_applies), and a driver that encodes tensor maps.
bool wgmma_ring_applies(const DepthwiseForwardParams& p) {
  return rows_aligned(p) && row_chunks_view_applies(p.batch, p.channels, p.length, p.x_stride) &&
         row_chunks_view_applies(p.batch, p.channels, p.length, p.y_stride) && tensor_maps_available();
}

// fp32 on the tensor cores (tf32 split three ways, depthwise_forward_tf32_kernel.cuh) from this
// width on. Measured on the H200 (fp32 B1 D4096 L8192, docs/performance.md session 30): K128
// 0.600 -> 0.223 ms, K256 1.17 -> 0.36 ms against the tiled CUDA-core kernel; it wins from K16 and
// loses at K9 (110 against 92 us). mma.sync's tf32 rate, not the bytes, bounds it.
constexpr bool kDepthwiseTf32x3Forward = true;
constexpr int64_t kTf32x3MinWidth = 16;

// The tf32 form on Hopper's warpgroup MMA (depthwise_forward_wgmma_tf32_kernel.cuh) for the rows the
// 16-bit wgmma forms take (wgmma_rows_apply), from this width on. Measured in session 33 (H100, fp32
// B1 D4096 L8192, docs/performance.md) against the mma.sync tf32 form: K65 158 -> 147 us, K128
// 232 -> 180, K256 360 -> 256; it loses below (K16 111 -> 145, K33 126 -> 145: ~145 us at any width
// up to 65, where the mma.sync form grows by ~1 us a tap).
constexpr bool kDepthwiseWgmmaTf32x3Forward = true;
constexpr int64_t kWgmmaTf32x3MinWidth = 65;

}  // namespace

bool try_launch_depthwise_forward_tc(const DepthwiseForwardParams& p, cudaStream_t stream) {
  const bool fp32 = p.dtype == DType::f32 && kDepthwiseTf32x3Forward && p.width >= kTf32x3MinWidth;
  if ((p.dtype != DType::f16 && p.dtype != DType::bf16 && !fp32) || p.dilation != 1 ||
      p.width < kDepthwiseTcMinWidth || p.width > kDepthwiseTcMaxWidth || p.x_stride[2] != 1 ||
      p.y_stride[2] != 1 || p.length <= 0 || p.batch * p.channels <= 0 || p.batch * p.channels > kMaxGridX)
    return false;
  if (fp32) {
    if (kDepthwiseWgmmaTf32x3Forward && p.width >= kWgmmaTf32x3MinWidth && wgmma_rows_apply(p))
      launch_wgmma_tf32x3_width(p, stream);
    else
      launch_tf32x3(p, stream);
    return true;
  }
  const bool wgmma = p.width >= kWgmmaMinWidth && wgmma_rows_apply(p);
  const bool ring = wgmma && p.width >= kWgmmaRingMinWidth && wgmma_ring_applies(p);
  auto run = [&](auto type_tag) {
    using T = decltype(type_tag);
    if (ring)
      launch_wgmma_ring_width<T>(p, stream);
    else if (wgmma)
      launch_wgmma_width<T>(p, stream);
    else
      launch_width<T>(p, stream);
  };
  if (p.dtype == DType::f16)
    run(__half{});
  else
    run(__nv_bfloat16{});
  return true;
}

}  // namespace causalconv::detail
