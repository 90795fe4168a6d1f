// Launchers of the dense and grouped causal_conv1d kernels (implemented in .cu files).
//
// "Dense" here means every form that is not depthwise: groups == 1 (dense) and any
// other divisor of C_in (grouped). Weight is (C_out, C_in/groups, K), any strides.
#pragma once

#include <cstddef>
#include <cstdint>

#include "causalconv/ops.h"

namespace causalconv::detail {

struct DenseGeometry {
  int64_t batch, c_in, c_out, length, width, dilation, groups;
  DType dtype;
  bool silu;
  bool hopper;  // the tensors' device runs the Hopper kernels: dense_wgmma_available(device)
  int64_t in_per_group() const { return c_in / groups; }
  int64_t out_per_group() const { return c_out / groups; }
};

struct DenseForwardParams {
  DenseGeometry g;
  const void* x;
  const void* weight;
  const void* bias;  // nullptr: no bias
  void* y;
  void* workspace;  // dense_tc_forward_workspace_bytes(g) bytes when the tensor-core forward runs
  void* saved_x;    // nullptr, or dense_wgmma_saved_x_bytes(*this) bytes for x's copy the backward reads
  int64_t x_stride[3], y_stride[3], w_stride[3];  // in elements: (b, c, t), (o, i, k)
  int64_t bias_stride;
};

struct DenseBackwardParams {
  DenseGeometry g;
  const void* x;
  const void* weight;
  const void* bias;  // nullptr: no bias (only read to recompute the silu input)
  const void* dy;
  void* dx;       // nullptr: not wanted
  void* dweight;  // nullptr: not wanted
  void* dbias;    // nullptr: not wanted
  const void* saved_x;  // nullptr, or the copy of x a forward kept (dense_wgmma_saved_x_bytes)
  int64_t x_stride[3], dy_stride[3], dx_stride[3], w_stride[3], dw_stride[3];
  int64_t bias_stride, dbias_stride;
};

// The generic forward (dense_generic.cu): CUDA cores, every shape, dtype and stride.
void launch_dense_forward_generic(const DenseForwardParams& p, Stream stream);

// The tensor-core kernels (dense_tc.cu): an implicit GEMM with mma.sync; fp32 through a
// bf16 hi/lo split (3 products). Any strides. They serve shapes whose groups have at least
// 16 source and 32 destination channels; their workspace holds the weights prepared for
// the kernel (bf16/f16 copies, zero-padded to the tiles), rebuilt on every call.
bool dense_tc_forward_supported(const DenseGeometry& g);
size_t dense_tc_forward_workspace_bytes(const DenseGeometry& g);
void launch_dense_tc_forward(const DenseForwardParams& p, Stream stream);

// The Hopper kernel (dense_wgmma.cu): TMA + wgmma, warp-specialised, for sm_90a builds on
// compute capability 9.0; groups of at least 32 source and 32 destination channels, any strides.
// It serves the forward and dx (the transposed convolution of dy, or of the fp32 gradient
// through silu, which is rounded to the 16-bit dtype as in dense_tc.cu). Its workspace:
// prepared weights, then a channel-last copy of the source (bf16 hi and lo for fp32); a 16-bit
// channel-last forward x with aligned rows is read in place.
bool dense_wgmma_available(int device);  // sm_90a build, compute capability 9.0, TMA encoder found
bool dense_wgmma_forward_supported(const DenseForwardParams& p);
size_t dense_wgmma_forward_workspace_bytes(const DenseForwardParams& p);
void launch_dense_wgmma_forward(const DenseForwardParams& p, Stream stream);
// The forward can also write x's channel-last copy that the weight gradient reads (bf16 hi and lo
// for fp32; the same bytes as x), to p.saved_x, for a backward given it as its saved_x: that
// backward then skips its own pass over x. 0 where the forward and the weight gradient do not
// both run here, or x is channel-last 16-bit data read in place.
size_t dense_wgmma_saved_x_bytes(const DenseForwardParams& p);
bool dense_wgmma_dx_supported(const DenseBackwardParams& p);
size_t dense_wgmma_dx_workspace_bytes(const DenseBackwardParams& p);
void launch_dense_wgmma_dx(const DenseBackwardParams& p, const void* grad, bool grad_fp32,
                           const int64_t (&grad_stride)[3], void* workspace, Stream stream);
// Weight gradients (and dbias) as a GEMM over B x L on the Hopper tensor cores: per-part fp32
// partials in the layout above (dense_wgmma_weight_grad_parts parts), reduced in part order by
// the caller. Its workspace (staged x and, unless dy's rows can be read in place, the gradient)
// is separate from the partials; the gradient passed must be dy, or the fp32 gradient through
// silu when the activation is silu (the workspace size assumes so).
bool dense_wgmma_weight_grad_supported(const DenseBackwardParams& p);
// The saved_x it reads in place of staging x (0: it does not run here).
size_t dense_wgmma_weight_grad_saved_x_bytes(const DenseBackwardParams& p);
int64_t dense_wgmma_weight_grad_parts(const DenseBackwardParams& p);
size_t dense_wgmma_weight_grad_workspace_bytes(const DenseBackwardParams& p);
void launch_dense_wgmma_weight_grad(const DenseBackwardParams& p, const void* grad, bool grad_fp32,
                                    const int64_t (&grad_stride)[3], float* partials, void* workspace,
                                    Stream stream);

// dx as the transposed convolution of grad (dy, or the fp32 gradient through silu):
// the same kernel with transposed, flipped weights and a look-ahead window.
bool dense_tc_dx_supported(const DenseGeometry& g);
size_t dense_tc_dx_workspace_bytes(const DenseGeometry& g);
void launch_dense_tc_dx(const DenseBackwardParams& p, const void* grad, bool grad_fp32,
                        const int64_t (&grad_stride)[3], void* workspace, Stream stream);

// The backward's fp32 gradient through silu, dy * silu'(bias + conv), by the tensor-core
// forward kernel (same shapes and workspace as the forward).
void launch_dense_tc_silu_grad(const DenseBackwardParams& p, float* grad, const int64_t (&grad_stride)[3],
                               void* workspace, Stream stream);

// Weight gradients (and dbias) as a GEMM over B x L on tensor cores: per-part fp32
// partials (dense_tc_weight_grad_parts(g) parts of C_out*(C_in/groups)*K + C_out floats),
// reduced in part order by the caller. Shapes as the forward's, with B*L > 0.
bool dense_tc_weight_grad_supported(const DenseGeometry& g);
int64_t dense_tc_weight_grad_parts(const DenseGeometry& g);
void launch_dense_tc_weight_grad(const DenseBackwardParams& p, const void* grad, bool grad_fp32,
                                 const int64_t (&grad_stride)[3], float* partials, Stream stream);

// Backward scratch: the fp32 gradient through silu (B, C_out, L) when the activation is
// silu, then per-part fp32 partials of dweight and dbias (reduced in a fixed order), then
// the prepared weights of the tensor-core kernels (silu gradient, then dx: one region,
// used one after the other in stream order).
size_t dense_backward_workspace_bytes(const DenseBackwardParams& p);
void launch_dense_backward(const DenseBackwardParams& p, void* workspace, Stream stream);

}  // namespace causalconv::detail
