// Depthwise causal conv forward: a straightforward direct kernel, one thread per
// output element, fp32 accumulation, any strides. Correct for every shape in the
// envelope; not yet tuned (see docs/performance.md).
#include "causal_conv1d/depthwise_kernels.h"
#include "common/cuda_math.cuh"
#include "common/cuda_runtime.h"

namespace causalconv::detail {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGridX = 2147483647;  // grid-stride over rows beyond this
constexpr int64_t kMaxGridY = 65535;       // grid-stride over columns beyond this

// One output element per thread. A grid row is one (b, c) sequence for
// channel-first data (threads walk time) or one (b, t) step for channel-last
// data (threads walk channels), so neighbouring threads touch neighbouring
// addresses either way and index math stays out of the inner loop.
template <typename T, bool channel_last>
__global__ void __launch_bounds__(kThreads) depthwise_forward_direct(DepthwiseForwardParams p) {
  const T* x = static_cast<const T*>(p.x);
  const T* w = static_cast<const T*>(p.weight);
  const T* bias = static_cast<const T*>(p.bias);
  T* y = static_cast<T*>(p.y);
  const int64_t rows = channel_last ? p.batch * p.length : p.batch * p.channels;
  const int64_t cols = channel_last ? p.channels : p.length;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    for (int64_t col = int64_t(blockIdx.y) * kThreads + threadIdx.x; col < cols; col += int64_t(gridDim.y) * kThreads) {
      const int64_t b = channel_last ? row / p.length : row / p.channels;
      const int64_t c = channel_last ? col : row % p.channels;
      const int64_t t = channel_last ? row % p.length : col;
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
}

template <typename T>
void launch_typed(const DepthwiseForwardParams& p, cudaStream_t stream) {
  const bool channel_last = p.x_stride[1] == 1 && p.y_stride[1] == 1 && p.channels > 1;
  const int64_t rows = channel_last ? p.batch * p.length : p.batch * p.channels;
  const int64_t cols = channel_last ? p.channels : p.length;
  const dim3 grid(unsigned(std::min(rows, kMaxGridX)), unsigned(std::min((cols + kThreads - 1) / kThreads, kMaxGridY)));
  if (channel_last)
    depthwise_forward_direct<T, true><<<grid, kThreads, 0, stream>>>(p);
  else
    depthwise_forward_direct<T, false><<<grid, kThreads, 0, stream>>>(p);
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
