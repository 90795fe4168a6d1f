// causal_conv1d CUDA entry points: validate, then pick a kernel.
#include "causal_conv1d/depthwise_kernels.h"
#include "causal_conv1d/validate.h"
#include "causalconv/error.h"
#include "common/cuda_runtime.h"

namespace causalconv {

size_t causal_conv1d_forward_workspace_bytes(const CausalConv1dForwardArgs& args) {
  detail::validate(args, detail::Target::cuda);
  return 0;
}

void causal_conv1d_forward(const CausalConv1dForwardArgs& args, Workspace /*workspace*/, Stream stream) {
  const detail::ConvGeometry g = detail::validate(args, detail::Target::cuda);
  if (!g.depthwise)
    throw Error(ErrorKind::not_implemented,
                "causal_conv1d: dense and grouped convolution (groups=" + std::to_string(g.groups) +
                    ") has no CUDA kernel in this build yet; only depthwise (groups == C_in == C_out) does");
  if (g.batch * g.c_out * g.length == 0) return;

  detail::DepthwiseForwardParams p{};
  p.x = args.x.data;
  p.weight = args.weight.data;
  p.bias = args.bias ? args.bias->data : nullptr;
  p.y = args.y.data;
  p.dtype = args.x.dtype;
  p.batch = g.batch;
  p.channels = g.c_in;
  p.length = g.length;
  p.width = g.width;
  p.dilation = g.dilation;
  for (int d = 0; d < 3; ++d) {
    p.x_stride[d] = args.x.stride(d);
    p.y_stride[d] = args.y.stride(d);
  }
  // A (C, 1, K) weight reads like (C, K): its middle dim has size 1.
  p.w_stride[0] = args.weight.stride(0);
  p.w_stride[1] = args.weight.stride(args.weight.rank - 1);
  p.bias_stride = args.bias ? args.bias->stride(0) : 0;
  p.silu = g.activation == Activation::silu;

  detail::DeviceGuard guard(args.x.device.index);
  detail::launch_depthwise_forward(p, stream);
}

}  // namespace causalconv
