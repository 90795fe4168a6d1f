// The tiled depthwise kernels (causal_conv1d/depthwise_tiled_kernels.cuh) run on the CPU under
// tests/cpp/cuda_emulation.h, both ways each makes its outputs: the tap loops and the register
// windows (consecutive outputs a thread, skewed staging, taps in chunks plus a tail, the outputs
// back through shared memory; the backward's dweight sums reduced by warp_transpose_sum8). Each
// case is checked against an fp64 brute force (the backward's weight gradients from its per-tile
// partials, summed in the reduction's order), and the two forwards against each other bit for bit
// (they add the same products in the same order). Cases:
// every tail length of the tap chunks, L = 1, L < K, partial and several tiles, blocks walking
// tiles, rows off the 16-byte boundaries, residue classes of a long dilated reach (strided
// sub-sequences), bias and silu.
// The GPU runs of the kernel: tests/python/test_causal_conv1d_depthwise.py.
#include "cuda_emulation.h"  // first: it sets up the emulated CUDA built-ins

#define depthwise_forward_tiled depthwise_forward_tiled_emulated
#define depthwise_backward_tiled depthwise_backward_tiled_emulated
#include "causal_conv1d/depthwise_tiled_kernels.cuh"
#undef depthwise_forward_tiled
#undef depthwise_backward_tiled

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "depthwise_emulated_checks.h"
#include "error_tally.h"
#include "storage_types.h"

namespace causalconv {
namespace {

namespace emu = causalconv::emulation;
using test::ErrorTally;
using test::widen;

struct Case {
  int64_t batch, channels, length, width, dilation;
  bool bias, silu;
  int64_t tiles_per_block = detail::kForwardTilesPerBlock;
};

// Rows `pitch` = L + 3 elements apart (only some 16-byte aligned), a batch stride of C rows.
template <typename T>
struct Rows {
  int64_t pitch, channels;
  std::vector<T> data;
  Rows(int64_t batch, int64_t c, int64_t length, double fill)
      : pitch(length + 3), channels(c), data(size_t(batch * c * (length + 3)), test::round_to(T{}, fill)) {}
  T& at(int64_t b, int64_t c, int64_t t) { return data[size_t((b * channels + c) * pitch + t)]; }
  const T& at(int64_t b, int64_t c, int64_t t) const { return data[size_t((b * channels + c) * pitch + t)]; }
  void set_strides(int64_t (&s)[3]) const {
    s[0] = channels * pitch;
    s[1] = pitch;
    s[2] = 1;
  }
};

template <typename T>
constexpr double ulp_of() {
  return std::is_same_v<T, float> ? 0x1p-21 : std::is_same_v<T, __half> ? 0x1p-10 : 0x1p-7;  // fp32: silu's expf and division
}

// Runs the kernel (the register window or the tap loop) over x into a fresh NaN-filled y.
template <typename T, bool kRegisterWindow>
Rows<T> run_kernel(const Case& cs, Rows<T>& x, std::vector<T>& w, std::vector<T>& bias) {
  const int64_t B = cs.batch, C = cs.channels, L = cs.length, K = cs.width;
  Rows<T> y(B, C, L, std::numeric_limits<double>::quiet_NaN());
  detail::DepthwiseForwardParams p{};
  test::set_common_params(p, w, cs.bias ? bias.data() : nullptr, B, C, L, K, cs.dilation, cs.silu);
  p.x = x.data.data();
  p.y = y.data.data();
  x.set_strides(p.x_stride);
  y.set_strides(p.y_stride);
  const detail::DepthwiseTiling tiling = detail::make_depthwise_tiling(B, C, L, K, cs.dilation, cs.tiles_per_block);
  const auto layout = detail::tiled_forward_smem(int(K), int(tiling.halo), kRegisterWindow);
  const emu::Dim3 grid{unsigned(tiling.sequences), unsigned(tiling.tile_blocks), 1};
  emu::launch(grid, detail::TiledForwardTile::kThreads, sizeof(float) * size_t(layout.total_words()), [&] {
    if (tiling.step == 1)
      detail::depthwise_forward_tiled_emulated<T, true, kRegisterWindow>(p, tiling);
    else
      detail::depthwise_forward_tiled_emulated<T, false, kRegisterWindow>(p, tiling);
  });
  return y;
}

template <typename T>
void run_case(const Case& cs) {
  SCOPED_TRACE(::testing::Message() << "B" << cs.batch << " C" << cs.channels << " L" << cs.length << " K" << cs.width
                                    << " d" << cs.dilation << " bias " << cs.bias << " silu " << cs.silu);
  const int64_t B = cs.batch, C = cs.channels, L = cs.length, K = cs.width, d = cs.dilation;
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<double> normal;
  Rows<T> x(B, C, L, std::numeric_limits<double>::quiet_NaN());  // NaN in the padding: never read
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < L; ++t) x.at(b, c, t) = test::round_to(T{}, normal(rng));
  std::vector<T> w(static_cast<size_t>(C * K)), bias(static_cast<size_t>(C));
  for (auto& v : w) v = test::round_to(T{}, normal(rng) / std::sqrt(double(K)));
  for (auto& v : bias) v = test::round_to(T{}, normal(rng));

  const detail::DepthwiseTiling tiling = detail::make_depthwise_tiling(B, C, L, K, d, cs.tiles_per_block);
  const bool window = tiling.dilation == 1;  // the register window's condition (besides the width)
  Rows<T> y_loop = run_kernel<T, false>(cs, x, w, bias);
  Rows<T> y_window = window ? run_kernel<T, true>(cs, x, w, bias) : y_loop;

  ErrorTally tally;
  int64_t differ = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t t = 0; t < L; ++t) {
        double want = cs.bias ? widen(bias[size_t(c)]) : 0.0, mag = std::abs(want);
        for (int64_t k = 0; k < K; ++k) {
          const int64_t src = t - (K - 1 - k) * d;
          if (src < 0) continue;
          const double term = widen(w[size_t(c * K + k)]) * widen(x.at(b, c, src));
          want += term;
          mag += std::abs(term);
        }
        // fp32 accumulation: ~1e-7 of the terms' magnitudes, carried through silu (slope < 1.1).
        if (cs.silu) want = want / (1.0 + std::exp(-want));
        const double got = widen(y_window.at(b, c, t));
        tally.add(got, want, ulp_of<T>() * std::abs(want) + 1.1e-6 * mag + 1e-7, "y", b, c, t);
        if (std::memcmp(&y_window.at(b, c, t), &y_loop.at(b, c, t), sizeof(T)) != 0) ++differ;
      }
      for (const Rows<T>* y : {&y_loop, &y_window})
        for (int64_t t = L; t < y->pitch; ++t)
          EXPECT_TRUE(std::isnan(widen(y->at(b, c, t)))) << "wrote past the end of row " << b << "," << c;
    }
  EXPECT_EQ(tally.bad, 0) << "elements out of tolerance";
  EXPECT_EQ(differ, 0) << "the register window and the tap loop differ";
}

const Case kCases[] = {
    {1, 1, 1, 9, 1, true, false},          // L = 1
    {1, 2, 20, 33, 1, false, true},        // L < K; a full chunk plus a tail of 1
    {2, 3, 2049, 9, 1, true, false},       // no full chunk: a tail of 9; a tile plus one step
    {1, 2, 5000, 16, 1, false, true},      // one full chunk, no tail; 3 tiles, partial last
    {1, 3, 4100, 17, 1, true, true},       // a tail of 1
    {1, 1, 3000, 31, 1, false, false},     // a tail of 15
    {2, 1, 2048, 128, 1, true, false},     // 8 full chunks; one whole tile
    {1, 2, 300, 255, 1, true, true},       // L < K, 15 chunks + 15
    {1, 1, 6000, 256, 1, false, true},     // 16 chunks
    {1, 1, 20000, 48, 1, true, false, 2},  // 10 tiles, 2 per block: blocks walk tiles
    {1, 2, 1000, 33, 33, true, false},     // reach 1056: 33 residue classes of 30-31 steps (L < K in each)
    {1, 1, 9000, 64, 20, false, true},     // reach 1260: 20 classes of 450 steps
    {1, 2, 3000, 20, 2, true, false},      // reach 38, not split: the tap loop only (dilation 2)
};

// dx and the weight gradients of the backward's two forms (the register window only where it
// applies: dilation 1 within the sequence).
template <typename T, bool kRegisterWindow>
void check_backward(const Case& cs) {
  SCOPED_TRACE(::testing::Message() << "backward, register window " << kRegisterWindow << ": B" << cs.batch << " C"
                                    << cs.channels << " L" << cs.length << " K" << cs.width << " d" << cs.dilation
                                    << " bias " << cs.bias << " silu " << cs.silu);
  const int64_t B = cs.batch, C = cs.channels, L = cs.length, K = cs.width, d = cs.dilation;
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<double> normal;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Rows<T> x(B, C, L, nan), dy(B, C, L, nan), dx(B, C, L, nan);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < L; ++t) {
        x.at(b, c, t) = test::round_to(T{}, normal(rng));
        dy.at(b, c, t) = test::round_to(T{}, normal(rng));
      }
  std::vector<T> w(static_cast<size_t>(C * K)), bias(static_cast<size_t>(C));
  for (auto& v : w) v = test::round_to(T{}, normal(rng) / std::sqrt(double(K)));
  for (auto& v : bias) v = test::round_to(T{}, normal(rng));

  const detail::DepthwiseTiling tiling = detail::make_depthwise_tiling(B, C, L, K, d, detail::kBackwardTilesPerBlock);
  const int64_t parts = tiling.residues * B * tiling.tiles;  // per channel
  std::vector<float> partials(size_t(C * parts * (K + 1)), std::numeric_limits<float>::quiet_NaN());
  detail::DepthwiseBackwardParams p{};
  test::set_common_params(p, w, cs.bias ? bias.data() : nullptr, B, C, L, K, d, cs.silu);
  p.x = x.data.data();
  p.dy = dy.data.data();
  p.dx = dx.data.data();
  x.set_strides(p.x_stride);
  dy.set_strides(p.dy_stride);
  dx.set_strides(p.dx_stride);
  const auto layout = detail::tiled_backward_smem(int(K), int(tiling.halo), kRegisterWindow);
  emu::launch({unsigned(tiling.sequences), unsigned(tiling.tile_blocks), 1}, detail::TiledBackwardTile::kThreads,
              sizeof(float) * size_t(layout.total_words()), [&] {
                if (tiling.step == 1)
                  detail::depthwise_backward_tiled_emulated<T, true, kRegisterWindow>(p, tiling, partials.data());
                else
                  detail::depthwise_backward_tiled_emulated<T, false, kRegisterWindow>(p, tiling, partials.data());
              });

  // g = dy * silu'(pre) in fp64, then dx and the weight gradients by brute force.
  ErrorTally dx_tally, dw_tally, db_tally;
  for (int64_t c = 0; c < C; ++c) {
    std::vector<double> dw(static_cast<size_t>(K + 1), 0.0), dw_abs(static_cast<size_t>(K + 1), 0.0);
    for (int64_t b = 0; b < B; ++b) {
      std::vector<double> g(static_cast<size_t>(L));
      for (int64_t t = 0; t < L; ++t) {
        double pre = cs.bias ? widen(bias[size_t(c)]) : 0.0;
        for (int64_t k = 0; k < K; ++k) {
          const int64_t src = t - (K - 1 - k) * d;
          if (src >= 0) pre += widen(w[size_t(c * K + k)]) * widen(x.at(b, c, src));
        }
        const double s = 1.0 / (1.0 + std::exp(-pre));
        g[size_t(t)] = widen(dy.at(b, c, t)) * (cs.silu ? s * (1.0 + pre * (1.0 - s)) : 1.0);
      }
      for (int64_t t = 0; t < L; ++t) {
        double want = 0.0, mag = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          const int64_t src = t - (K - 1 - k) * d;
          if (src >= 0) {
            dw[size_t(k)] += g[size_t(t)] * widen(x.at(b, c, src));
            dw_abs[size_t(k)] += std::abs(g[size_t(t)] * widen(x.at(b, c, src)));
          }
          const int64_t ahead = t + (K - 1 - k) * d;
          if (ahead < L) {
            want += widen(w[size_t(c * K + k)]) * g[size_t(ahead)];
            mag += std::abs(widen(w[size_t(c * K + k)]) * g[size_t(ahead)]);
          }
        }
        dw[size_t(K)] += g[size_t(t)];
        dw_abs[size_t(K)] += std::abs(g[size_t(t)]);
        dx_tally.add(widen(dx.at(b, c, t)), want, ulp_of<T>() * std::abs(want) + 2e-6 * mag + 1e-7, "dx", b, c, t);
      }
      for (int64_t t = L; t < dx.pitch; ++t)
        EXPECT_TRUE(std::isnan(widen(dx.at(b, c, t)))) << "wrote past the end of row " << b << "," << c;
    }
    for (int64_t k = 0; k <= K; ++k) {
      float sum = 0.0f;  // the reduction's order: parts in order
      for (int64_t part = 0; part < parts; ++part) sum += partials[size_t((c * parts + part) * (K + 1) + k)];
      (k < K ? dw_tally : db_tally).add(sum, dw[size_t(k)], 1e-5 * dw_abs[size_t(k)] + 1e-6, k < K ? "dw" : "db", 0, c, k);
    }
  }
  EXPECT_EQ(dx_tally.bad, 0) << "dx elements out of tolerance";
  EXPECT_EQ(dw_tally.bad + db_tally.bad, 0) << "weight-gradient elements out of tolerance";
}

template <typename T>
void run_backward_case(const Case& cs) {
  check_backward<T, false>(cs);
  const detail::DepthwiseTiling tiling =
      detail::make_depthwise_tiling(cs.batch, cs.channels, cs.length, cs.width, cs.dilation, 1);
  if (tiling.dilation == 1) check_backward<T, true>(cs);
}

const Case kBackwardCases[] = {
    {1, 1, 1, 9, 1, true, false},        // L = 1
    {1, 2, 20, 33, 1, false, false},     // L < K; taps 32 + 1 (the last chunk keeps one of 8)
    {2, 3, 2049, 9, 1, true, false},     // a tile plus one step (the second tile's look-ahead past L)
    {1, 2, 4100, 16, 1, false, false},   // 3 tiles, whole chunks
    {1, 1, 3000, 31, 1, true, true},     // silu: the tile's and the look-ahead's silu inputs
    {1, 2, 2300, 255, 1, false, true},   // silu, a look-ahead of 254 (a second window pass of 32 threads)
    {1, 2, 2100, 128, 1, true, false},   // 16 chunks
    {1, 1, 700, 255, 1, false, false},   // 31 chunks + 7 taps
    {1, 1, 1000, 33, 33, true, false},   // reach 1056: 33 residue classes of 30-31 steps (L < K in each)
    {1, 1, 9000, 64, 20, false, false},  // reach 1260: 20 classes of 450 steps
    {1, 2, 3000, 20, 2, true, false},    // reach 38, not split: the tap loops only
};

TEST(DepthwiseTiledBackwardEmulated, Float32) {
  for (const Case& c : kBackwardCases) run_backward_case<float>(c);
}
TEST(DepthwiseTiledBackwardEmulated, BFloat16) {
  for (const Case& c : kBackwardCases) run_backward_case<__nv_bfloat16>(c);
}

TEST(DepthwiseTiledForwardEmulated, Float32) {
  for (const Case& c : kCases) run_case<float>(c);
}
TEST(DepthwiseTiledForwardEmulated, Float16) {
  for (const Case& c : kCases) run_case<__half>(c);
}
TEST(DepthwiseTiledForwardEmulated, BFloat16) {
  for (const Case& c : kCases) run_case<__nv_bfloat16>(c);
}

}  // namespace
}  // namespace causalconv
