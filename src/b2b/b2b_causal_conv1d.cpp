// b2b_causal_conv1d CUDA entry points: validate, check the layout and workspace, launch.
#include <string>

#include "b2b/b2b_kernels.h"
#include "b2b/validate.h"
#include "causalconv/error.h"
#include "common/cuda_runtime.h"

namespace causalconv {
namespace {

constexpr const char* kOp = "b2b_causal_conv1d";

void require_grid(const detail::B2BGeometry& g) {
  if (g.batch * g.dim > 2147483647)
    throw Error(ErrorKind::not_implemented, "b2b_causal_conv1d: more than 2^31-1 (batch, channel) rows (B*D = " +
                                                std::to_string(g.batch * g.dim) + ")");
}

detail::B2BForwardParams forward_params(const B2BCausalConv1dForwardArgs& a, const detail::B2BGeometry& g) {
  detail::check_unit_time_stride(kOp, "x", a.x);
  detail::check_unit_time_stride(kOp, "out", a.out);
  require_grid(g);
  detail::B2BForwardParams p{};
  p.x = a.x.data;
  p.weight_proj = a.weight_proj.data;
  p.weight_mixer = a.weight_mixer.data;
  p.skip_bias = a.skip_bias.data;
  p.out = a.out.data;
  p.dtype = a.x.dtype;
  p.batch = g.batch;
  p.dim = g.dim;
  p.length = g.length;
  p.proj_width = g.proj_width;
  p.mixer_width = g.mixer_width;
  for (int d = 0; d < 2; ++d) {
    p.x_stride[d] = a.x.stride(d);
    p.out_stride[d] = a.out.stride(d);
    p.wp_stride[d] = a.weight_proj.stride(d);
    p.wm_stride[d] = a.weight_mixer.stride(d);
  }
  p.skip_stride = a.skip_bias.stride(0);
  return p;
}

detail::B2BBackwardParams backward_params(const B2BCausalConv1dBackwardArgs& a, const detail::B2BGeometry& g) {
  detail::check_unit_time_stride(kOp, "x", a.x);
  detail::check_unit_time_stride(kOp, "dout", a.dout);
  detail::check_unit_time_stride(kOp, "dx", a.dx);
  require_grid(g);
  detail::B2BBackwardParams p{};
  p.x = a.x.data;
  p.weight_proj = a.weight_proj.data;
  p.weight_mixer = a.weight_mixer.data;
  p.skip_bias = a.skip_bias.data;
  p.dout = a.dout.data;
  p.dx = a.dx.data;
  p.dweight_proj = a.dweight_proj.data;
  p.dweight_mixer = a.dweight_mixer.data;
  p.dskip_bias = a.dskip_bias.data;
  p.dtype = a.x.dtype;
  p.batch = g.batch;
  p.dim = g.dim;
  p.length = g.length;
  p.proj_width = g.proj_width;
  p.mixer_width = g.mixer_width;
  for (int d = 0; d < 2; ++d) {
    p.x_stride[d] = a.x.stride(d);
    p.dout_stride[d] = a.dout.stride(d);
    p.dx_stride[d] = a.dx.stride(d);
    p.wp_stride[d] = a.weight_proj.stride(d);
    p.wm_stride[d] = a.weight_mixer.stride(d);
    p.dwp_stride[d] = a.dweight_proj.stride(d);
    p.dwm_stride[d] = a.dweight_mixer.stride(d);
  }
  p.skip_stride = a.skip_bias.stride(0);
  p.dskip_stride = a.dskip_bias.stride(0);
  return p;
}

}  // namespace

size_t b2b_causal_conv1d_forward_workspace_bytes(const B2BCausalConv1dForwardArgs& args) {
  forward_params(args, detail::validate(args, detail::Target::cuda));
  return 0;
}

void b2b_causal_conv1d_forward(const B2BCausalConv1dForwardArgs& args, Workspace /*workspace*/, Stream stream) {
  const detail::B2BGeometry g = detail::validate(args, detail::Target::cuda);
  const detail::B2BForwardParams p = forward_params(args, g);
  if (g.batch * g.dim * g.length == 0) return;
  detail::DeviceGuard guard(args.x.device.index);
  detail::launch_b2b_forward(p, stream);
}

size_t b2b_causal_conv1d_backward_workspace_bytes(const B2BCausalConv1dBackwardArgs& args) {
  const detail::B2BGeometry g = detail::validate(args, detail::Target::cuda);
  return detail::b2b_backward_workspace_bytes(backward_params(args, g));
}

void b2b_causal_conv1d_backward(const B2BCausalConv1dBackwardArgs& args, Workspace workspace, Stream stream) {
  const detail::B2BGeometry g = detail::validate(args, detail::Target::cuda);
  const detail::B2BBackwardParams p = backward_params(args, g);
  const size_t needed = detail::b2b_backward_workspace_bytes(p);
  detail::check_workspace(kOp, needed, workspace.data, workspace.bytes);
  if (g.dim == 0) return;  // every output is empty
  detail::DeviceGuard guard(args.x.device.index);
  detail::launch_b2b_backward(p, workspace.data, stream);
}

}  // namespace causalconv
