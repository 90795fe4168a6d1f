// CPU fp64 reference of every op: the executable spec the tests compare against.
// All views must be fp64 on the CPU; any strides. Written for clarity, not speed.
#pragma once

#include "causalconv/ops.h"

namespace causalconv::reference {

void causal_conv1d_forward(const CausalConv1dForwardArgs& args);
void causal_conv1d_backward(const CausalConv1dBackwardArgs& args);
void b2b_causal_conv1d_forward(const B2BCausalConv1dForwardArgs& args);
void b2b_causal_conv1d_backward(const B2BCausalConv1dBackwardArgs& args);

}  // namespace causalconv::reference
