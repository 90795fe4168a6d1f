// Launchers of the fused b2b_causal_conv1d kernels (implemented in .cu files).
//
// Every activation row (x, out, dout, dx) must have unit stride along time (the
// entry points check it, the front end makes rows contiguous); batch and channel
// strides are free. Weights take any strides.
#pragma once

#include <cstddef>
#include <cstdint>

#include "b2b/b2b_tiling.cuh"
#include "causalconv/ops.h"

namespace causalconv::detail {

struct B2BForwardParams {
  const void* x;             // (B, 3D, L)
  const void* weight_proj;   // (3D, Kp)
  const void* weight_mixer;  // (D, Km)
  const void* skip_bias;     // (D)
  void* out;                 // (B, D, L)
  DType dtype;
  int64_t batch, dim, length, proj_width, mixer_width;
  int64_t x_stride[2], out_stride[2];  // (b, c) in elements; time stride is 1
  int64_t wp_stride[2], wm_stride[2];  // (channel, tap)
  int64_t skip_stride;
};

void launch_b2b_forward(const B2BForwardParams& p, Stream stream);

struct B2BBackwardParams {
  const void* x;
  const void* weight_proj;
  const void* weight_mixer;
  const void* skip_bias;
  const void* dout;        // (B, D, L)
  void* dx;                // (B, 3D, L)
  void* dweight_proj;      // (3D, Kp)
  void* dweight_mixer;     // (D, Km)
  void* dskip_bias;        // (D)
  DType dtype;
  int64_t batch, dim, length, proj_width, mixer_width;
  int64_t x_stride[2], dout_stride[2], dx_stride[2];  // (b, c); time stride is 1
  int64_t wp_stride[2], wm_stride[2], dwp_stride[2], dwm_stride[2];
  int64_t skip_stride, dskip_stride;
};

// Which backward kernel serves a call, with its grid along time and shared memory.
// short_span: Kp <= 4, Km <= 8 on rows of 16-byte vectors (b2b_backward_short_kernel, a warp
// per (row, span); tiling.tile_blocks is the spans per row);
// chunked_*: Kp <= 4, the register-blocked b2b_backward_chunked_kernel, for Km <= 8,
// Km <= 16 (unrolled taps) or any Km (taps in blocks of 4); general: Kp > 4
// (b2b_backward_kernel); tensor_core: fp16/bf16 with Km >= 9 (b2b_backward_tc_kernel,
// dispatched only when kB2BTensorCoreBackward is on); wgmma: the same widths with Km <= 256 and
// Kp <= 32 on a compute capability 9.0 GPU, rows off the 16-byte grid realigned
// (b2b_backward_wgmma_kernel; grid.y holds the segments of a row, each walking ceil(tiles /
// segments) consecutive tiles); wgmma_tf32: fp32 with Kp <= 4 and kB2BWgmmaTf32BackwardMinMixerWidth
// <= Km <= 256 on the same GPUs, any rows (b2b_backward_wgmma_tf32_kernel; 4096-step tiles walked
// strided by grid.y).
enum class B2BBackwardPath { general, short_span, chunked_mixer8, chunked_mixer16, chunked_wide, tensor_core, wgmma, wgmma_tf32 };
struct B2BBackwardPlan {
  B2BBackwardPath path;
  B2BTiling tiling;
  size_t smem_bytes;
  bool vectorised;    // chunked paths: x, dout and dx rows take 4-element vector accesses
  int tc_max_blocks;  // tensor_core: the kernel's mixer-block capacity (3, 5, 9 or 17); wgmma*: its mixer blocks
  bool realigned;     // short_span, wgmma: rows off the 16-byte grid, realigned (the kernels' kRealigned)
};
// wgmma_tf32: a third warpgroup on dwm while the other two compute h, dz and the dp rows (the
// kernel's kDwmGroup) up to this many mixer blocks (Km <= 193): measured on the H100 (session 39)
// 7 % faster at Km128 than the two-warpgroup form; at 5 blocks its 168 registers spill (832 B).
constexpr int kB2BWgmmaTf32BackwardDwmWarpgroupMaxBlocks = 4;
constexpr bool b2b_wgmma_tf32_backward_dwm_group(int mixer_blocks) {
  return mixer_blocks <= kB2BWgmmaTf32BackwardDwmWarpgroupMaxBlocks;
}

B2BBackwardPlan plan_b2b_backward(const B2BBackwardParams& p);
// The same with the short kernel taking rows off the 16-byte grid or not, their last span walking
// the realigned tail or not, the wgmma kernel taking such rows or not, whatever the build's
// kB2BShortBackwardRealignedRows, kB2BShortLastSpanTakesRealignedTail and
// kB2BWgmmaBackwardRealignedRows, and fp32 on the tf32 wgmma kernel where it applies or never (the
// emulated tests' way to each form, on any machine).
B2BBackwardPlan plan_b2b_backward(const B2BBackwardParams& p, bool realign_short_rows, bool last_span_takes_tail,
                                  bool realign_wgmma_rows, bool fp32_wgmma = true);

// Scratch for the per-block fp32 partials of the weight gradients (reduced in a
// fixed order by a second kernel, so the weight gradients are deterministic).
size_t b2b_backward_workspace_bytes(const B2BBackwardParams& p);
void launch_b2b_backward(const B2BBackwardParams& p, void* workspace, Stream stream);

}  // namespace causalconv::detail
