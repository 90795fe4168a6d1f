// The tensor-core depthwise forward (blocked Toeplitz form) runs on the CPU under
// tests/cpp/cuda_emulation.h + mma_emulation.h, against an fp64 brute force: its
// fragment construction, swizzled staging, halos, causal padding, tile walks and
// partial tiles, checked element by element on a machine without a GPU. (The GPU run
// of the same kernel: tests/python/test_causal_conv1d_depthwise.py, test_tensor_core_path.)
#include "cuda_emulation.h"  // first: it sets up the emulated CUDA built-ins
#include "mma_emulation.h"

#define depthwise_forward_tc_kernel depthwise_forward_tc_kernel_emulated
#include "causal_conv1d/depthwise_forward_tc_kernel.cuh"
#undef depthwise_forward_tc_kernel

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "b2b_test_data.h"
#include "host_tensor.h"

namespace causalconv {
namespace {

using test::Activation;
using test::HostTensor;
using test::widen;
namespace emu = causalconv::emulation;

struct Case {
  int64_t batch, channels, length, width;
  bool bias, silu;
};

template <typename T, int kMaxBlocks>
void launch_emulated(const detail::DepthwiseForwardParams& p, int64_t tiles_per_block) {
  const int64_t tiles = (p.length + detail::ToeplitzTile::kOutputs - 1) / detail::ToeplitzTile::kOutputs;
  const int64_t tile_blocks = (tiles + tiles_per_block - 1) / tiles_per_block;
  emu::launch({unsigned(p.batch * p.channels), unsigned(tile_blocks), 1}, detail::ToeplitzTile::kThreads,
              size_t(detail::depthwise_tc_smem_bytes<kMaxBlocks>()),
              [&] { detail::depthwise_forward_tc_kernel_emulated<T, kMaxBlocks>(p, tiles); });
}

template <typename T>
void run_case(const Case& cs, int64_t tiles_per_block = 8) {
  SCOPED_TRACE(::testing::Message() << "B" << cs.batch << " C" << cs.channels << " L" << cs.length << " K"
                                    << cs.width << " bias " << cs.bias << " silu " << cs.silu);
  const int64_t B = cs.batch, C = cs.channels, L = cs.length, K = cs.width;
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<double> normal;
  Activation<T> x(B, C, L), y(B, C, L);
  std::vector<T> w(static_cast<size_t>(C * K)), bias(static_cast<size_t>(C));
  HostTensor xh({B, C, L});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < L; ++t) xh(b, c, t) = normal(rng);
  x.load(xh);
  for (auto& v : w) v = test::round_to(T{}, normal(rng) / std::sqrt(double(K)));
  for (auto& v : bias) v = test::round_to(T{}, normal(rng));

  detail::DepthwiseForwardParams p{};
  p.x = x.data.data();
  p.weight = w.data();
  p.bias = cs.bias ? bias.data() : nullptr;
  p.y = y.data.data();
  p.dtype = std::is_same<T, __half>::value ? DType::f16 : DType::bf16;
  p.batch = B;
  p.channels = C;
  p.length = L;
  p.width = K;
  p.dilation = 1;
  p.x_stride[0] = x.stride_b;
  p.x_stride[1] = x.stride_c;
  p.x_stride[2] = 1;
  p.y_stride[0] = y.stride_b;
  p.y_stride[1] = y.stride_c;
  p.y_stride[2] = 1;
  p.w_stride[0] = K;
  p.w_stride[1] = 1;
  p.bias_stride = 1;
  p.silu = cs.silu;
  const int blocks = detail::toeplitz_blocks(int(K));
  if (blocks <= 3)
    launch_emulated<T, 3>(p, tiles_per_block);
  else if (blocks <= 5)
    launch_emulated<T, 5>(p, tiles_per_block);
  else if (blocks <= 9)
    launch_emulated<T, 9>(p, tiles_per_block);
  else
    launch_emulated<T, 17>(p, tiles_per_block);

  // Element by element: the output's rounding plus fp32 accumulation error.
  const double ulp = std::is_same<T, __half>::value ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
  int64_t bad = 0;
  double err2 = 0, ref2 = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < L; ++t) {
        double acc = cs.bias ? widen(bias[size_t(c)]) : 0.0, mag = std::abs(acc);
        for (int64_t k = 0; k < K; ++k) {
          const int64_t src = t - (K - 1 - k);
          if (src < 0) continue;
          const double term = widen(w[size_t(c * K + k)]) * widen(x.at(b, c, src));
          acc += term;
          mag += std::abs(term);
        }
        if (cs.silu) {
          mag = std::abs(acc) + mag * 1e-6;
          acc = acc / (1.0 + std::exp(-acc));
        }
        const double got = widen(y.at(b, c, t));
        const double tol = ulp * std::abs(acc) + 1e-5 * mag + 1e-6;
        if (!(std::abs(got - acc) <= tol)) {
          if (bad < 5)
            ADD_FAILURE() << "y[" << b << "," << c << "," << t << "] = " << got << ", expected " << acc;
          ++bad;
        }
        err2 += (got - acc) * (got - acc);
        ref2 += acc * acc;
      }
  EXPECT_EQ(bad, 0) << "elements out of tolerance";
  const double bound = std::is_same<T, __half>::value ? 1e-3 : 4e-3;
  EXPECT_LE(std::sqrt(err2 / std::max(ref2, 1e-300)), bound);
  // Padding between rows stays untouched (NaN).
  EXPECT_TRUE(std::isnan(widen(y.data[size_t(L)]))) << "wrote past the end of a row";
}

TEST(DepthwiseTensorCoreEmulated, BFloat16) {
  run_case<__nv_bfloat16>({1, 1, 1, 16, false, false});     // L = 1
  run_case<__nv_bfloat16>({1, 2, 15, 9, true, false});      // narrowest TC width, L < 16
  run_case<__nv_bfloat16>({2, 1, 2100, 17, true, true});    // 2 tiles, partial second; 2 halo chunks
  run_case<__nv_bfloat16>({1, 1, 4093, 128, false, true});  // 16-byte aligned rows (stride 4096)
  run_case<__nv_bfloat16>({1, 1, 300, 256, true, false});   // L < K, widest
  run_case<__nv_bfloat16>({1, 1, 5000, 31, true, false}, 1);  // one tile per block: 3 blocks along the row
}

TEST(DepthwiseTensorCoreEmulated, Float16) {
  run_case<__half>({1, 3, 17, 255, true, true});
  run_case<__half>({1, 1, 6141, 64, false, false});  // aligned rows, 3 tiles walked by one block
  run_case<__half>({1, 1, 1000, 33, true, false});
}

}  // namespace
}  // namespace causalconv
