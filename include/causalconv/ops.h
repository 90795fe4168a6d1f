// Public entry points of the core: one per op and direction.
//
// Every op takes a descriptor of views (any strides), the caller's CUDA stream
// and a caller-owned workspace sized by the matching *_workspace_bytes query.
// Ops never allocate device memory and never synchronise, so they can be
// captured in CUDA graphs. Errors are thrown as causalconv::Error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "causalconv/tensor.h"

namespace causalconv {

enum class Activation : int { none = 0, silu = 1 };

// A cudaStream_t, kept opaque so this header needs no CUDA include.
struct Stream {
  void* handle = nullptr;  // nullptr: the legacy default stream
};

struct Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};

// Kernel-width envelopes of the CUDA ops (the CPU reference accepts any width >= 1).
constexpr int64_t kMinDepthwiseWidth = 2;
constexpr int64_t kMaxDepthwiseWidth = 256;
constexpr int64_t kMinDenseWidth = 1;
constexpr int64_t kMaxDenseWidth = 64;
constexpr int64_t kMinProjWidth = 2;
constexpr int64_t kMaxProjWidth = 32;
constexpr int64_t kMinMixerWidth = 2;
constexpr int64_t kMaxMixerWidth = 256;
// Largest causal reach (K-1)*dilation the depthwise backward takes on channel-last data
// (stride(1) == 1 for x, dy and dx); beyond it those need unit stride along L.
constexpr int64_t kMaxChannelLastBackwardReach = 255;
// Largest causal reach (K-1)*dilation we index; keeps every offset far from overflow.
constexpr int64_t kMaxReach = int64_t(1) << 40;

// ---- causal_conv1d: depthwise, grouped or dense ------------------------------
//   y[b,o,t] = bias[o] + sum_{i in group(o)} sum_{k<K} w[o,i,k] x[b,i,t-(K-1-k)d]
// then the activation. Weight is (C_out, C_in/groups, K); a rank-2 weight (C, K)
// is accepted for depthwise (groups == C_in == C_out).
struct CausalConv1dForwardArgs {
  TensorView x;                    // (B, C_in, L)
  TensorView weight;               // (C_out, C_in/groups, K) or (C, K)
  std::optional<TensorView> bias;  // (C_out)
  TensorView y;                    // (B, C_out, L), written
  int64_t dilation = 1;
  int64_t groups = 1;  // 0: infer C_in / weight.shape[1]
  Activation activation = Activation::none;
  // Optional: causal_conv1d_saved_x_bytes(*this) bytes where the forward also writes the copy of x
  // that the backward's weight gradient reads; pass it, untouched, as that backward's saved_x.
  Workspace saved_x;
};

// Gradients through the activation. Each output is optional: absent means
// "not needed" and is not computed.
struct CausalConv1dBackwardArgs {
  TensorView x;
  TensorView weight;
  std::optional<TensorView> bias;  // needed to recompute the pre-activation
  TensorView dy;                   // (B, C_out, L)
  std::optional<TensorView> dx;       // (B, C_in, L)
  std::optional<TensorView> dweight;  // same shape as weight
  std::optional<TensorView> dbias;    // (C_out)
  int64_t dilation = 1;
  int64_t groups = 1;  // 0: infer C_in / weight.shape[1]
  Activation activation = Activation::none;
  // Optional: the saved_x a forward on this x, weight shape and options wrote (it must not have
  // changed since): the weight gradient then reads it instead of copying x itself.
  Workspace saved_x;
};

// ---- b2b_causal_conv1d: the fused Hyena operator ------------------------------
//   p = depthwise(x, weight_proj); x2, x1, v = p[:,0::3], p[:,1::3], p[:,2::3]
//   z = x1 * v; h = depthwise(z, weight_mixer) + skip_bias * z; out = x2 * h
struct B2BCausalConv1dForwardArgs {
  TensorView x;             // (B, 3D, L)
  TensorView weight_proj;   // (3D, Kp)
  TensorView weight_mixer;  // (D, Km)
  TensorView skip_bias;     // (D)
  TensorView out;           // (B, D, L), written
};

struct B2BCausalConv1dBackwardArgs {
  TensorView x;
  TensorView weight_proj;
  TensorView weight_mixer;
  TensorView skip_bias;
  TensorView dout;           // (B, D, L)
  TensorView dx;             // (B, 3D, L), written
  TensorView dweight_proj;   // (3D, Kp), written
  TensorView dweight_mixer;  // (D, Km), written
  TensorView dskip_bias;     // (D), written
};

// ---- CUDA ops ------------------------------------------------------------------
// Depthwise (groups == C_in == C_out), dense (groups == 1) and grouped. Dense/grouped
// fp32 is computed to fp32 accuracy (bf16 hi/lo split on the tensor cores, never TF32).
// The forward's workspace is 0 bytes except on the dense tensor-core path (prepared
// weights); a short workspace is rejected before anything is launched.
size_t causal_conv1d_forward_workspace_bytes(const CausalConv1dForwardArgs& args);
void causal_conv1d_forward(const CausalConv1dForwardArgs& args, Workspace workspace, Stream stream);
// The saved_x a forward can write for its backward: nonzero only where both run on the dense
// Hopper kernels (a channel-last 16-bit copy of x, bf16 hi and lo for fp32: as many bytes as x,
// held from the forward to the backward), and x is not 16-bit channel-last data read in place.
size_t causal_conv1d_saved_x_bytes(const CausalConv1dForwardArgs& args);

// Depthwise: x, dy and dx need unit stride along L (any batch and channel strides).
// Dense/grouped: any strides. dweight and dbias are deterministic (fixed-order sums of
// per-part fp32 partials kept in the workspace).
size_t causal_conv1d_backward_workspace_bytes(const CausalConv1dBackwardArgs& args);
void causal_conv1d_backward(const CausalConv1dBackwardArgs& args, Workspace workspace, Stream stream);

// Fused: one launch forward; backward recomputes the forward intermediates (one
// kernel) and reduces per-block fp32 partials of the weight gradients in a fixed
// order (a second kernel), so they are bitwise deterministic. x, out, dout and dx
// need unit stride along L (any batch and channel strides); weights take any strides.
size_t b2b_causal_conv1d_forward_workspace_bytes(const B2BCausalConv1dForwardArgs& args);
void b2b_causal_conv1d_forward(const B2BCausalConv1dForwardArgs& args, Workspace workspace, Stream stream);
size_t b2b_causal_conv1d_backward_workspace_bytes(const B2BCausalConv1dBackwardArgs& args);
void b2b_causal_conv1d_backward(const B2BCausalConv1dBackwardArgs& args, Workspace workspace, Stream stream);

}  // namespace causalconv
