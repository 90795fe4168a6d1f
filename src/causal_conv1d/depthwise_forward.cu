// Depthwise causal conv forward: a straightforward direct kernel, one thread per
// output element, fp32 accumulation, any strides. Correct for every shape in the
// envelope; not yet tuned (see docs/performance.md).
#include "causal_conv1d/depthwise_kernels.h"
#include "common/cuda_math.cuh"
#include "common/cuda_runtime.h"

namespace causalconv::detail {
namespace {

constexpr int kThreads = 256;

// channel_fastest: consecutive threads walk channels (coalesced for channel-last
// data); otherwise they walk time (coalesced for channel-first data).
template <typename T, bool channel_fastest>
__global__ void __launch_bounds__(kThreads) depthwise_forward_direct(DepthwiseForwardParams p) {
  const T* x = static_cast<const T*>(p.x);
  const T* w = static_cast<const T*>(p.weight);
  const T* bias = static_cast<const T*>(p.bias);
  T* y = static_cast<T*>(p.y);
  const int64_t total = p.batch * p.channels * p.length;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < total; i += int64_t(gridDim.x) * kThreads) {
    int64_t b, c, t;
    if (channel_fastest) {
      c = i % p.channels;
      t = (i / p.channels) % p.length;
      b = i / (p.channels * p.length);
    } else {
      t = i % p.length;
      c = (i / p.length) % p.channels;
      b = i / (p.length * p.channels);
    }
    const T* xc = x + b * p.x_stride[0] + c * p.x_stride[1];
    const T* wc = w + c * p.w_stride[0];
    float acc = bias ? to_float(bias[c * p.bias_stride]) : 0.0f;
    // Tap k reads x[t - (K-1-k)*d]; taps before the sequence start read the zero padding.
    const int64_t first_tap = p.width - 1 - min(t / p.dilation, p.width - 1);
    for (int64_t k = first_tap; k < p.width; ++k) {
      const int64_t src = t - (p.width - 1 - k) * p.dilation;
      acc += to_float(wc[k * p.w_stride[1]]) * to_float(xc[src * p.x_stride[2]]);
    }
    if (p.silu) acc = silu(acc);
    y[b * p.y_stride[0] + c * p.y_stride[1] + t * p.y_stride[2]] = from_float<T>(acc);
  }
}

template <typename T>
void launch_typed(const DepthwiseForwardParams& p, cudaStream_t stream) {
  const int64_t total = p.batch * p.channels * p.length;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, int64_t(1) << 20);
  const bool channel_fastest = p.x_stride[1] == 1 && p.y_stride[1] == 1 && p.channels > 1;
  if (channel_fastest)
    depthwise_forward_direct<T, true><<<unsigned(blocks), kThreads, 0, stream>>>(p);
  else
    depthwise_forward_direct<T, false><<<unsigned(blocks), kThreads, 0, stream>>>(p);
}

}  // namespace

void launch_depthwise_forward(const DepthwiseForwardParams& p, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  switch (p.dtype) {
    case DType::f32: launch_typed<float>(p, s); break;
    case DType::f16: launch_typed<__half>(p, s); break;
    case DType::bf16: launch_typed<__nv_bfloat16>(p, s); break;
    case DType::f64: break;  // rejected by validation
  }
  check_launch("causal_conv1d forward (depthwise)");
}

}  // namespace causalconv::detail
