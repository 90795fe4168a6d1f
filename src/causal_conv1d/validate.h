// The one place where causal_conv1d arguments are checked (CUDA op and reference).
#pragma once

#include <cstdint>

#include "causalconv/ops.h"
#include "common/checks.h"

namespace causalconv::detail {

struct ConvGeometry {
  int64_t batch, c_in, c_out, length, width, dilation, groups;
  bool depthwise;  // groups == c_in == c_out
  Activation activation;
};

ConvGeometry validate(const CausalConv1dForwardArgs& args, Target target);
ConvGeometry validate(const CausalConv1dBackwardArgs& args, Target target);

}  // namespace causalconv::detail
