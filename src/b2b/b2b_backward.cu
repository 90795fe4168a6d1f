// Launchers of the fused b2b_causal_conv1d backward (the kernels: b2b_backward_kernel.cuh).
#include "b2b/b2b_backward_kernel.cuh"
#include "b2b/b2b_backward_short_kernel.cuh"
#include "b2b/b2b_backward_tc_kernel.cuh"
#include "b2b/b2b_backward_wgmma_kernel.cuh"
#include "b2b/b2b_backward_wgmma_tf32_kernel.cuh"
#include "b2b/b2b_kernels.h"
#include "b2b/b2b_tiling.cuh"
#include "common/cuda_runtime.h"

#include <algorithm>
#include <type_traits>

namespace causalconv::detail {
namespace {

using Tile = B2BBackwardTile;

// The tensor-core backward (b2b_backward_tc_kernel.cuh: fp16/bf16, Km >= 9, any Kp): on since
// it passed the GPU tests and sanitizers on the H200 (docs/performance.md, b2b "Backward v3");
// false sends those calls back to the CUDA-core kernels (for comparisons).
constexpr bool kB2BTensorCoreBackward = true;

size_t b2b_tc_backward_smem_bytes(int max_blocks) {
  switch (max_blocks) {
    case 3: return B2BTcBackwardLayout<3>::kBytes;
    case 5: return B2BTcBackwardLayout<5>::kBytes;
    case 9: return B2BTcBackwardLayout<9>::kBytes;
    default: return B2BTcBackwardLayout<17>::kBytes;
  }
}

size_t elem_bytes(DType t) { return t == DType::f32 ? 4 : 2; }

// The wgmma form's segments: consecutive 4096-step tiles of a row walked by one block (from the
// last). A segment that ends before the row spends a priming tile on the carries, so rows stay
// whole up to 32 tiles unless the grid would have under kB2BWgmmaBackwardMinBlocks blocks
// (two blocks fit an SM).
constexpr int64_t kB2BWgmmaBackwardMaxTilesPerSegment = 32;
constexpr int64_t kB2BWgmmaBackwardMinBlocks = 512;

// The wgmma backward takes dwp as the lag band of mma.sync chunk products for Kp <= kDwpBandLags
// (b2b_backward_wgmma_kernel.cuh's dwp_band_mma), two 64 x 64 lag-block MMAs per row and their band
// sums otherwise. Measured on the H100 (session 50, bf16 D4096 L8192 fwd+bwd, side by side): against
// the FMA form it replaced (Kp <= 4), B1 Km128 0.464 -> 0.441 ms, Km256 0.550 -> 0.536, B4 Km128
// 1.711 -> 1.618; that form had beaten the lag blocks (H200, session 13: Km128 0.557 -> 0.530 ms).

// Rows off the 16-byte grid (odd L) on the wgmma backward, each realigned from its own 16-byte grid
// (b2b_backward_wgmma_kernel's kRealigned), as the forward's (kB2BWgmmaRealignedRows); else the
// mma.sync form (bf16 B1 D4096 L8191 Kp3 Km128 fwd+bwd 1.18 ms on the H100, against 0.47 at L8192).
constexpr bool kB2BWgmmaBackwardRealignedRows = true;

// True when every `group`-element group starting at a multiple of `group` of every row of x,
// dout and dx is aligned to its size (rows at base + i * stride[0] + j * stride[1]): 4 for the
// chunked kernels' vector accesses, 16 bytes' worth for the short and wgmma kernels'.
bool rows_in_groups(const B2BBackwardParams& p, int64_t group) {
  const size_t bytes = size_t(group) * elem_bytes(p.dtype);
  auto aligned = [&](const void* base, const int64_t (&strides)[2]) {
    return reinterpret_cast<uintptr_t>(base) % bytes == 0 && strides[0] % group == 0 && strides[1] % group == 0;
  };
  return aligned(p.x, p.x_stride) && aligned(p.dout, p.dout_stride) && aligned(p.dx, p.dx_stride);
}

// The fp32 backward on warpgroup MMA (b2b_backward_wgmma_tf32_kernel.cuh) from this mixer width, Kp <=
// kB2BUnitProjectionTaps; the CUDA-core kernels below it and at wider projections. Tiles per block:
// the filters are set up once for them.
constexpr int64_t kB2BWgmmaTf32BackwardMinMixerWidth = 65;
constexpr int64_t kB2BWgmmaTf32BackwardTilesPerBlock = 2;

// fp32, kB2BWgmmaTf32BackwardMinMixerWidth <= Km <= 256, Kp <= 4, on a compute capability 9.0 device
// with an sm_90a image.
bool wgmma_tf32_backward_applies(const B2BBackwardParams& p) {
  return p.dtype == DType::f32 && p.mixer_width >= kB2BWgmmaTf32BackwardMinMixerWidth && p.mixer_width <= 256 &&
         p.proj_width <= kB2BUnitProjectionTaps && current_device_runs_sm90a();
}

// fp16/bf16, kB2BTcMinMixerWidth <= Km <= 256, Kp <= 32, rows_fit (every x, dout and dx row of
// 16-byte vectors, or the rows realigned), on a compute capability 9.0 device with an sm_90a image.
bool wgmma_backward_applies(const B2BBackwardParams& p, bool rows_fit) {
  return p.dtype != DType::f32 && p.mixer_width >= kB2BTcMinMixerWidth && p.mixer_width <= 256 &&
         p.proj_width <= 32 && rows_fit && current_device_runs_sm90a();
}

// The short backward on rows off the 16-byte grid (odd L), each row realigned from its own 16-byte
// grid (b2b_backward_short_kernel's kRealigned), else the chunked kernel. Measured in session 33
// (H100, bf16 B1 D4096 L8191 Kp3 Km7) at 0.77 ms against the chunked kernel's 0.37: with the span
// changes of b2b_short_span.cuh (session 34, H100, side by side) forward+backward 0.491 -> 0.445 ms
// (the backward ~0.33 against ~0.38). On since session 34.
constexpr bool kB2BShortBackwardRealignedRows = true;

int64_t short_span_steps(DType t) { return t == DType::f32 ? b2b_short_span<float>() : b2b_short_span<__half>(); }

template <typename T>
void launch_typed(const B2BBackwardParams& p, const B2BBackwardPlan& plan, float* partials, cudaStream_t stream) {
  if (p.batch > 0 && plan.tiling.tiles > 0) {  // else dx is empty and the weight gradients are zero
    const dim3 grid(unsigned(p.batch * p.dim), unsigned(plan.tiling.tile_blocks));
    auto launch = [&](auto kernel, auto... extra) {
      allow_dynamic_shared_memory(kernel, plan.smem_bytes, "b2b_causal_conv1d backward (shared-memory opt-in)");
      kernel<<<grid, Tile::kThreads, plan.smem_bytes, stream>>>(p, plan.tiling, extra..., partials);
    };
    switch (plan.path) {
      case B2BBackwardPath::short_span: {
        // One warp per (row, span); tile_blocks holds the spans per row.
        constexpr int kWarps = kB2BShortThreads / 32;
        const int64_t spans = p.batch * p.dim * plan.tiling.tile_blocks;
        with_b2b_short_widths(p.proj_width, p.mixer_width, [&](auto widths) {
          using W = decltype(widths);
          auto* kernel = b2b_backward_short_kernel<T, W, false>;
          if constexpr (kB2BShortBackwardRealignedRows) {
            if (plan.realigned) kernel = b2b_backward_short_kernel<T, W, true>;
          }
          kernel<<<unsigned((spans + kWarps - 1) / kWarps), kB2BShortThreads, 0, stream>>>(p, plan.tiling.tile_blocks,
                                                                                         spans, partials);
        });
        break;
      }
      case B2BBackwardPath::chunked_mixer8: launch(b2b_backward_chunked_kernel<T, 8>, plan.vectorised); break;
      case B2BBackwardPath::chunked_mixer16: launch(b2b_backward_chunked_kernel<T, 16>, plan.vectorised); break;
      case B2BBackwardPath::chunked_wide: launch(b2b_backward_chunked_kernel<T, 0>, plan.vectorised); break;
      case B2BBackwardPath::general: launch(b2b_backward_kernel<T>); break;
      case B2BBackwardPath::wgmma:
        if constexpr (!std::is_same<T, float>::value) {
          const int64_t per_segment = (plan.tiling.tiles + plan.tiling.tile_blocks - 1) / plan.tiling.tile_blocks;
          auto run = [&](auto kernel) {
            allow_dynamic_shared_memory(kernel, plan.smem_bytes, "b2b_causal_conv1d backward (shared-memory opt-in)");
            kernel<<<grid, WgmmaToeplitzTile::kThreads, plan.smem_bytes, stream>>>(p, plan.tiling.tiles, per_segment,
                                                                                  partials);
          };
          auto run_width = [&](auto dwp_band, auto realigned) {
            constexpr bool kBand = decltype(dwp_band)::value, kRealigned = decltype(realigned)::value;
            with_toeplitz64_blocks(p.mixer_width, [&](auto blocks) {  // 2-5 (Km <= 65, 129, 193, 256)
              run(b2b_backward_wgmma_kernel<T, decltype(blocks)::value, kBand, kRealigned>);
            });
          };
          auto run_rows = [&](auto dwp_band) {
            if (plan.realigned)
              run_width(dwp_band, std::true_type{});
            else
              run_width(dwp_band, std::false_type{});
          };
          if (p.proj_width <= kDwpBandLags)
            run_rows(std::true_type{});
          else
            run_rows(std::false_type{});
        }
        break;
      case B2BBackwardPath::wgmma_tf32:
        if constexpr (std::is_same<T, float>::value) {
          with_toeplitz64_blocks(p.mixer_width, [&](auto blocks) {
            constexpr int kBlocks = decltype(blocks)::value;
            constexpr bool kDwmGroup = b2b_wgmma_tf32_backward_dwm_group(kBlocks);
            auto kernel = b2b_backward_wgmma_tf32x3_kernel<kBlocks, kDwmGroup>;
            allow_dynamic_shared_memory(kernel, plan.smem_bytes, "b2b_causal_conv1d backward (shared-memory opt-in)");
            kernel<<<grid, b2b_wgmma_tf32_backward_threads(kDwmGroup), plan.smem_bytes, stream>>>(p, plan.tiling.tiles,
                                                                                                 partials);
          });
        }
        break;
      case B2BBackwardPath::tensor_core:
        if constexpr (!std::is_same<T, float>::value) {
          switch (plan.tc_max_blocks) {
            case 3: launch(b2b_backward_tc_kernel<T, 3>); break;
            case 5: launch(b2b_backward_tc_kernel<T, 5>); break;
            case 9: launch(b2b_backward_tc_kernel<T, 9>); break;
            default: launch(b2b_backward_tc_kernel<T, 17>); break;
          }
        }
        break;
    }
    check_launch("b2b_causal_conv1d backward");
  }
  if (const int64_t blocks = b2b_weight_grad_reduce_blocks(p); blocks > 0) {
    b2b_weight_grad_reduce<T><<<unsigned(blocks), kB2BReduceThreads, 0, stream>>>(p, p.batch * plan.tiling.tile_blocks,
                                                                                  partials);
    check_launch("b2b_causal_conv1d backward (weight-gradient reduction)");
  }
}

}  // namespace

B2BBackwardPlan plan_b2b_backward(const B2BBackwardParams& p) {
  return plan_b2b_backward(p, kB2BShortBackwardRealignedRows, kB2BShortLastSpanTakesRealignedTail,
                           kB2BWgmmaBackwardRealignedRows);
}

B2BBackwardPlan plan_b2b_backward(const B2BBackwardParams& p, bool realign_short_rows, bool last_span_takes_tail,
                                  bool realign_wgmma_rows, bool fp32_wgmma) {
  static_assert(B2BBackwardChunkTile::kThreads == Tile::kThreads, "one block size for every path");
  const int64_t unit_values = 16 / int64_t(elem_bytes(p.dtype));  // a 16-byte vector's
  const bool vector_rows = rows_in_groups(p, unit_values);
  B2BBackwardPlan plan{};
  if (wgmma_backward_applies(p, vector_rows || realign_wgmma_rows)) {
    plan.path = B2BBackwardPath::wgmma;
    const int64_t tiles = (p.length + WgmmaToeplitzTile::kOutputs - 1) / WgmmaToeplitzTile::kOutputs;
    const int64_t rows = p.batch * p.dim;
    int64_t per_segment = std::min((tiles * rows + kB2BWgmmaBackwardMinBlocks - 1) / kB2BWgmmaBackwardMinBlocks,
                                   kB2BWgmmaBackwardMaxTilesPerSegment);
    per_segment = std::max({per_segment, (tiles + kB2BMaxGridY - 1) / kB2BMaxGridY, int64_t(1)});
    plan.tiling = {tiles, (tiles + per_segment - 1) / per_segment};
    plan.tc_max_blocks = toeplitz64_blocks(int(p.mixer_width));
    plan.realigned = !vector_rows;
    with_toeplitz64_blocks(p.mixer_width, [&](auto blocks) {
      constexpr int kBlocks = decltype(blocks)::value;
      plan.smem_bytes = plan.realigned ? B2BWgmmaBackwardLayout<kBlocks, true>::kBytes
                                       : B2BWgmmaBackwardLayout<kBlocks, false>::kBytes;
    });
    return plan;
  }
  if (fp32_wgmma && wgmma_tf32_backward_applies(p)) {
    plan.path = B2BBackwardPath::wgmma_tf32;
    plan.tiling = make_b2b_tiling(p.length, WgmmaToeplitzTile::kOutputs, kB2BWgmmaTf32BackwardTilesPerBlock);
    plan.tc_max_blocks = toeplitz64_blocks(int(p.mixer_width));
    with_toeplitz64_blocks(p.mixer_width, [&](auto blocks) {
      plan.smem_bytes = B2BWgmmaTf32BackwardLayout<decltype(blocks)::value>::kBytes;
    });
    return plan;
  }
  if (kB2BTensorCoreBackward && p.dtype != DType::f32 && p.mixer_width >= kB2BTcMinMixerWidth) {
    plan.path = B2BBackwardPath::tensor_core;
    plan.tiling = make_b2b_tiling(p.length, ToeplitzTile::kOutputs, kB2BTcBackwardTilesPerBlock);
    plan.tc_max_blocks = toeplitz_max_blocks(p.mixer_width);
    plan.smem_bytes = b2b_tc_backward_smem_bytes(plan.tc_max_blocks);
    return plan;
  }
  const int64_t spans_per_row =
      b2b_short_spans_per_row(p.length, short_span_steps(p.dtype), unit_values, !vector_rows, last_span_takes_tail);
  const int64_t short_blocks = p.batch * p.dim * spans_per_row / (kB2BShortThreads / 32) + 1;  // its 1-D grid
  if (p.proj_width <= kB2BShortMaxProj && p.mixer_width <= kB2BShortMaxMixer && (vector_rows || realign_short_rows) &&
      short_blocks <= int64_t(0x7fffffff)) {
    plan.path = B2BBackwardPath::short_span;
    plan.tiling = {spans_per_row, spans_per_row};
    plan.realigned = !vector_rows;
    return plan;
  }
  if (p.proj_width > kB2BChunkProjTaps || p.mixer_width > kB2BChunkMaxMixerWidth) {
    plan.path = B2BBackwardPath::general;
    plan.tiling = make_b2b_tiling(p.length, Tile::kOutputs, kB2BBackwardTilesPerBlock);
    plan.smem_bytes = sizeof(float) * size_t(b2b_backward_smem_floats(p.proj_width, p.mixer_width));
    return plan;
  }
  const int km = int(p.mixer_width);
  plan.path = km <= 8 ? B2BBackwardPath::chunked_mixer8
                      : (km <= 16 ? B2BBackwardPath::chunked_mixer16 : B2BBackwardPath::chunked_wide);
  const B2BChunkLayout layout = plan.path == B2BBackwardPath::chunked_mixer8    ? B2BChunkLayout(8, false)
                                : plan.path == B2BBackwardPath::chunked_mixer16 ? B2BChunkLayout(16, false)
                                                                                : B2BChunkLayout((km + 3) / 4 * 4, true);
  plan.tiling = make_b2b_tiling(p.length, B2BBackwardChunkTile::kOutputs, kB2BBackwardChunkTilesPerBlock);
  plan.smem_bytes = sizeof(float) * size_t(layout.floats);
  plan.vectorised = rows_in_groups(p, 4);
  return plan;
}

size_t b2b_backward_workspace_bytes(const B2BBackwardParams& p) {
  const B2BBackwardPlan plan = plan_b2b_backward(p);  // the dispatch's own plan: the two agree
  return sizeof(float) *
         size_t(p.dim * p.batch * plan.tiling.tile_blocks * b2b_backward_slots(p.proj_width, p.mixer_width));
}

void launch_b2b_backward(const B2BBackwardParams& p, void* workspace, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  float* partials = static_cast<float*>(workspace);
  const B2BBackwardPlan plan = plan_b2b_backward(p);
  switch (p.dtype) {
    case DType::f32: launch_typed<float>(p, plan, partials, s); break;
    case DType::f16: launch_typed<__half>(p, plan, partials, s); break;
    case DType::bf16: launch_typed<__nv_bfloat16>(p, plan, partials, s); break;
    case DType::f64: break;  // rejected by validation
  }
}

}  // namespace causalconv::detail
