// Launcher of the fused b2b_causal_conv1d forward (the kernels: b2b_forward_short_kernel.cuh
// for short filters on 16-byte rows, b2b_forward_wgmma_kernel.cuh on Hopper's warpgroup MMA for
// wider mixers on 16-byte rows, b2b_forward_tc_kernel.cuh on the tensor cores (mma.sync) for
// the other rows, b2b_forward_tf32_kernel.cuh for fp32 wide mixers on tf32 tensor cores (on
// warpgroup MMA: b2b_forward_wgmma_tf32_kernel.cuh), b2b_forward_kernel.cuh on the CUDA cores for
// everything else).
#include <algorithm>
#include <type_traits>

#include "b2b/b2b_forward_kernel.cuh"
#include "b2b/b2b_forward_short_kernel.cuh"
#include "b2b/b2b_forward_tc_kernel.cuh"
#include "b2b/b2b_forward_tf32_kernel.cuh"
#include "b2b/b2b_forward_wgmma_kernel.cuh"
#include "b2b/b2b_forward_wgmma_tf32_kernel.cuh"
#include "b2b/b2b_kernels.h"
#include "b2b/b2b_tiling.cuh"
#include "common/cuda_runtime.h"

namespace causalconv::detail {
namespace {

using Tile = B2BForwardTile;

template <typename T, int kMaxBlocks>
void launch_tc(const B2BForwardParams& p, const B2BTiling& tiling, cudaStream_t stream) {
  constexpr size_t smem = B2BTcLayout<kMaxBlocks>::kBytes;
  allow_dynamic_shared_memory(b2b_forward_tc_kernel<T, kMaxBlocks, kToeplitzNonFiniteGuard>, smem,
                              "b2b_causal_conv1d forward (shared-memory opt-in)");
  const dim3 grid(unsigned(p.batch * p.dim), unsigned(tiling.tile_blocks));
  b2b_forward_tc_kernel<T, kMaxBlocks, kToeplitzNonFiniteGuard>
      <<<grid, ToeplitzTile::kThreads, smem, stream>>>(p, tiling);
}

// fp16/bf16 with Km >= kB2BTcMinMixerWidth: projections and mixer on the tensor cores.
template <typename T>
bool try_launch_tc(const B2BForwardParams& p, const B2BTiling& tiling, cudaStream_t stream) {
  if constexpr (std::is_same<T, float>::value) {
    return false;
  } else {
    if (p.mixer_width < kB2BTcMinMixerWidth || p.mixer_width > 256 ||
        toeplitz_blocks(int(p.proj_width)) > kB2BTcMaxProjBlocks)
      return false;
    with_toeplitz_max_blocks(p.mixer_width,
                             [&](auto max_blocks) { launch_tc<T, decltype(max_blocks)::value>(p, tiling, stream); });
    return true;
  }
}

// fp32 with kB2BTcMinMixerWidth <= Km <= 256: the mixer on tf32 tensor cores split three ways
// (b2b_forward_tf32_kernel.cuh). On since the H200 ran the suite on it (session 30): fp32 B1 D4096
// L8192 forward Kp3 Km128 0.718 -> 0.601 ms, Kp4 Km256 1.311 -> 0.881 against the CUDA-core kernel
// (predicted ~0.15 ms: mma.sync's tf32 rate on Hopper is far below wgmma's). false: the CUDA-core
// kernel (for comparisons).
constexpr bool kB2BTf32x3Forward = true;

// Its z and gate projections at Kp <= 4 by 16-byte units with the taps in registers
// (b2b_forward_tf32_kernel.cuh, kUnitProjections; session 34): the per-step tap loop over shared
// memory was ~70 % of the kernel's instructions (sm_90a SASS: ~115 a z step at Kp 3) and held it
// flat where the mixer is small. Measured on the H100 (fp32 B1 D4096 L8192 Kp3, side by side):
// Km9 441 -> 221 us, Km16 433 -> 221, Km65 493 -> 282, Km128 584 -> 359, Km256 775 -> 524.
constexpr bool kB2BTf32UnitProjections = true;

// The fp32 mixer on Hopper's warpgroup MMA at Kp <= 4, with the unit projections
// (b2b_forward_wgmma_tf32_kernel.cuh; any rows). Deleted in session 33 when, with the projections a
// step at a time, it lost to the mma.sync form (Km128 634 against 582 us, H100); brought back in
// session 34 on the finding that the projections, not the mixer, held both forms flat. Measured on
// the H100 (fp32 B1 D4096 L8192 Kp3) against the mma.sync form with the unit projections: Km9 266
// against 221 us, Km16 267 / 221, Km65 277 / 282, Km128 318 / 359, Km256 411 / 524. On from
// kB2BWgmmaTf32MinMixerWidth.
constexpr bool kB2BWgmmaTf32x3Forward = true;
constexpr int64_t kB2BWgmmaTf32MinMixerWidth = 65;

template <int kMixerBlocks>
void launch_wgmma_tf32x3(const B2BForwardParams& p, cudaStream_t stream) {
  constexpr int smem = B2BWgmmaTf32Layout<kMixerBlocks>::kBytes;
  auto* const kernel = b2b_forward_wgmma_tf32x3_kernel<kMixerBlocks>;
  allow_dynamic_shared_memory(kernel, smem, "b2b_causal_conv1d forward (shared-memory opt-in)");
  const B2BTiling tiling = make_b2b_tiling(p.length, WgmmaToeplitzTile::kOutputs, kB2BForwardTilesPerBlock);
  const dim3 grid(unsigned(p.batch * p.dim), unsigned(tiling.tile_blocks));
  kernel<<<grid, WgmmaToeplitzTile::kThreads, smem, stream>>>(p, tiling.tiles);
}

bool try_launch_wgmma_tf32x3(const B2BForwardParams& p, cudaStream_t stream) {
  if (!kB2BWgmmaTf32x3Forward || p.mixer_width < kB2BWgmmaTf32MinMixerWidth || p.proj_width > kB2BUnitProjectionTaps ||
      !current_device_runs_sm90a())
    return false;
  with_toeplitz64_blocks(p.mixer_width, [&](auto blocks) { launch_wgmma_tf32x3<decltype(blocks)::value>(p, stream); });
  return true;
}

template <typename T>
bool try_launch_tf32(const B2BForwardParams& p, const B2BTiling& tiling, cudaStream_t stream) {
  if (!std::is_same<T, float>::value || !kB2BTf32x3Forward || p.mixer_width < kB2BTcMinMixerWidth ||
      p.mixer_width > 256)
    return false;
  if (try_launch_wgmma_tf32x3(p, stream)) return true;
  auto launch = [&](auto kernel) {
    constexpr size_t smem = B2BTf32Layout::kBytes;
    allow_dynamic_shared_memory(kernel, smem, "b2b_causal_conv1d forward (shared-memory opt-in)");
    const dim3 grid(unsigned(p.batch * p.dim), unsigned(tiling.tile_blocks));
    kernel<<<grid, ToeplitzTile::kThreads, smem, stream>>>(p, tiling);
  };
  if (kB2BTf32UnitProjections && p.proj_width <= kB2BUnitProjectionTaps)
    launch(b2b_forward_tf32x3_kernel<true>);
  else
    launch(b2b_forward_tf32x3_kernel<false>);
  return true;
}

// Consecutive 4096-step tiles walked by one block of the wgmma form (a segment of its row): the
// z halo is carried from tile to tile and computed on the CUDA cores only at a segment's first
// tile. Up to 32 (B1 D4096 L131072: 1.540 ms at 8, 1.489 at 32, H200), fewer where the grid would
// otherwise have under kB2BWgmmaMinBlocks blocks.
constexpr int64_t kB2BWgmmaMaxTilesPerSegment = 32;
constexpr int64_t kB2BWgmmaMinBlocks = 1024;

// Rows off the 16-byte grid (odd L: x's three rows and the output row each at their own distance
// past a boundary) on the wgmma form, copied by 16-byte units from each row's grid and shifted into
// place in shared memory (kRealigned). Measured in session 33 (H100, bf16 B1 D4096 L8191 Kp3,
// docs/performance.md): Km9 265 -> 174 us, Km128 285 -> 176, Km256 340 -> 190 against the mma.sync
// form these rows took before.
constexpr bool kB2BWgmmaRealignedRows = true;

template <typename T, int kMixerBlocks, bool kRealigned>
void launch_wgmma(const B2BForwardParams& p, cudaStream_t stream) {
  constexpr int smem = B2BWgmmaLayout<kMixerBlocks, kRealigned>::kBytes;
  auto* const kernel = b2b_forward_wgmma_kernel<T, kMixerBlocks, kToeplitzNonFiniteGuard, kRealigned>;
  allow_dynamic_shared_memory(kernel, smem, "b2b_causal_conv1d forward (shared-memory opt-in)");
  const int64_t tiles = (p.length + WgmmaToeplitzTile::kOutputs - 1) / WgmmaToeplitzTile::kOutputs;
  const int64_t rows = p.batch * p.dim;
  int64_t per_segment =
      std::min((tiles * rows + kB2BWgmmaMinBlocks - 1) / kB2BWgmmaMinBlocks, kB2BWgmmaMaxTilesPerSegment);
  per_segment = std::max(per_segment, (tiles + kB2BMaxGridY - 1) / kB2BMaxGridY);
  const dim3 grid(unsigned(rows), unsigned((tiles + per_segment - 1) / per_segment));
  kernel<<<grid, WgmmaToeplitzTile::kThreads, smem, stream>>>(p, tiles, per_segment);
}

// fp16/bf16 with kB2BTcMinMixerWidth <= Km <= 256 and Kp <= 32 on rows of 16-byte vectors (any rows
// with kB2BWgmmaRealignedRows), on a compute capability 9.0 device with an sm_90a image: the
// warpgroup-MMA form.
template <typename T>
bool try_launch_wgmma(const B2BForwardParams& p, cudaStream_t stream) {
  if constexpr (std::is_same<T, float>::value) {
    return false;
  } else {
    if (p.mixer_width < kB2BTcMinMixerWidth || p.mixer_width > 256 || p.proj_width > 32) return false;
    const bool aligned = vector_aligned<T>(p.x, p.x_stride, 2) && vector_aligned<T>(p.out, p.out_stride, 2);
    if (!aligned && !kB2BWgmmaRealignedRows) return false;
    if (!current_device_runs_sm90a()) return false;
    with_toeplitz64_blocks(p.mixer_width, [&](auto blocks) {
      constexpr int kBlocks = decltype(blocks)::value;
      if constexpr (kB2BWgmmaRealignedRows) {
        if (!aligned) return launch_wgmma<T, kBlocks, true>(p, stream);
      }
      launch_wgmma<T, kBlocks, false>(p, stream);
    });
    return true;
  }
}

// The short forward on rows off the 16-byte grid (odd L), each x row and the output row realigned
// from its own 16-byte grid (b2b_forward_short_kernel's kRealigned). Measured in session 33 (H100,
// bf16 B1 D4096 L8191 Kp3 Km7): 255 -> 181 us against the v1 kernel these rows took before (the
// aligned short kernel: 100 us at L8192; the realigning costs more than session 32's count).
constexpr bool kB2BShortRealignedRows = true;

// Kp <= 4 and Km <= 8 with every x and out row made of whole 16-byte vectors (aligned bases, batch
// and channel strides multiples of the vector width), or any rows with kB2BShortRealignedRows.
template <typename T>
bool try_launch_short(const B2BForwardParams& p, cudaStream_t stream) {
  if (p.proj_width > kB2BShortMaxProj || p.mixer_width > kB2BShortMaxMixer) return false;
  const bool aligned = vector_aligned<T>(p.x, p.x_stride, 2) && vector_aligned<T>(p.out, p.out_stride, 2);
  if (!aligned && !kB2BShortRealignedRows) return false;
  const int64_t spans_per_row = b2b_short_spans_per_row(p.length, b2b_short_span<T>(), Vec16<T>::kElems, !aligned);
  const int64_t spans = p.batch * p.dim * spans_per_row;
  constexpr int kWarps = kB2BShortThreads / 32;
  const int64_t blocks = (spans + kWarps - 1) / kWarps;
  if (blocks > int64_t(0x7fffffff)) return false;
  with_b2b_short_widths(p.proj_width, p.mixer_width, [&](auto widths) {
    using W = decltype(widths);
    auto* kernel = b2b_forward_short_kernel<T, W, false>;
    if constexpr (kB2BShortRealignedRows) {
      if (!aligned) kernel = b2b_forward_short_kernel<T, W, true>;
    }
    kernel<<<unsigned(blocks), kB2BShortThreads, 0, stream>>>(p, spans_per_row, spans);
  });
  return true;
}

template <typename T>
void launch_typed(const B2BForwardParams& p, cudaStream_t stream) {
  const B2BTiling tiling = make_b2b_tiling(p.length, Tile::kOutputs, kB2BForwardTilesPerBlock);
  const size_t smem = sizeof(float) * size_t(b2b_forward_smem_floats(p.proj_width, p.mixer_width));
  if (try_launch_short<T>(p, stream) || try_launch_wgmma<T>(p, stream) || try_launch_tc<T>(p, tiling, stream) ||
      try_launch_tf32<T>(p, tiling, stream))
    return;
  allow_dynamic_shared_memory(b2b_forward_kernel<T>, smem, "b2b_causal_conv1d forward (shared-memory opt-in)");
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
