// The kernels' parameter structs for b2b test data (b2b_test_data.h), for the tests that run
// the b2b kernels directly (under the CPU emulation).
#pragma once

#include "b2b/b2b_kernels.h"
#include "b2b_test_data.h"

namespace causalconv::test {

template <typename T>
detail::B2BForwardParams b2b_forward_params(Activation<T>& x, Weight<T>& wp, Weight<T>& wm, Weight<T>& skip,
                                            Activation<T>& out) {
  detail::B2BForwardParams f{};
  f.x = x.data.data();
  f.weight_proj = wp.data.data();
  f.weight_mixer = wm.data.data();
  f.skip_bias = skip.data.data();
  f.out = out.data.data();
  f.dtype = dtype_of<T>();
  f.batch = x.batch;
  f.dim = wm.rows;
  f.length = x.length;
  f.proj_width = wp.cols;
  f.mixer_width = wm.cols;
  f.x_stride[0] = x.stride_b;
  f.x_stride[1] = x.stride_c;
  f.out_stride[0] = out.stride_b;
  f.out_stride[1] = out.stride_c;
  f.wp_stride[0] = 1;
  f.wp_stride[1] = wp.rows;
  f.wm_stride[0] = 1;
  f.wm_stride[1] = wm.rows;
  f.skip_stride = 1;
  return f;
}

// The weight-gradient outputs are optional (nullptr: kernels that only write partials).
template <typename T>
detail::B2BBackwardParams b2b_backward_params(Activation<T>& x, Weight<T>& wp, Weight<T>& wm, Weight<T>& skip,
                                              Activation<T>& dout, Activation<T>& dx, Weight<T>* dwp = nullptr,
                                              Weight<T>* dwm = nullptr, Weight<T>* dskip = nullptr) {
  detail::B2BBackwardParams g{};
  g.x = x.data.data();
  g.weight_proj = wp.data.data();
  g.weight_mixer = wm.data.data();
  g.skip_bias = skip.data.data();
  g.dout = dout.data.data();
  g.dx = dx.data.data();
  g.dweight_proj = dwp ? dwp->data.data() : nullptr;
  g.dweight_mixer = dwm ? dwm->data.data() : nullptr;
  g.dskip_bias = dskip ? dskip->data.data() : nullptr;
  g.dtype = dtype_of<T>();
  g.batch = x.batch;
  g.dim = wm.rows;
  g.length = x.length;
  g.proj_width = wp.cols;
  g.mixer_width = wm.cols;
  g.x_stride[0] = x.stride_b;
  g.x_stride[1] = x.stride_c;
  g.dout_stride[0] = dout.stride_b;
  g.dout_stride[1] = dout.stride_c;
  g.dx_stride[0] = dx.stride_b;
  g.dx_stride[1] = dx.stride_c;
  g.wp_stride[0] = g.dwp_stride[0] = 1;
  g.wp_stride[1] = g.dwp_stride[1] = wp.rows;
  g.wm_stride[0] = g.dwm_stride[0] = 1;
  g.wm_stride[1] = g.dwm_stride[1] = wm.rows;
  g.skip_stride = g.dskip_stride = 1;
  return g;
}

}  // namespace causalconv::test
