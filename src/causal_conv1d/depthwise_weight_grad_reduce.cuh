// The ordered reduction that finishes every depthwise backward path's weight gradients:
// dweight[c, k] (k < K) and dbias[c] (k = K) = the sum of channel c's per-part fp32 partials
// (laid out [c][part][K + 1]) in part order, so the result is bitwise the same run after run.
// Device code only (launched from depthwise_backward.cu), so that the emulated tests
// (tests/cpp/test_depthwise_window_emulated.cpp) can run it as host C++.
#pragma once

#include <cstdint>

#include "causal_conv1d/depthwise_kernels.h"
#include "common/cuda_math.cuh"

namespace causalconv::detail {
namespace {

// One thread per (c, k) slot, 256 to a block: with a block per channel, all but K + 1 of
// its threads idled and C = 4096 took 4096 blocks (~11 us on the H200 at K = 4).
constexpr int kReduceThreads = 256;

inline int64_t weight_grad_reduce_blocks(const DepthwiseBackwardParams& p) {
  return (p.channels * (p.width + 1) + kReduceThreads - 1) / kReduceThreads;
}

template <typename T>
__global__ void __launch_bounds__(kReduceThreads)
    depthwise_weight_grad_reduce(DepthwiseBackwardParams p, int64_t parts_per_channel, const float* partials) {
  const int64_t slots = p.width + 1;
  const int64_t i = int64_t(blockIdx.x) * kReduceThreads + threadIdx.x;
  if (i >= p.channels * slots) return;
  const int64_t c = i / slots, k = i - c * slots;
  const float s = sum_in_order(partials + c * parts_per_channel * slots + k, parts_per_channel, slots);
  if (k < p.width) {
    if (p.dweight) static_cast<T*>(p.dweight)[c * p.dw_stride[0] + k * p.dw_stride[1]] = from_float<T>(s);
  } else if (p.dbias) {
    static_cast<T*>(p.dbias)[c * p.dbias_stride] = from_float<T>(s);
  }
}

}  // namespace
}  // namespace causalconv::detail
