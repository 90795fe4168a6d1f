// Launchers of the depthwise causal_conv1d kernels (implemented in .cu files).
#pragma once

#include <cstddef>
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

// Backward reads rows (unit stride along time for x, dy and dx) or channel-last data
// (unit channel stride for all three, reach up to kMaxChannelLastBackwardReach); batch
// strides are free.
struct DepthwiseBackwardParams {
  const void* x;
  const void* weight;
  const void* bias;  // nullptr: no bias (only read to recompute the silu input)
  const void* dy;
  void* dx;       // nullptr: not wanted
  void* dweight;  // nullptr: not wanted
  void* dbias;    // nullptr: not wanted
  DType dtype;
  int64_t batch, channels, length, width, dilation;
  int64_t x_stride[3], dy_stride[3], dx_stride[3];  // (b, c, t), in elements
  int64_t w_stride[2], dw_stride[2];                // (c, k)
  int64_t bias_stride, dbias_stride;
  bool silu;
};

// Scratch for the per-tile weight-gradient partials (reduced in a fixed order).
size_t depthwise_backward_workspace_bytes(const DepthwiseBackwardParams& p);
void launch_depthwise_backward(const DepthwiseBackwardParams& p, void* workspace, Stream stream);

// True when the backward takes p's channel-last layout as it is (else it needs rows).
bool depthwise_backward_takes_channel_last(const DepthwiseBackwardParams& p);

}  // namespace causalconv::detail

// Tensor-core forward (depthwise_forward_tc.cu): fp16/bf16 (and fp32 when its tf32 form's flag is
// on), dilation 1, kDepthwiseTcMinWidth <= K <= kDepthwiseTcMaxWidth, unit time stride of x and y.
// Launches and returns true when it takes the call, else returns false and launches nothing.
struct CUstream_st;  // cudaStream_t is CUstream_st*
namespace causalconv::detail {
constexpr int64_t kDepthwiseTcMinWidth = 9;  // K <= 8 with dilation 1 has the window kernel
constexpr int64_t kDepthwiseTcMaxWidth = 256;
bool try_launch_depthwise_forward_tc(const DepthwiseForwardParams& p, CUstream_st* stream);
// Tensor-core backward (depthwise_backward_tc.cu), same envelope with unit time stride of
// x, dy and dx: dx, and per-tile weight-gradient partials (nullptr: not wanted), one per
// (channel, batch, tile) as the tiled kernel's, for its ordered reduction. Returns false,
// launching nothing, else.
bool try_launch_depthwise_backward_tc(const DepthwiseBackwardParams& p, float* partials, CUstream_st* stream);
// Its tiles a row (its partials per (channel, batch)) when it takes p, else 0.
int64_t depthwise_backward_tc_tiles(const DepthwiseBackwardParams& p);
}  // namespace causalconv::detail
