// The one place where b2b_causal_conv1d arguments are checked (CUDA op and reference).
#pragma once

#include <cstdint>

#include "causalconv/ops.h"
#include "common/checks.h"

namespace causalconv::detail {

struct B2BGeometry {
  int64_t batch, dim, length, proj_width, mixer_width;  // x is (batch, 3*dim, length)
};

B2BGeometry validate(const B2BCausalConv1dForwardArgs& args, Target target);
B2BGeometry validate(const B2BCausalConv1dBackwardArgs& args, Target target);

}  // namespace causalconv::detail
