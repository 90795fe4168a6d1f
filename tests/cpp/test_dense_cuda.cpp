// Dense and grouped causal_conv1d on CUDA (forward and backward) against the fp64
// reference. Skips without a GPU. (Test names contain "Cuda": scripts/gpu-check runs
// these under compute-sanitizer.) Outputs are poisoned with NaN before each call, so an
// element a kernel forgets to write fails the comparison.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "causalconv/causalconv.h"
#include "device_tensor.h"
#include "expect_error.h"
#include "host_tensor.h"

namespace causalconv {
namespace {

using test::DeviceBuffer;
using test::DeviceTensor;
using test::HostTensor;
using test::Layout;

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

struct Case {
  int64_t batch, c_in, c_out, length, width, dilation, groups;
  bool bias, silu;
  Layout layout;  // of x, y, dy, dx, weight and dweight
};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << "B" << c.batch << " C_in" << c.c_in << " C_out" << c.c_out << " L" << c.length << " K" << c.width << " d"
    << c.dilation << " groups" << c.groups << (c.bias ? " bias" : "") << (c.silu ? " silu" : "")
    << (c.layout == Layout::strided ? " strided" : "");
  return s.str();
}

// Relative L2 bounds against fp64. fp32: the tensor-core path computes with a bf16
// hi/lo split of each operand (~2^-17 relative per product), so 2e-5 rather than the
// 1e-6 of pure fp32 FMA; weight gradients are sums over B*L terms.
template <typename T>
double bound(bool reduction) {
  if constexpr (std::is_same_v<T, float>) return reduction ? 3e-5 : 2e-5;
  if constexpr (std::is_same_v<T, __half>) return 2e-3;
  return 1e-2;
}

const Case kCases[] = {
    {2, 3, 5, 100, 4, 1, 1, true, false, Layout::contiguous},      // odd channels, dense
    {1, 257, 129, 37, 3, 2, 1, true, true, Layout::contiguous},    // channels past a tile
    {2, 6, 10, 50, 7, 3, 2, false, true, Layout::strided},         // grouped, non-contiguous
    {1, 6, 12, 20, 1, 1, 6, true, false, Layout::contiguous},      // groups == C_in, K = 1
    {3, 8, 8, 5, 16, 3, 2, true, true, Layout::contiguous},        // L < K
    {1, 2, 3, 1, 64, 1, 1, true, false, Layout::contiguous},       // L = 1, widest
    {2, 64, 64, 300, 4, 1, 1, true, true, Layout::contiguous},     // tile multiples
    {1, 32, 48, 200, 64, 2, 1, false, false, Layout::strided},     // widest, strided
    {2, 48, 80, 333, 2, 40, 4, true, true, Layout::contiguous},    // long reach, 4 groups
    {1, 16, 16, 1031, 5, 1, 1, false, true, Layout::contiguous},   // several time tiles
};

void fill(HostTensor& t, std::mt19937_64& rng, double scale = 1.0) { t.fill_uniform(rng(), -scale, scale); }

template <typename T>
void check_forward(const Case& c) {
  SCOPED_TRACE(describe(c));
  std::mt19937_64 rng(std::random_device{}());
  HostTensor x({c.batch, c.c_in, c.length}, c.layout), w({c.c_out, c.c_in / c.groups, c.width}, c.layout);
  HostTensor b({c.c_out}), y({c.batch, c.c_out, c.length}, c.layout), expected({c.batch, c.c_out, c.length});
  fill(x, rng);
  fill(w, rng);
  fill(b, rng);
  y.fill_nan();
  DeviceTensor<T> dx(x), dw(w), db(b), dy(y);

  CausalConv1dForwardArgs args;
  args.x = dx.view();
  args.weight = dw.view();
  if (c.bias) args.bias = db.view();
  args.y = dy.view();
  args.dilation = c.dilation;
  args.groups = c.groups;
  args.activation = c.silu ? Activation::silu : Activation::none;
  DeviceBuffer ws(causal_conv1d_forward_workspace_bytes(args));
  causal_conv1d_forward(args, Workspace{ws.data(), ws.bytes()}, Stream{});
  CUDA_OK(cudaDeviceSynchronize());
  dy.copy_to_host();

  CausalConv1dForwardArgs ref = args;
  ref.x = x.view();
  ref.weight = w.view();
  if (c.bias) ref.bias = b.view();
  ref.y = expected.view();
  reference::causal_conv1d_forward(ref);
  EXPECT_LE(test::rel_l2(y, expected), bound<T>(false)) << "max abs error " << test::max_abs_diff(y, expected);
}

struct BackwardRun {
  HostTensor dx, dw, db;
};

template <typename T>
void check_backward(const Case& c) {
  SCOPED_TRACE(describe(c));
  std::mt19937_64 rng(std::random_device{}());
  HostTensor x({c.batch, c.c_in, c.length}, c.layout), w({c.c_out, c.c_in / c.groups, c.width}, c.layout);
  HostTensor b({c.c_out}), gy({c.batch, c.c_out, c.length}, c.layout);
  HostTensor gx({c.batch, c.c_in, c.length}, c.layout), gw({c.c_out, c.c_in / c.groups, c.width}, c.layout);
  HostTensor gb({c.c_out});
  fill(x, rng);
  fill(w, rng, 0.5);
  fill(b, rng);
  fill(gy, rng);
  gx.fill_nan();
  gw.fill_nan();
  gb.fill_nan();
  DeviceTensor<T> d_x(x), d_w(w), d_b(b), d_gy(gy), d_gx(gx), d_gw(gw), d_gb(gb);

  CausalConv1dBackwardArgs args;
  args.x = d_x.view();
  args.weight = d_w.view();
  if (c.bias) args.bias = d_b.view();
  args.dy = d_gy.view();
  args.dx = d_gx.view();
  args.dweight = d_gw.view();
  args.dbias = d_gb.view();
  args.dilation = c.dilation;
  args.groups = c.groups;
  args.activation = c.silu ? Activation::silu : Activation::none;
  DeviceBuffer ws(causal_conv1d_backward_workspace_bytes(args));
  causal_conv1d_backward(args, Workspace{ws.data(), ws.bytes()}, Stream{});
  CUDA_OK(cudaDeviceSynchronize());
  d_gx.copy_to_host();
  d_gw.copy_to_host();
  d_gb.copy_to_host();

  HostTensor ex({c.batch, c.c_in, c.length}), ew({c.c_out, c.c_in / c.groups, c.width}), eb({c.c_out});
  CausalConv1dBackwardArgs ref = args;
  ref.x = x.view();
  ref.weight = w.view();
  if (c.bias) ref.bias = b.view();
  ref.dy = gy.view();
  ref.dx = ex.view();
  ref.dweight = ew.view();
  ref.dbias = eb.view();
  reference::causal_conv1d_backward(ref);
  EXPECT_LE(test::rel_l2(gx, ex), bound<T>(false)) << "dx, max abs error " << test::max_abs_diff(gx, ex);
  EXPECT_LE(test::rel_l2(gw, ew), bound<T>(true)) << "dweight, max abs error " << test::max_abs_diff(gw, ew);
  EXPECT_LE(test::rel_l2(gb, eb), bound<T>(true)) << "dbias, max abs error " << test::max_abs_diff(gb, eb);
}

TEST(DenseForwardCuda, Float32MatchesReference) {
  REQUIRE_GPU();
  for (const Case& c : kCases) check_forward<float>(c);
}

TEST(DenseForwardCuda, Float16MatchesReference) {
  REQUIRE_GPU();
  for (const Case& c : kCases) check_forward<__half>(c);
}

TEST(DenseForwardCuda, BFloat16MatchesReference) {
  REQUIRE_GPU();
  for (const Case& c : kCases) check_forward<__nv_bfloat16>(c);
}

TEST(DenseBackwardCuda, Float32MatchesReference) {
  REQUIRE_GPU();
  for (const Case& c : kCases) check_backward<float>(c);
}

TEST(DenseBackwardCuda, Float16MatchesReference) {
  REQUIRE_GPU();
  for (const Case& c : kCases) check_backward<__half>(c);
}

TEST(DenseBackwardCuda, BFloat16MatchesReference) {
  REQUIRE_GPU();
  for (const Case& c : kCases) check_backward<__nv_bfloat16>(c);
}

// Shapes that reach the tensor-core forward (channel multiples of 16 and 32, long rows,
// a partial last time tile) and its edges next to the generic path.
TEST(DenseForwardCuda, TensorCoreShapesMatchReference) {
  REQUIRE_GPU();
  const Case cases[] = {
      {2, 128, 128, 700, 4, 1, 1, true, false, Layout::contiguous},
      {1, 96, 160, 515, 3, 5, 1, false, true, Layout::contiguous},
      {2, 64, 32, 129, 1, 1, 1, true, false, Layout::contiguous},
      {1, 32, 64, 64, 64, 1, 1, true, true, Layout::contiguous},
      {1, 128, 128, 260, 2, 100, 2, true, false, Layout::contiguous},
      {1, 48, 256, 77, 7, 2, 1, false, false, Layout::contiguous},
  };
  for (const Case& c : cases) {
    check_forward<float>(c);
    check_forward<__half>(c);
    check_forward<__nv_bfloat16>(c);
  }
}

// Shapes that reach the tensor-core dx and weight-gradient kernels (groups with at least 16
// input and 32 output channels, B*L > 0): ragged channel and time tiles, every tap split
// (K = 1, 5 with d = 9: 4 + 1 taps, 7: 4 + 3, 64, reach past 32 steps: 1 tap a chunk),
// several parts, silu (its gradient recomputed by the tensor-core forward, then fp32 into
// 16-bit operands), strided views; and the shapes just outside, which take the CUDA-core
// kernels.
TEST(DenseBackwardCuda, TensorCoreShapesMatchReference) {
  REQUIRE_GPU();
  const Case cases[] = {
      {2, 128, 128, 700, 4, 1, 1, true, false, Layout::contiguous},
      {1, 96, 160, 515, 3, 5, 1, false, true, Layout::contiguous},
      {2, 64, 32, 129, 1, 1, 1, true, false, Layout::contiguous},
      {1, 32, 64, 64, 64, 1, 1, true, true, Layout::contiguous},
      {1, 128, 128, 260, 2, 100, 2, true, false, Layout::contiguous},
      {1, 48, 256, 77, 7, 2, 1, false, false, Layout::contiguous},
      {2, 16, 32, 3000, 5, 9, 1, true, true, Layout::contiguous},
      {2, 64, 64, 500, 4, 2, 2, true, false, Layout::strided},
      {1, 32, 64, 200, 3, 2, 1, true, true, Layout::strided},      // silu gradient on tensor cores, strided dy
      {1, 15, 64, 300, 4, 1, 1, true, false, Layout::contiguous},  // 15 inputs: CUDA cores
      {1, 32, 31, 300, 4, 1, 1, true, true, Layout::contiguous},   // 31 outputs: CUDA cores
  };
  for (const Case& c : cases) {
    check_backward<float>(c);
    check_backward<__half>(c);
    check_backward<__nv_bfloat16>(c);
  }
}

void check_bitwise_deterministic(const Case& c) {
  std::mt19937_64 rng(11);
  HostTensor x({c.batch, c.c_in, c.length}), w({c.c_out, c.c_in / c.groups, c.width}), b({c.c_out});
  HostTensor gy({c.batch, c.c_out, c.length}), gx({c.batch, c.c_in, c.length});
  HostTensor gw({c.c_out, c.c_in / c.groups, c.width}), gb({c.c_out});
  fill(x, rng);
  fill(w, rng);
  fill(b, rng);
  fill(gy, rng);
  DeviceTensor<float> d_x(x), d_w(w), d_b(b), d_gy(gy), d_gx(gx), d_gw(gw), d_gb(gb);
  CausalConv1dBackwardArgs args;
  args.x = d_x.view();
  args.weight = d_w.view();
  args.bias = d_b.view();
  args.dy = d_gy.view();
  args.dx = d_gx.view();
  args.dweight = d_gw.view();
  args.dbias = d_gb.view();
  args.dilation = c.dilation;
  args.groups = c.groups;
  args.activation = Activation::silu;
  DeviceBuffer ws(causal_conv1d_backward_workspace_bytes(args));
  std::vector<unsigned char> first[3];
  for (int run = 0; run < 3; ++run) {
    causal_conv1d_backward(args, Workspace{ws.data(), ws.bytes()}, Stream{});
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<unsigned char> now[3] = {d_gx.bytes(), d_gw.bytes(), d_gb.bytes()};
    for (int i = 0; i < 3; ++i) {
      if (run == 0)
        first[i] = now[i];
      else
        EXPECT_EQ(first[i], now[i]) << "gradient " << i << " differs between identical runs";
    }
  }
}

// Weight gradients come from per-part partials reduced in a fixed order: identical bits,
// on the CUDA-core path (the first case) and the tensor-core one (the second).
TEST(DenseBackwardCuda, GradientsAreBitwiseDeterministic) {
  REQUIRE_GPU();
  for (const Case& c : {Case{3, 40, 24, 3000, 5, 2, 2, true, true, Layout::contiguous},
                        Case{2, 64, 96, 2000, 4, 1, 2, true, true, Layout::contiguous}}) {
    SCOPED_TRACE(describe(c));
    check_bitwise_deterministic(c);
  }
}

// Only the gradients asked for are written; a dbias-only call still gets dbias right
// (CUDA-core partials, then tensor-core ones).
void check_dbias_only(const Case& c) {
  std::mt19937_64 rng(5);
  HostTensor x({c.batch, c.c_in, c.length}), w({c.c_out, c.c_in / c.groups, c.width}), gy({c.batch, c.c_out, c.length});
  HostTensor gb({c.c_out}), eb({c.c_out}), ex({c.batch, c.c_in, c.length}), ew({c.c_out, c.c_in / c.groups, c.width});
  fill(x, rng);
  fill(w, rng);
  fill(gy, rng);
  gb.fill_nan();
  DeviceTensor<float> d_x(x), d_w(w), d_gy(gy), d_gb(gb);
  CausalConv1dBackwardArgs args;
  args.x = d_x.view();
  args.weight = d_w.view();
  args.dy = d_gy.view();
  args.dbias = d_gb.view();
  args.groups = c.groups;
  DeviceBuffer ws(causal_conv1d_backward_workspace_bytes(args));
  causal_conv1d_backward(args, Workspace{ws.data(), ws.bytes()}, Stream{});
  CUDA_OK(cudaDeviceSynchronize());
  d_gb.copy_to_host();
  CausalConv1dBackwardArgs ref = args;
  ref.x = x.view();
  ref.weight = w.view();
  ref.dy = gy.view();
  ref.dx = ex.view();
  ref.dweight = ew.view();
  ref.dbias = eb.view();
  reference::causal_conv1d_backward(ref);
  EXPECT_LE(test::rel_l2(gb, eb), 1e-5);
}

TEST(DenseBackwardCuda, OptionalGradientsMatchReference) {
  REQUIRE_GPU();
  for (const Case& c : {Case{2, 12, 20, 90, 3, 1, 4, true, false, Layout::contiguous},
                        Case{2, 32, 64, 90, 3, 1, 1, true, false, Layout::contiguous}}) {
    SCOPED_TRACE(describe(c));
    check_dbias_only(c);
  }
}

TEST(DenseBackwardCuda, ShortWorkspaceRejectedAndNothingWritten) {
  REQUIRE_GPU();
  HostTensor x({2, 8, 64}), w({6, 4, 3}), gy({2, 6, 64}), gx({2, 8, 64}), gw({6, 4, 3});
  x.fill_uniform(1);
  w.fill_uniform(2);
  gy.fill_uniform(3);
  gx.fill_nan();
  gw.fill_nan();
  DeviceTensor<float> d_x(x), d_w(w), d_gy(gy), d_gx(gx), d_gw(gw);
  CausalConv1dBackwardArgs args;
  args.x = d_x.view();
  args.weight = d_w.view();
  args.dy = d_gy.view();
  args.dx = d_gx.view();
  args.dweight = d_gw.view();
  args.groups = 2;
  args.activation = Activation::silu;
  const size_t needed = causal_conv1d_backward_workspace_bytes(args);
  ASSERT_GT(needed, 0u);
  DeviceBuffer ws(needed - 1);
  test::expect_invalid_argument(
      [&] { causal_conv1d_backward(args, Workspace{ws.data(), ws.bytes()}, Stream{}); }, "causal_conv1d",
      "workspace");
  CUDA_OK(cudaDeviceSynchronize());
  d_gx.copy_to_host();
  d_gw.copy_to_host();
  for (int64_t n = 0; n < gx.numel(); ++n) ASSERT_TRUE(std::isnan(gx.flat(n)));
  for (int64_t n = 0; n < gw.numel(); ++n) ASSERT_TRUE(std::isnan(gw.flat(n)));
}

// Degenerate sizes: C_out == 0 gives dx == 0; L == 0 gives zero weight gradients.
TEST(DenseBackwardCuda, EmptyDimensionsWriteZeros) {
  REQUIRE_GPU();
  {
    HostTensor x({2, 4, 10}), w({0, 2, 3}), gy({2, 0, 10}), gx({2, 4, 10});
    gx.fill_nan();
    DeviceTensor<float> d_x(x), d_w(w), d_gy(gy), d_gx(gx);
    CausalConv1dBackwardArgs args;
    args.x = d_x.view();
    args.weight = d_w.view();
    args.dy = d_gy.view();
    args.dx = d_gx.view();
    args.groups = 2;
    DeviceBuffer ws(causal_conv1d_backward_workspace_bytes(args));
    causal_conv1d_backward(args, Workspace{ws.data(), ws.bytes()}, Stream{});
    CUDA_OK(cudaDeviceSynchronize());
    d_gx.copy_to_host();
    EXPECT_EQ(test::max_abs_diff(gx, HostTensor({2, 4, 10})), 0.0);
  }
  {
    HostTensor x({2, 4, 0}), w({6, 4, 3}), gy({2, 6, 0}), gw({6, 4, 3}), gb({6});
    gw.fill_nan();
    gb.fill_nan();
    DeviceTensor<float> d_x(x), d_w(w), d_gy(gy), d_gw(gw), d_gb(gb);
    CausalConv1dBackwardArgs args;
    args.x = d_x.view();
    args.weight = d_w.view();
    args.dy = d_gy.view();
    args.dweight = d_gw.view();
    args.dbias = d_gb.view();
    args.groups = 1;
    DeviceBuffer ws(causal_conv1d_backward_workspace_bytes(args));
    causal_conv1d_backward(args, Workspace{ws.data(), ws.bytes()}, Stream{});
    CUDA_OK(cudaDeviceSynchronize());
    d_gw.copy_to_host();
    d_gb.copy_to_host();
    EXPECT_EQ(test::max_abs_diff(gw, HostTensor({6, 4, 3})), 0.0);
    EXPECT_EQ(test::max_abs_diff(gb, HostTensor({6})), 0.0);
  }
}

}  // namespace
}  // namespace causalconv
