// The channel-last depthwise kernels (forward, and the dilation-1 backward with its
// per-block weight-gradient partials) run on the CPU under tests/cpp/cuda_emulation.h,
// against the fp64 reference: staging (cp.async and element paths), halos, causal
// padding, partial channel tiles, tile walks and the partials' layout, element by
// element. (On the GPU: tests/python/test_causal_conv1d_depthwise.py, test_channel_last_*.)
#include "cuda_emulation.h"  // first: it sets up the emulated CUDA built-ins

#define depthwise_forward_channel_last depthwise_forward_channel_last_emulated
#define depthwise_forward_channel_last_pipelined depthwise_forward_channel_last_pipelined_emulated
#define depthwise_forward_channel_last_lane_ring depthwise_forward_channel_last_lane_ring_emulated
#define depthwise_backward_channel_last_unit depthwise_backward_channel_last_unit_emulated
#define depthwise_backward_channel_last_warp_ring depthwise_backward_channel_last_warp_ring_emulated
#include "causal_conv1d/depthwise_channel_last_kernel.cuh"
#include "common/width_dispatch.h"
#undef depthwise_forward_channel_last
#undef depthwise_forward_channel_last_pipelined
#undef depthwise_forward_channel_last_lane_ring
#undef depthwise_backward_channel_last_unit
#undef depthwise_backward_channel_last_warp_ring

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <tuple>
#include <type_traits>
#include <vector>

#include "depthwise_emulated_checks.h"
#include "storage_types.h"
#include "causalconv/reference.h"
#include "host_tensor.h"

namespace causalconv {
namespace {

using test::count_bad;
using test::HostTensor;
using test::kPoison;
using test::kSentinel;
using test::rounded;
using test::widen;
namespace emu = causalconv::emulation;

struct Case {
  int64_t batch, channels, length, width, dilation;
  bool bias, silu;
  bool aligned = true;              // 16-byte aligned rows (cp.async staging) where C allows
  // 0: the launcher's choice; forward > 0: the pipelined kernel (dilation 1, K 2..8) walking that
  // many tiles per block, for fp32 too (the launcher takes it for 16-bit types only).
  int64_t tiles_per_block = 0;
  // The ring kernels (aligned rows, C % vector == 0, dilation 1), whatever the launcher would
  // take: forward per lane (K 2..8), backward per warp (K 2..4).
  enum class Ring { launcher, lane, warp } ring = Ring::launcher;
};

// A channel-last (B, C, L) tensor in storage type T: element (b, c, t) at
// b * stride_b + t * stride_t + c, rows padded past C and sequences past L; unaligned:
// the data starts one element into the buffer; padding holds `fill_value` (kPoison for
// inputs, kSentinel for outputs).

template <typename T>
struct ChannelLast {
  int64_t batch, channels, length, stride_t, stride_b, offset;
  double fill;
  std::vector<T> buffer;
  ChannelLast(int64_t b, int64_t c, int64_t l, bool aligned, double fill_value)
      : batch(b), channels(c), length(l), stride_t((c + 7) / 8 * 8 + 8), stride_b((l + 1) * stride_t),
        offset(aligned ? 0 : 1), fill(widen(test::round_to(T{}, fill_value))),
        buffer(size_t(b * stride_b + offset + 8), test::round_to(T{}, fill_value)) {}
  T* data() { return buffer.data() + offset; }
  T& at(int64_t b, int64_t c, int64_t t) { return data()[b * stride_b + t * stride_t + c]; }
  void load(HostTensor& h) {  // rounds h to T in place
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t t = 0; t < length; ++t) {
          at(b, c, t) = test::round_to(T{}, h(b, c, t));
          h(b, c, t) = widen(at(b, c, t));
        }
  }
  bool padding_untouched() {
    for (int64_t i = 0; i < int64_t(buffer.size()); ++i) {
      const int64_t j = i - offset, b = j / stride_b, t = (j % stride_b) / stride_t, c = j % stride_t;
      const bool element = j >= 0 && b < batch && t < length && c < channels;
      const double v = widen(buffer[size_t(i)]);
      if (!element && !(v == fill || (std::isnan(v) && std::isnan(fill)))) return false;
    }
    return true;
  }
};

template <typename T>
bool aligned_rows(const T* base, int64_t stride_b, int64_t stride_t) {
  const int64_t strides[2] = {stride_b, stride_t};
  return detail::vector_aligned<T>(base, strides, 2);
}

template <typename T>
void run_forward(const Case& cs) {
  SCOPED_TRACE(::testing::Message() << "forward B" << cs.batch << " C" << cs.channels << " L" << cs.length << " K"
                                    << cs.width << " d" << cs.dilation << " bias " << cs.bias << " silu " << cs.silu
                                    << " aligned " << cs.aligned);
  const int64_t B = cs.batch, C = cs.channels, L = cs.length, K = cs.width;
  std::random_device seed;
  HostTensor x({B, C, L}), w({C, K}), bias({C});
  x.fill_uniform(seed());
  w.fill_uniform(seed());
  bias.fill_uniform(seed());
  ChannelLast<T> x_e(B, C, L, cs.aligned, kPoison), y_e(B, C, L, cs.aligned, kSentinel);
  x_e.load(x);
  const std::vector<T> w_e = rounded<T>(w), bias_e = rounded<T>(bias);

  detail::DepthwiseForwardParams p{};
  test::set_common_params(p, w_e, cs.bias ? bias_e.data() : nullptr, B, C, L, K, cs.dilation, cs.silu);
  p.x = x_e.data();
  p.y = y_e.data();
  p.x_stride[0] = p.y_stride[0] = x_e.stride_b;
  p.x_stride[1] = p.y_stride[1] = 1;
  p.x_stride[2] = p.y_stride[2] = x_e.stride_t;
  const bool vectors = aligned_rows(x_e.data(), x_e.stride_b, x_e.stride_t);
  EXPECT_EQ(vectors, cs.aligned);
  // As try_launch_channel_last in depthwise_forward.cu picks the kernel.
  const bool launcher = cs.ring == Case::Ring::launcher && cs.tiles_per_block == 0;
  const bool lane_ring = cs.ring == Case::Ring::lane ||
                         (launcher && detail::channel_last_forward_lane_ring<T>(C, K, cs.dilation, vectors, cs.silu));
  if (lane_ring) {
    ASSERT_TRUE(vectors && C % detail::Vec16<T>::kElems == 0 && cs.dilation == 1 && K >= 2 && K <= 8);
    const detail::ChannelLastRingGrid g = detail::make_lane_ring_grid<T>(B, C, L);
    emu::launch({unsigned(g.blocks()), 1, 1}, detail::ChannelLastLaneRing::kThreads, detail::lane_ring_smem_bytes(),
                [&] {
                  detail::with_width<2, 8>(K, [&](auto k) {
                    detail::depthwise_forward_channel_last_lane_ring_emulated<T, decltype(k)::value>(p, g);
                  });
                });
  } else {
    detail::ChannelLastGrid g = detail::make_channel_last_grid<T>(B, C, L, K, cs.dilation, vectors, false);
    if (cs.tiles_per_block > 0) {
      g.tiles_per_block = cs.tiles_per_block;
      g.ranges = (g.time_tiles + g.tiles_per_block - 1) / g.tiles_per_block;
    }
    // As launch_channel_last in depthwise_forward.cu picks the kernel.
    const bool unrolled = cs.dilation == 1 && K <= detail::ChannelLastTile::kMaxUnrolledWidth;
    const bool pipelined = cs.tiles_per_block > 0 || detail::channel_last_forward_pipelined<T>(K, cs.dilation);
    ASSERT_TRUE(!pipelined || (unrolled && K >= 2));
    const size_t smem = pipelined ? detail::channel_last_forward_pipelined_smem_bytes<T>(K)
                                  : detail::channel_last_forward_smem_bytes<T>(K, g.halo);
    emu::launch({unsigned(B * g.blocks()), 1, 1}, detail::ChannelLastTile::kThreads, smem, [&] {
      if (pipelined) {
        detail::with_width<2, 8>(
            K, [&](auto k) { detail::depthwise_forward_channel_last_pipelined_emulated<T, decltype(k)::value>(p, g); });
        return;
      }
      if (!unrolled ||
          !detail::with_width<2, 8>(
              K, [&](auto k) { detail::depthwise_forward_channel_last_emulated<T, decltype(k)::value>(p, g); }))
        detail::depthwise_forward_channel_last_emulated<T, 0>(p, g);
    });
  }

  const HostTensor y_ref = test::reference_forward(x, w, cs.bias ? &bias : nullptr, cs.dilation, cs.silu);
  EXPECT_EQ(count_bad<T>("y", y_e, y_ref, test::forward_magnitude(x, w, cs.bias ? &bias : nullptr, cs.dilation)), 0);
  EXPECT_TRUE(y_e.padding_untouched()) << "wrote outside the output's elements";
}

template <typename T>
void run_backward(const Case& cs) {
  SCOPED_TRACE(::testing::Message() << "backward B" << cs.batch << " C" << cs.channels << " L" << cs.length << " K"
                                    << cs.width << " bias " << cs.bias << " silu " << cs.silu << " aligned "
                                    << cs.aligned << " tiles/block " << cs.tiles_per_block);
  ASSERT_EQ(cs.dilation, 1);
  const int64_t B = cs.batch, C = cs.channels, L = cs.length, K = cs.width;
  std::random_device seed;
  HostTensor x({B, C, L}), w({C, K}), bias({C}), dy({B, C, L});
  x.fill_uniform(seed());
  w.fill_uniform(seed());
  bias.fill_uniform(seed());
  dy.fill_uniform(seed());
  ChannelLast<T> x_e(B, C, L, cs.aligned, kPoison), dy_e(B, C, L, cs.aligned, kPoison),
      dx_e(B, C, L, cs.aligned, kSentinel);
  x_e.load(x);
  dy_e.load(dy);
  const std::vector<T> w_e = rounded<T>(w), bias_e = rounded<T>(bias);

  detail::DepthwiseBackwardParams p{};
  test::set_common_params(p, w_e, cs.bias ? bias_e.data() : nullptr, B, C, L, K, 1, cs.silu);
  p.x = x_e.data();
  p.dy = dy_e.data();
  p.dx = dx_e.data();
  for (int64_t* s : {p.x_stride, p.dy_stride, p.dx_stride}) {
    s[0] = x_e.stride_b;
    s[1] = 1;
    s[2] = x_e.stride_t;
  }
  const bool vectors = aligned_rows(x_e.data(), x_e.stride_b, x_e.stride_t);
  EXPECT_EQ(vectors, cs.aligned);
  // As launch_channel_last in depthwise_backward.cu picks the kernel.
  const bool warp_ring = cs.ring == Case::Ring::warp ||
                         (cs.tiles_per_block == 0 && detail::channel_last_backward_warp_ring<T>(C, K, 1, vectors));
  std::vector<float> partials;
  int64_t parts = 0;
  const auto by_width = [&](auto launch) {
    static_assert(detail::ChannelLastTile::kMaxBackwardWidth == detail::ChannelLastWarpRing::kMaxWidth,
                  "one range of widths");
    detail::with_width<2, detail::ChannelLastWarpRing::kMaxWidth>(K, launch);
  };
  if (warp_ring) {
    ASSERT_TRUE(vectors && C % detail::Vec16<T>::kElems == 0);
    const detail::WarpRingGrid g = detail::make_warp_ring_grid(B, C, L);
    parts = B * g.run_groups;
    partials.assign(size_t(C * parts * (K + 1)), std::numeric_limits<float>::quiet_NaN());
    emu::launch({unsigned(g.blocks), 1, 1}, detail::ChannelLastWarpRing::kThreads,
                detail::warp_ring_smem_bytes<T>(2), [&] {
                  by_width([&](auto width) {
                    constexpr int kWidth = decltype(width)::value;
                    if (cs.silu)
                      detail::depthwise_backward_channel_last_warp_ring_emulated<T, kWidth, true>(p, g, partials.data());
                    else
                      detail::depthwise_backward_channel_last_warp_ring_emulated<T, kWidth, false>(p, g,
                                                                                                  partials.data());
                  });
                });
  } else {
    detail::ChannelLastGrid g = detail::make_channel_last_grid<T>(B, C, L, K, 1, vectors, true);
    if (cs.tiles_per_block > 0) {
      g.tiles_per_block = cs.tiles_per_block;
      g.ranges = (g.time_tiles + g.tiles_per_block - 1) / g.tiles_per_block;
    }
    parts = B * g.ranges;
    partials.assign(size_t(C * parts * (K + 1)), std::numeric_limits<float>::quiet_NaN());
    emu::launch({unsigned(B * g.blocks()), 1, 1}, detail::ChannelLastTile::kThreads,
                detail::channel_last_backward_smem_bytes<T>(K), [&] {
                  by_width([&](auto width) {
                    constexpr int kWidth = decltype(width)::value;
                    if (cs.silu)
                      detail::depthwise_backward_channel_last_unit_emulated<T, kWidth, true>(p, g, partials.data());
                    else
                      detail::depthwise_backward_channel_last_unit_emulated<T, kWidth, false>(p, g, partials.data());
                  });
                });
  }

  const test::BackwardReference ref = test::reference_backward(x, w, cs.bias ? &bias : nullptr, dy, cs.silu);

  EXPECT_EQ(count_bad<T>("dx", dx_e, ref.dx, test::dx_magnitude(w, dy)), 0);
  EXPECT_TRUE(dx_e.padding_untouched()) << "wrote outside dx's elements";

  // Weight gradients: the partials summed in the reduction kernel's order, in fp32.
  EXPECT_EQ(test::count_bad_weight_grads(partials, parts, x, dy, ref.dw, ref.db), 0);
}

// Forward: every width path (unrolled K <= 8 with dilation 1, the tap loop otherwise),
// L = 1, L < K, partial channel tiles (C % 128 != 0, C % 8 != 0), unaligned rows,
// several time tiles, dilation 2 and 5, bias and silu on and off.
template <typename T>
void forward_cases() {
  const int64_t tile = detail::channel_last_tile_steps<T>();
  for (int64_t k : {2, 3, 4, 5, 7, 8, 16, 31, 64, 128, 256}) {
    run_forward<T>({1, 136, tile + 5, k, 1, true, k % 2 == 0});
    if (k <= 8) run_forward<T>({2, 24, 2 * tile + 1, k, 1, false, true, false});  // element staging
  }
  run_forward<T>({1, 16, 1, 4, 1, true, true});          // L = 1
  run_forward<T>({2, 40, 3, 8, 1, true, false});         // L < K
  run_forward<T>({1, 21, 40, 3, 1, true, true});  // C % 8 != 0: element staging on aligned rows, partial quads
  run_forward<T>({1, 256, 2 * tile, 4, 1, false, true}); // two full channel tiles
  run_forward<T>({2, 48, tile + 9, 4, 2, true, true});   // dilation 2 (tap loop)
  run_forward<T>({1, 130, 70, 5, 5, false, false});      // dilation 5
  run_forward<T>({1, 8, 30, 52, 5, true, true});         // reach 255: the longest staged halo
}

// The per-lane ring forward (dilation 1, K 2..8, aligned rows): runs of kRunSteps with a partial
// last run and chunk, a partial last channel tile (one valid lane of 32 at C = 8), the window
// before each run (t < 0 for the first), L = 1, L < K, a run of exactly kRunSteps.
template <typename T>
void lane_ring_forward_cases() {
  constexpr int64_t kRun = detail::ChannelLastLaneRing::kRunSteps;
  const int64_t tile = detail::lane_ring_channels<T>();
  for (int64_t k : {2, 3, 4, 5, 6, 7, 8}) {
    Case cs{2, tile + 8, 2 * kRun + 5, k, 1, k % 2 == 0, k % 3 != 0};
    cs.ring = Case::Ring::lane;
    run_forward<T>(cs);
  }
  for (const auto& [c, l, k] : {std::tuple<int64_t, int64_t, int64_t>{8, 1, 4}, {16, 3, 8}, {24, kRun, 4},
                                {tile, kRun + 1, 3}}) {
    Case cs{1, c, l, k, 1, true, true};
    cs.ring = Case::Ring::lane;
    run_forward<T>(cs);
  }
}

// The pipelined forward (dilation 1, K 2..8): ranges of tiles per block with a partial last range
// and a partial last tile, a range of one tile, element staging, L = 1, L < K, C % 8 != 0.
template <typename T>
void pipelined_forward_cases() {
  const int64_t tile = detail::channel_last_tile_steps<T>();
  for (int64_t k : {2, 3, 4, 5, 6, 7, 8}) {
    run_forward<T>({2, 136, 5 * tile + 3, k, 1, true, k % 2 == 1, true, 2});  // ranges of 2, 2, 2 (the last partial)
    run_forward<T>({1, 24, 3 * tile + 1, k, 1, k % 2 == 0, true, false, 4});   // element staging, 4 tiles in one range
  }
  run_forward<T>({1, 16, 1, 4, 1, true, true, true, 4});          // L = 1
  run_forward<T>({2, 40, 3, 8, 1, true, false, true, 4});         // L < K
  run_forward<T>({1, 21, 2 * tile + 40, 3, 1, true, true, true, 4});  // C % 8 != 0: element staging, partial quads
  run_forward<T>({1, 256, 2 * tile, 4, 1, false, true, true, 1});     // one tile per block, two channel tiles
}

// Backward (dilation 1, K <= 4): tile walks (several tiles per block, a partial last
// tile), L = 1, L < K, partial channel tiles, unaligned rows.
template <typename T>
void backward_cases() {
  const int64_t tile = detail::channel_last_tile_steps<T>();
  for (int64_t k : {2, 3, 4}) {
    for (bool silu : {false, true}) {
      run_backward<T>({2, 136, 2 * tile + 7, k, 1, silu, silu, true, 2});  // 3 tiles: 2 + 1 per sequence
      run_backward<T>({1, 24, tile + 1, k, 1, !silu, silu, false});        // element staging
    }
  }
  run_backward<T>({1, 16, 1, 4, 1, true, true});              // L = 1
  run_backward<T>({2, 40, 2, 3, 1, true, true, true, 1});     // L < K
  run_backward<T>({1, 21, 37, 2, 1, false, true});            // C % 8 != 0: element staging on aligned rows
  run_backward<T>({1, 128, 3 * tile, 4, 1, true, true, true, 4});  // one block walks the whole sequence
}

// The per-warp ring backward (dilation 1, K 2..4, aligned rows): runs of kRunSteps with a partial
// last run and chunk (the look-ahead past the run, and past the sequence), blocks with warps past
// the last run, a partial last channel tile, L = 1, L < K, a run of exactly kRunSteps, silu and
// bias on and off.
template <typename T>
void warp_ring_backward_cases() {
  constexpr int64_t kRun = detail::ChannelLastWarpRing::kRunSteps;
  for (int64_t k : {2, 3, 4}) {
    for (bool silu : {false, true}) {
      Case cs{2, 136, 2 * kRun + 5, k, 1, silu, silu};
      cs.ring = Case::Ring::warp;
      run_backward<T>(cs);
    }
  }
  // 9 runs: two full run groups of a block's warps and one with a single run
  for (const auto& [c, l, k] : {std::tuple<int64_t, int64_t, int64_t>{8, 1, 4}, {16, 3, 4}, {24, kRun, 3},
                                {256, kRun + 1, 2}, {128, 8 * kRun + 3, 4}}) {
    Case cs{1, c, l, k, 1, true, true};
    cs.ring = Case::Ring::warp;
    run_backward<T>(cs);
  }
}

TEST(DepthwiseChannelLastEmulated, ForwardFloat32) { forward_cases<float>(); }
TEST(DepthwiseChannelLastEmulated, ForwardFloat16) { forward_cases<__half>(); }
TEST(DepthwiseChannelLastEmulated, ForwardBFloat16) { forward_cases<__nv_bfloat16>(); }
TEST(DepthwiseChannelLastEmulated, LaneRingForwardFloat32) { lane_ring_forward_cases<float>(); }
TEST(DepthwiseChannelLastEmulated, LaneRingForwardFloat16) { lane_ring_forward_cases<__half>(); }
TEST(DepthwiseChannelLastEmulated, LaneRingForwardBFloat16) { lane_ring_forward_cases<__nv_bfloat16>(); }
TEST(DepthwiseChannelLastEmulated, PipelinedForwardFloat32) { pipelined_forward_cases<float>(); }
TEST(DepthwiseChannelLastEmulated, PipelinedForwardFloat16) { pipelined_forward_cases<__half>(); }
TEST(DepthwiseChannelLastEmulated, PipelinedForwardBFloat16) { pipelined_forward_cases<__nv_bfloat16>(); }
TEST(DepthwiseChannelLastEmulated, WarpRingBackwardFloat32) { warp_ring_backward_cases<float>(); }
TEST(DepthwiseChannelLastEmulated, WarpRingBackwardFloat16) { warp_ring_backward_cases<__half>(); }
TEST(DepthwiseChannelLastEmulated, WarpRingBackwardBFloat16) { warp_ring_backward_cases<__nv_bfloat16>(); }
TEST(DepthwiseChannelLastEmulated, BackwardFloat32) { backward_cases<float>(); }
TEST(DepthwiseChannelLastEmulated, BackwardFloat16) { backward_cases<__half>(); }
TEST(DepthwiseChannelLastEmulated, BackwardBFloat16) { backward_cases<__nv_bfloat16>(); }

}  // namespace
}  // namespace causalconv
