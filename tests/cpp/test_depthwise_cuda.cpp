// Depthwise causal_conv1d CUDA forward against the fp64 reference. Skips without a GPU.
// (Test names contain "Cuda": scripts/gpu-check runs these under compute-sanitizer.)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "causalconv/causalconv.h"
#include "device_tensor.h"
#include "host_tensor.h"
#include "padded_tensors.h"  // absolute, expect_close

namespace causalconv {
namespace {

using test::HostTensor;

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

using test::DeviceTensor;

struct Case {
  int64_t batch, channels, length, width, dilation;
  bool bias, silu;
  test::Layout layout;
};

template <typename T>
void check_against_reference(const Case& c, double bound) {
  HostTensor x({c.batch, c.channels, c.length}, c.layout), w({c.channels, c.width}), b({c.channels});
  HostTensor y({c.batch, c.channels, c.length}, c.layout), expected({c.batch, c.channels, c.length});
  std::random_device seed;
  x.fill_uniform(seed());
  w.fill_uniform(seed());
  b.fill_uniform(seed());
  y.fill_nan();

  DeviceTensor<T> dx(x), dw(w), db(b), dy(y);
  CausalConv1dForwardArgs args;
  args.x = dx.view();
  args.weight = dw.view();
  if (c.bias) args.bias = db.view();
  args.y = dy.view();
  args.dilation = c.dilation;
  args.groups = c.channels;
  args.activation = c.silu ? Activation::silu : Activation::none;

  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  ASSERT_EQ(causal_conv1d_forward_workspace_bytes(args), 0u);
  causal_conv1d_forward(args, Workspace{}, Stream{stream});
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaStreamDestroy(stream));
  dy.copy_to_host();

  CausalConv1dForwardArgs ref = args;
  ref.x = x.view();
  ref.weight = w.view();
  if (c.bias) ref.bias = b.view();
  ref.y = expected.view();
  reference::causal_conv1d_forward(ref);

  // Relative L2 with the terms' magnitude (the forward on absolute values, before silu) standing in
  // where they cancel, as the Python tests: fp32 on the tf32 tensor-core form is off by ~2^-22 of
  // each term, not of the sum.
  HostTensor magnitude({c.batch, c.channels, c.length});
  const HostTensor x_abs = test::absolute(x), w_abs = test::absolute(w), b_abs = test::absolute(b);
  ref.x = x_abs.view();
  ref.weight = w_abs.view();
  if (c.bias) ref.bias = b_abs.view();
  ref.y = magnitude.view();
  ref.activation = Activation::none;
  reference::causal_conv1d_forward(ref);
  SCOPED_TRACE(::testing::Message() << "B" << c.batch << " C" << c.channels << " L" << c.length << " K" << c.width
                                    << " d" << c.dilation << " max abs error " << test::max_abs_diff(y, expected));
  test::expect_close(y, expected, magnitude, bound, 0.0, "y");
}

const Case kCases[] = {
    {2, 7, 1000, 4, 1, false, false, test::Layout::contiguous},
    {1, 3, 1, 4, 1, true, false, test::Layout::contiguous},      // L = 1
    {3, 5, 3, 5, 2, true, true, test::Layout::contiguous},       // L < K
    {2, 6, 777, 31, 3, true, true, test::Layout::strided},       // non-contiguous
    {1, 2, 700, 256, 1, false, true, test::Layout::contiguous},  // widest
    {4, 1, 129, 2, 5, true, false, test::Layout::strided},       // C = 1
};

TEST(DepthwiseForwardCuda, Float32MatchesReference) {
  REQUIRE_GPU();
  for (const Case& c : kCases) check_against_reference<float>(c, 1e-6);
}

TEST(DepthwiseForwardCuda, Float16MatchesReference) {
  REQUIRE_GPU();
  for (const Case& c : kCases) check_against_reference<__half>(c, 2e-3);
}

TEST(DepthwiseForwardCuda, BFloat16MatchesReference) {
  REQUIRE_GPU();
  for (const Case& c : kCases) check_against_reference<__nv_bfloat16>(c, 1e-2);
}

TEST(DepthwiseForwardCuda, ChannelLastMatchesReference) {
  REQUIRE_GPU();
  // (B, C, L) view of (B, L, C) storage: stride(1) == 1.
  const int64_t batch = 2, channels = 48, length = 333, width = 7;
  HostTensor x_blc({batch, length, channels}), y_blc({batch, length, channels});
  x_blc.fill_uniform(7);
  y_blc.fill_nan();
  HostTensor w({channels, width}), expected({batch, channels, length});
  w.fill_uniform(8);
  DeviceTensor<float> dx(x_blc), dw(w), dy(y_blc);

  auto as_bcl = [](TensorView v) {
    std::swap(v.sizes[1], v.sizes[2]);
    std::swap(v.strides[1], v.strides[2]);
    return v;
  };
  CausalConv1dForwardArgs args;
  args.x = as_bcl(dx.view());
  args.weight = dw.view();
  args.y = as_bcl(dy.view());
  args.groups = channels;
  causal_conv1d_forward(args, Workspace{}, Stream{});
  CUDA_OK(cudaDeviceSynchronize());
  dy.copy_to_host();

  CausalConv1dForwardArgs ref = args;
  ref.x = as_bcl(x_blc.view());
  ref.weight = w.view();
  ref.y = expected.view();
  reference::causal_conv1d_forward(ref);
  double worst = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t t = 0; t < length; ++t) worst = std::max(worst, std::abs(y_blc(b, t, c) - expected(b, c, t)));
  EXPECT_LE(worst, 1e-5);
}

}  // namespace
}  // namespace causalconv
