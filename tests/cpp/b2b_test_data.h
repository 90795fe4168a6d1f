// Test data of b2b_causal_conv1d for the emulated and the CUDA kernel tests: its fp64 references
// (the tensors in storage types with padded strides: padded_tensors.h).
#pragma once

#include "causalconv/reference.h"
#include "host_tensor.h"
#include "padded_tensors.h"

namespace causalconv::test {

// The fp64 reference forward of one set of inputs.
inline HostTensor b2b_forward_reference(const HostTensor& x, const HostTensor& wp, const HostTensor& wm,
                                        const HostTensor& skip) {
  HostTensor out({x.sizes()[0], wm.sizes()[0], x.sizes()[2]});
  reference::b2b_causal_conv1d_forward({x.view(), wp.view(), wm.view(), skip.view(), out.view()});
  return out;
}

// The fp64 reference forward and backward of one set of inputs.
struct B2BReference {
  HostTensor out, dx, dwp, dwm, dskip;

  B2BReference(const HostTensor& x, const HostTensor& wp, const HostTensor& wm, const HostTensor& skip,
               const HostTensor& dout)
      : out(b2b_forward_reference(x, wp, wm, skip)), dx(x.sizes()), dwp(wp.sizes()), dwm(wm.sizes()),
        dskip(skip.sizes()) {
    reference::b2b_causal_conv1d_backward({x.view(), wp.view(), wm.view(), skip.view(), dout.view(), dx.view(),
                                           dwp.view(), dwm.view(), dskip.view()});
  }
};

// The same reference on the inputs' absolute values: every output and gradient is a sum of
// products of inputs, so this bounds each element's sum of |terms| -- the scale its rounding
// errors have, however much the terms cancel (tiny shapes: a few terms, often nearly opposite).
inline B2BReference b2b_magnitudes(const HostTensor& x, const HostTensor& wp, const HostTensor& wm,
                                   const HostTensor& skip, const HostTensor& dout) {
  return B2BReference(absolute(x), absolute(wp), absolute(wm), absolute(skip), absolute(dout));
}

}  // namespace causalconv::test
