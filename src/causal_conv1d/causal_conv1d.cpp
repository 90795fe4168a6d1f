// causal_conv1d CUDA entry points: validate, then pick a kernel.
#include <string>

#include "causal_conv1d/dense_kernels.h"
#include "causal_conv1d/depthwise_kernels.h"
#include "causal_conv1d/validate.h"
#include "causalconv/error.h"
#include "common/cuda_runtime.h"

namespace causalconv {
namespace {

constexpr const char* kOp = "causal_conv1d";

// A (C, 1, K) weight reads like (C, K): its middle dim has size 1.
int64_t tap_stride(const TensorView& weight) { return weight.stride(weight.rank - 1); }

detail::DepthwiseForwardParams forward_params(const CausalConv1dForwardArgs& a, const detail::ConvGeometry& g) {
  detail::DepthwiseForwardParams p{};
  p.x = a.x.data;
  p.weight = a.weight.data;
  p.bias = a.bias ? a.bias->data : nullptr;
  p.y = a.y.data;
  p.dtype = a.x.dtype;
  p.batch = g.batch;
  p.channels = g.c_in;
  p.length = g.length;
  p.width = g.width;
  p.dilation = g.dilation;
  for (int d = 0; d < 3; ++d) {
    p.x_stride[d] = a.x.stride(d);
    p.y_stride[d] = a.y.stride(d);
  }
  p.w_stride[0] = a.weight.stride(0);
  p.w_stride[1] = tap_stride(a.weight);
  p.bias_stride = a.bias ? a.bias->stride(0) : 0;
  p.silu = g.activation == Activation::silu;
  return p;
}

void copy_strides(int64_t (&dst)[3], const TensorView& t) {
  for (int d = 0; d < 3; ++d) dst[d] = t.stride(d);
}

detail::DepthwiseBackwardParams backward_params(const CausalConv1dBackwardArgs& a, const detail::ConvGeometry& g) {
  detail::DepthwiseBackwardParams p{};
  p.x = a.x.data;
  p.weight = a.weight.data;
  p.bias = a.bias ? a.bias->data : nullptr;
  p.dy = a.dy.data;
  p.dx = a.dx ? a.dx->data : nullptr;
  p.dweight = a.dweight ? a.dweight->data : nullptr;
  p.dbias = a.dbias ? a.dbias->data : nullptr;
  p.dtype = a.x.dtype;
  p.batch = g.batch;
  p.channels = g.c_in;
  p.length = g.length;
  p.width = g.width;
  p.dilation = g.dilation;
  copy_strides(p.x_stride, a.x);
  copy_strides(p.dy_stride, a.dy);
  if (a.dx) copy_strides(p.dx_stride, *a.dx);
  p.w_stride[0] = a.weight.stride(0);
  p.w_stride[1] = tap_stride(a.weight);
  p.dw_stride[0] = a.dweight ? a.dweight->stride(0) : 0;
  p.dw_stride[1] = a.dweight ? tap_stride(*a.dweight) : 0;
  p.bias_stride = a.bias ? a.bias->stride(0) : 0;
  p.dbias_stride = a.dbias ? a.dbias->stride(0) : 0;
  p.silu = g.activation == Activation::silu;
  if (!detail::depthwise_backward_takes_channel_last(p)) {  // the other kernels read rows
    detail::check_unit_time_stride(kOp, "x", a.x);
    detail::check_unit_time_stride(kOp, "dy", a.dy);
    if (a.dx) detail::check_unit_time_stride(kOp, "dx", *a.dx);
  }
  return p;
}

// Asks the device once per call whether the Hopper kernels can run; every kernel choice reads it.
detail::DenseGeometry dense_geometry(const detail::ConvGeometry& g, DType dtype, int device) {
  return detail::DenseGeometry{g.batch,  g.c_in, g.c_out, g.length, g.width, g.dilation, g.groups,
                               dtype, g.activation == Activation::silu, detail::dense_wgmma_available(device)};
}

detail::DenseForwardParams dense_forward_params(const CausalConv1dForwardArgs& a, const detail::ConvGeometry& g) {
  detail::DenseForwardParams p{};
  p.g = dense_geometry(g, a.x.dtype, a.x.device.index);
  p.x = a.x.data;
  p.weight = a.weight.data;
  p.bias = a.bias ? a.bias->data : nullptr;
  p.y = a.y.data;
  copy_strides(p.x_stride, a.x);
  copy_strides(p.y_stride, a.y);
  copy_strides(p.w_stride, a.weight);  // rank 3: a rank-2 weight is always depthwise
  p.bias_stride = a.bias ? a.bias->stride(0) : 0;
  return p;
}

detail::DenseBackwardParams dense_backward_params(const CausalConv1dBackwardArgs& a, const detail::ConvGeometry& g) {
  detail::DenseBackwardParams p{};
  p.g = dense_geometry(g, a.x.dtype, a.x.device.index);
  p.x = a.x.data;
  p.weight = a.weight.data;
  p.bias = a.bias ? a.bias->data : nullptr;
  p.dy = a.dy.data;
  p.dx = a.dx ? a.dx->data : nullptr;
  p.dweight = a.dweight ? a.dweight->data : nullptr;
  p.dbias = a.dbias ? a.dbias->data : nullptr;
  copy_strides(p.x_stride, a.x);
  copy_strides(p.dy_stride, a.dy);
  if (a.dx) copy_strides(p.dx_stride, *a.dx);
  copy_strides(p.w_stride, a.weight);
  if (a.dweight) copy_strides(p.dw_stride, *a.dweight);
  p.bias_stride = a.bias ? a.bias->stride(0) : 0;
  p.dbias_stride = a.dbias ? a.dbias->stride(0) : 0;
  if (a.saved_x.data) {  // read by the Hopper weight gradient only; ignored elsewhere
    const size_t needed = detail::dense_wgmma_weight_grad_saved_x_bytes(p);
    detail::check_buffer(kOp, "saved_x", needed, a.saved_x.data, a.saved_x.bytes);
    if (needed > 0) p.saved_x = a.saved_x.data;
  }
  return p;
}

// Kernel choice for dense/grouped forward: the Hopper tensor-core kernel where it applies,
// else the mma.sync tensor-core kernel when the groups are wide enough (see
// dense_tc_forward_supported), else the generic CUDA-core kernel.
enum class DenseForwardKernel { wgmma, mma_sync, generic };

DenseForwardKernel dense_forward_kernel(const detail::DenseForwardParams& p) {
  if (detail::dense_wgmma_forward_supported(p)) return DenseForwardKernel::wgmma;
  return detail::dense_tc_forward_supported(p.g) ? DenseForwardKernel::mma_sync : DenseForwardKernel::generic;
}

// The copy of x the forward can keep for the backward (dense_wgmma_saved_x_bytes).
size_t saved_x_bytes(const detail::DenseForwardParams& p) {
  return dense_forward_kernel(p) == DenseForwardKernel::wgmma ? detail::dense_wgmma_saved_x_bytes(p) : 0;
}

// The dense forward's parameters, with the caller's saved_x where the forward keeps a copy of x
// (checked to be large enough; ignored where it keeps none).
detail::DenseForwardParams dense_forward_call(const CausalConv1dForwardArgs& a, const detail::ConvGeometry& g) {
  detail::DenseForwardParams p = dense_forward_params(a, g);
  if (a.saved_x.data) {
    const size_t needed = saved_x_bytes(p);
    detail::check_buffer(kOp, "saved_x", needed, a.saved_x.data, a.saved_x.bytes);
    if (needed > 0) p.saved_x = a.saved_x.data;
  }
  return p;
}

size_t forward_workspace_bytes(const CausalConv1dForwardArgs& a, const detail::ConvGeometry& g) {
  if (g.depthwise || g.batch * g.c_out * g.length == 0) return 0;
  const detail::DenseForwardParams p = dense_forward_call(a, g);
  switch (dense_forward_kernel(p)) {
    case DenseForwardKernel::wgmma: return detail::dense_wgmma_forward_workspace_bytes(p);
    case DenseForwardKernel::mma_sync: return detail::dense_tc_forward_workspace_bytes(p.g);
    case DenseForwardKernel::generic: break;
  }
  return 0;
}

size_t backward_workspace_bytes(const CausalConv1dBackwardArgs& a, const detail::ConvGeometry& g) {
  if (g.depthwise) return detail::depthwise_backward_workspace_bytes(backward_params(a, g));
  return detail::dense_backward_workspace_bytes(dense_backward_params(a, g));
}

}  // namespace

size_t causal_conv1d_forward_workspace_bytes(const CausalConv1dForwardArgs& args) {
  const detail::ConvGeometry g = detail::validate(args, detail::Target::cuda);
  return forward_workspace_bytes(args, g);
}

void causal_conv1d_forward(const CausalConv1dForwardArgs& args, Workspace workspace, Stream stream) {
  const detail::ConvGeometry g = detail::validate(args, detail::Target::cuda);
  const size_t needed = forward_workspace_bytes(args, g);
  detail::check_workspace(kOp, needed, workspace.data, workspace.bytes);
  if (g.batch * g.c_out * g.length == 0) return;
  detail::DeviceGuard guard(args.x.device.index);
  if (g.depthwise) {
    detail::launch_depthwise_forward(forward_params(args, g), stream);
    return;
  }
  detail::DenseForwardParams p = dense_forward_call(args, g);
  p.workspace = workspace.data;
  switch (dense_forward_kernel(p)) {
    case DenseForwardKernel::wgmma: detail::launch_dense_wgmma_forward(p, stream); break;
    case DenseForwardKernel::mma_sync: detail::launch_dense_tc_forward(p, stream); break;
    case DenseForwardKernel::generic: detail::launch_dense_forward_generic(p, stream); break;
  }
}

size_t causal_conv1d_saved_x_bytes(const CausalConv1dForwardArgs& args) {
  const detail::ConvGeometry g = detail::validate(args, detail::Target::cuda);
  if (g.depthwise || g.batch * g.c_out * g.length == 0) return 0;
  return saved_x_bytes(dense_forward_params(args, g));
}

size_t causal_conv1d_backward_workspace_bytes(const CausalConv1dBackwardArgs& args) {
  const detail::ConvGeometry g = detail::validate(args, detail::Target::cuda);
  return backward_workspace_bytes(args, g);
}

void causal_conv1d_backward(const CausalConv1dBackwardArgs& args, Workspace workspace, Stream stream) {
  const detail::ConvGeometry g = detail::validate(args, detail::Target::cuda);
  const size_t needed = backward_workspace_bytes(args, g);
  detail::check_workspace(kOp, needed, workspace.data, workspace.bytes);
  if (g.depthwise && g.c_out == 0) return;
  detail::DeviceGuard guard(args.x.device.index);
  if (g.depthwise)
    detail::launch_depthwise_backward(backward_params(args, g), workspace.data, stream);
  else  // every empty case is handled inside: e.g. C_out == 0 still zeroes dx, B*L == 0 zeroes dweight
    detail::launch_dense_backward(dense_backward_params(args, g), workspace.data, stream);
}

}  // namespace causalconv
