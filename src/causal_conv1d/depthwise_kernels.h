// Launchers of the depthwise causal_conv1d kernels (implemented in .cu files).
#pragma once

#include <cstdint>

#include "causalconv/ops.h"

namespace causalconv::detail {

struct DepthwiseForwardParams {
  const void* x;
  const void* weight;
  const void* bias;  // nullptr: no bias
  void* y;
  DType dtype;
  int64_t batch, channels, length, width, dilation;
  int64_t x_stride[3], y_stride[3];  // (b, c, t), in elements
  int64_t w_stride[2];               // (c, k)
  int64_t bias_stride;
  bool silu;
};

void launch_depthwise_forward(const DepthwiseForwardParams& p, Stream stream);

}  // namespace causalconv::detail
