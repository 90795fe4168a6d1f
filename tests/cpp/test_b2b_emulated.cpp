// The fused b2b kernels run on the CPU under tests/cpp/cuda_emulation.h, against
// the fp64 reference: their index math, halos, tile walks, in-place passes and
// ordered reductions, checked on a machine without a GPU. (The GPU run of the same
// kernels is test_b2b_cuda.cpp.) Outputs and stride padding start as NaN.
#include "cuda_emulation.h"  // first: it sets up the emulated CUDA built-ins

// The emulated kernels get their own names so they never meet the nvcc-built host stubs.
#define b2b_forward_kernel b2b_forward_kernel_emulated
#define b2b_forward_short_kernel b2b_forward_short_kernel_emulated
#define b2b_backward_kernel b2b_backward_kernel_emulated
#define b2b_backward_chunked_kernel b2b_backward_chunked_kernel_emulated
#define b2b_backward_short_kernel b2b_backward_short_kernel_emulated
#define b2b_weight_grad_reduce b2b_weight_grad_reduce_emulated
#include "b2b/b2b_backward_kernel.cuh"
#include "b2b/b2b_backward_short_kernel.cuh"
#include "b2b/b2b_forward_kernel.cuh"
#include "b2b/b2b_forward_short_kernel.cuh"
#undef b2b_forward_kernel
#undef b2b_forward_short_kernel
#undef b2b_backward_kernel
#undef b2b_backward_chunked_kernel
#undef b2b_backward_short_kernel
#undef b2b_weight_grad_reduce

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "causalconv/reference.h"
#include "b2b_kernel_params.h"
#include "b2b_test_data.h"
#include "host_tensor.h"

namespace causalconv {
namespace {

using test::Activation;
using test::HostTensor;
using test::Weight;
using test::widen;
namespace emu = causalconv::emulation;

using Path = detail::B2BBackwardPath;

struct Case {
  int64_t batch, dim, length, kp, km;
  Path path;               // the backward kernel the plan must pick (short_span instead when it applies)
  bool vectorised = false; // chunked paths: rows padded to L + 3 take vector accesses when 4 | L + 3
  int64_t pad = 3;         // NaN slots after each row
  // The short kernel on rows off the 16-byte grid (its kRealigned form, whatever the build's flag):
  // x and dout rows at stride L + pad, dx's at L + pad + 2.
  bool realigned = false;
  bool tail_in_last_span = false;  // realigned: the last span walks the tail (kB2BShortLastSpanTakesRealignedTail)
};

template <typename T>
void run_case(const Case& cs, double bound, double reduction_bound) {
  SCOPED_TRACE(::testing::Message() << "B" << cs.batch << " D" << cs.dim << " L" << cs.length << " Kp" << cs.kp
                                    << " Km" << cs.km << (cs.realigned ? " realigned" : "")
                                    << (cs.tail_in_last_span ? ", tail in the last span" : ""));
  const int64_t B = cs.batch, D = cs.dim, L = cs.length;
  HostTensor x({B, 3 * D, L}), wp({3 * D, cs.kp}), wm({D, cs.km}), skip({D}), dout({B, D, L});
  std::random_device seed;
  x.fill_uniform(seed());
  wp.fill_uniform(seed());
  wm.fill_uniform(seed());
  skip.fill_uniform(seed());
  dout.fill_uniform(seed());

  Activation<T> x_e(B, 3 * D, L, cs.pad), dout_e(B, D, L, cs.pad), out_e(B, D, L, cs.pad),
      dx_e(B, 3 * D, L, cs.pad + (cs.realigned ? 2 : 0));
  Weight<T> wp_e(3 * D, cs.kp), wm_e(D, cs.km), skip_e(D, 1), dwp_e(3 * D, cs.kp), dwm_e(D, cs.km), dskip_e(D, 1);
  x_e.load(x);
  dout_e.load(dout);
  wp_e.load(wp);
  wm_e.load(wm);
  skip_e.load(skip);

  const detail::B2BForwardParams f = test::b2b_forward_params(x_e, wp_e, wm_e, skip_e, out_e);
  const detail::B2BTiling ft = detail::make_b2b_tiling(L, detail::B2BForwardTile::kOutputs,
                                                       detail::kB2BForwardTilesPerBlock);
  emu::launch({unsigned(B * D), unsigned(ft.tile_blocks), 1}, detail::B2BForwardTile::kThreads,
              sizeof(float) * size_t(detail::b2b_forward_smem_floats(cs.kp, cs.km)),
              [&] { detail::b2b_forward_kernel_emulated<T>(f, ft); });

  const detail::B2BBackwardParams g =
      test::b2b_backward_params(x_e, wp_e, wm_e, skip_e, dout_e, dx_e, &dwp_e, &dwm_e, &dskip_e);
  // (Not realigned: the short kernel only on 16-byte rows, so that the chunked kernels keep their
  // cases; the default plan's choice for the other rows is B2BKernelsEmulated.DefaultPlanRealignsShortRows.
  // Nor the wgmma kernel's realigned rows, so that the mma.sync cases below keep theirs on a Hopper
  // GPU, nor fp32 on the tf32 wgmma kernel, so that the chunked cases keep theirs:
  // test_b2b_tc_backward_emulated.cpp runs those forms.)
  const detail::B2BBackwardPlan plan = cs.realigned
                                           ? detail::plan_b2b_backward(g, true, cs.tail_in_last_span, false, false)
                                           : detail::plan_b2b_backward(g, false, false, false, false);
  // Kp <= 4 and Km <= 8 on rows of whole 16-byte vectors take the short kernel.
  const bool vector_rows = (L + cs.pad) % detail::Vec16<T>::kElems == 0 &&
                           reinterpret_cast<uintptr_t>(x_e.data.data()) % 16 == 0 &&
                           reinterpret_cast<uintptr_t>(dout_e.data.data()) % 16 == 0 &&
                           reinterpret_cast<uintptr_t>(dx_e.data.data()) % 16 == 0;
  EXPECT_EQ(plan.path, cs.kp <= 4 && cs.km <= 8 && (vector_rows || cs.realigned) ? Path::short_span : cs.path);
  EXPECT_EQ(plan.realigned, cs.realigned);
  if (plan.path == detail::B2BBackwardPath::tensor_core) {
    // The dispatch is what this case checks; the tensor-core backward kernel has its own
    // emulated test (test_b2b_tc_backward_emulated.cpp).
    const test::B2BReference ref(x, wp, wm, skip, dout), mag = test::b2b_magnitudes(x, wp, wm, skip, dout);
    test::expect_close(out_e.to_host(), ref.out, mag.out, bound, 0.0, "out");
    return;
  }
  if (plan.path != Path::general && plan.path != Path::short_span) EXPECT_EQ(plan.vectorised, cs.vectorised);
  const detail::B2BTiling bt = plan.tiling;
  const size_t partial_count = size_t(D * B * bt.tile_blocks * (3 * cs.kp + cs.km + 1));
  const detail::B2BBackwardPlan library_plan = detail::plan_b2b_backward(g);  // what the workspace is sized for
  if (library_plan.path == plan.path && library_plan.realigned == plan.realigned &&
      library_plan.tiling.tile_blocks == bt.tile_blocks)
    ASSERT_EQ(detail::b2b_backward_workspace_bytes(g), sizeof(float) * partial_count);
  std::vector<float> partials(partial_count, std::numeric_limits<float>::quiet_NaN());
  if (plan.path == Path::short_span) {  // a warp per (row, span); tile_blocks: spans per row
    const int64_t spans = B * D * bt.tile_blocks, warps = detail::kB2BShortThreads / 32;
    emu::launch({unsigned((spans + warps - 1) / warps), 1, 1}, detail::kB2BShortThreads, 0, [&] {
      detail::with_b2b_short_widths(cs.kp, cs.km, [&](auto widths) {
        if (plan.realigned)
          detail::b2b_backward_short_kernel_emulated<T, decltype(widths), true>(g, bt.tile_blocks, spans,
                                                                                partials.data());
        else
          detail::b2b_backward_short_kernel_emulated<T, decltype(widths)>(g, bt.tile_blocks, spans, partials.data());
      });
    });
  } else {
    const emu::Dim3 grid{unsigned(B * D), unsigned(bt.tile_blocks), 1};
    emu::launch(grid, detail::B2BBackwardTile::kThreads, plan.smem_bytes, [&] {
      switch (plan.path) {
        case detail::B2BBackwardPath::general: detail::b2b_backward_kernel_emulated<T>(g, bt, partials.data()); break;
        case detail::B2BBackwardPath::chunked_mixer8:
          detail::b2b_backward_chunked_kernel_emulated<T, 8>(g, bt, plan.vectorised, partials.data());
          break;
        case detail::B2BBackwardPath::chunked_mixer16:
          detail::b2b_backward_chunked_kernel_emulated<T, 16>(g, bt, plan.vectorised, partials.data());
          break;
        case detail::B2BBackwardPath::chunked_wide:
          detail::b2b_backward_chunked_kernel_emulated<T, 0>(g, bt, plan.vectorised, partials.data());
          break;
        default: FAIL() << "no emulated launch for this path";
      }
    });
  }
  for (float v : partials) ASSERT_FALSE(std::isnan(v)) << "a weight-gradient partial was not written";
  const int64_t parts = B * bt.tile_blocks;
  emu::launch({unsigned(detail::b2b_weight_grad_reduce_blocks(g)), 1, 1}, detail::kB2BReduceThreads, 0,
              [&] { detail::b2b_weight_grad_reduce_emulated<T>(g, parts, partials.data()); });

  const test::B2BReference ref(x, wp, wm, skip, dout), mag = test::b2b_magnitudes(x, wp, wm, skip, dout);
  test::expect_close(out_e.to_host(), ref.out, mag.out, bound, 0.0, "out");
  const HostTensor dx = dx_e.to_host();
  test::expect_close(dx, ref.dx, mag.dx, bound, 0.0, "dx");
  // Element-wise too: a wrong look-ahead touches few outputs, which a 16-bit rel-L2 bound can
  // hide. Each within its storage rounding of itself and of its terms' scale, plus fp32 noise
  // on the tensor's scale and half a subnormal spacing of fp16.
  const double rounding = std::is_same_v<T, float> ? 1e-6 : (std::is_same_v<T, __half> ? 1e-3 : 8e-3);
  const double subnormal = std::is_same_v<T, __half> ? 0x1p-25 : 0.0;
  double scale = 0.0;
  for (int64_t i = 0; i < dx.numel(); ++i) scale = std::max(scale, std::fabs(ref.dx.flat(i)));
  for (int64_t i = 0; i < dx.numel(); ++i)
    ASSERT_LE(std::fabs(dx.flat(i) - ref.dx.flat(i)),
              rounding * (std::fabs(ref.dx.flat(i)) + mag.dx.flat(i)) + 1e-5 * scale + subnormal)
        << "dx at flat index " << i << " (time " << i % L << "): " << dx.flat(i) << " vs " << ref.dx.flat(i);
  test::expect_close(dwp_e.to_host(), ref.dwp, mag.dwp, reduction_bound, 0.0, "dweight_proj");
  test::expect_close(dwm_e.to_host(), ref.dwm, mag.dwm, reduction_bound, 0.0, "dweight_mixer");
  test::expect_close(dskip_e.to_host(true), ref.dskip, mag.dskip, reduction_bound, 0.0, "dskip_bias");
  // Padding between rows stays untouched (NaN).
  EXPECT_EQ(test::written_outside_rows(out_e), 0) << "elements of out written outside its rows";
  EXPECT_EQ(test::written_outside_rows(dx_e), 0) << "elements of dx written outside its rows";
}

// Tile walks (several tiles per block, a partial last tile), L < Km, L = 1, widths
// at both envelope edges and on both sides of the chunked backward's limits (Kp <= 4;
// Km <= 8 / 16 / any), rows with and without vector access, batch > 1; each case small
// enough for the emulator. Short rows take several channels: a single dskip summed over
// a few terms can cancel to far below its terms, and its fp32 relative error with it.
const Case kCases[] = {
    {1, 2, 3000, 3, 7, Path::chunked_mixer8},        // fwd: 2 tiles in one block; bwd: 3 tiles in one block
    {2, 3, 5, 4, 9, Path::chunked_mixer16, true},    // L < Km, one partial vector group
    {1, 1, 1, 2, 2, Path::chunked_mixer8, true},     // L = 1, narrowest widths
    {1, 1, 1100, 32, 256, Path::general},            // widest: halos larger than the tail tile
    {3, 1, 4100, 2, 128, Path::chunked_wide},        // fwd: 3 tiles (1 block walks them); bwd: 2 blocks
    {1, 1, 9001, 3, 7, Path::chunked_mixer8, true},  // bwd: 9 tiles over 3 blocks, each walking 3 (prefetch)
    {2, 3, 2051, 4, 16, Path::chunked_mixer16},      // Km = 16, L % 4 = 3
    {1, 2, 1029, 4, 8, Path::chunked_mixer8, true},  // Km = 8 (no zero taps), one chunk past the tile
    {1, 3, 6, 2, 3, Path::chunked_mixer8},           // L < 2 chunks
    {1, 2, 1030, 5, 7, Path::general},               // Kp = 5: past the chunked kernels
    {1, 1, 1500, 4, 17, Path::chunked_wide},         // Km = 17: 3 zero taps in front, 5 tap blocks
    {1, 1, 2049, 4, 256, Path::chunked_wide, true},  // widest chunked mixer, 3 tiles, vector rows
    {2, 2, 200, 3, 130, Path::chunked_wide},         // L < Km
    {1, 2, 5001, 2, 63, Path::chunked_wide, true},   // 5 tiles over 2 blocks (prefetch), odd Km
};

TEST(B2BKernelsEmulated, Float32MatchesReference) {
  // Weight gradients: fp32 sums whose random-signed terms cancel (one channel's dskip over
  // ~1000 terms reached 1.15e-5 here once); the bound of tests/python/conftest.py.
  for (const Case& c : kCases) run_case<float>(c, 1e-6, 5e-5);
}

// 16-bit: the CUDA-core backward kernels serve Km <= 8; the tensor cores take Km >= 9.
TEST(B2BKernelsEmulated, BFloat16MatchesReference) {
  run_case<__nv_bfloat16>({2, 3, 1500, 3, 7, Path::chunked_mixer8}, 1e-2, 1e-2);
  run_case<__nv_bfloat16>({1, 2, 2049, 4, 8, Path::chunked_mixer8, true}, 1e-2, 1e-2);
  run_case<__nv_bfloat16>({1, 1, 1030, 6, 7, Path::general}, 1e-2, 1e-2);
  run_case<__nv_bfloat16>({1, 2, 2049, 4, 16, Path::tensor_core}, 1e-2, 1e-2);
  run_case<__nv_bfloat16>({1, 1, 1030, 6, 40, Path::tensor_core}, 1e-2, 1e-2);
}

TEST(B2BKernelsEmulated, Float16ChunkedBackwardMatchesReference) {
  run_case<__half>({1, 2, 1029, 3, 7, Path::chunked_mixer8, true}, 2e-3, 2e-3);
  run_case<__half>({2, 1, 700, 2, 3, Path::chunked_mixer8}, 2e-3, 2e-3);
  run_case<__half>({1, 1, 1100, 3, 128, Path::tensor_core}, 2e-3, 2e-3);
}

// ---- the short-filter backward (Kp <= 4, Km <= 8, rows of whole 16-byte vectors) ----

// Rows padded to the next multiple of the vector width (at least one NaN slot after each).
template <typename T>
Case short_case(int64_t batch, int64_t dim, int64_t length, int64_t kp, int64_t km) {
  const int64_t vec = detail::Vec16<T>::kElems;
  return {batch, dim, length, kp, km, Path::short_span, false, vec - length % vec};
}

// Widths up to 4 x 8 (leading zero taps), lengths around the vector, the warp's step of 32
// vectors (128 steps of time at fp32, 256 at 16-bit) and its span (b2b_short_span: 2048 /
// 4096; the priming step's halo and the draining step's look-ahead cross spans), several
// spans per row, batch and channels > 1 (the partials' (row, span) slots).
TEST(B2BKernelsEmulated, ShortBackwardFloat32MatchesReference) {
  for (int64_t kp = 2; kp <= 4; ++kp)
    for (int64_t km : {2, 3, 7, 8}) run_case<float>(short_case<float>(1, 2, 37, kp, km), 1e-6, 5e-5);
  for (int64_t length : {1, 3, 4, 5, 127, 128, 129, 1000, 2047, 2048, 2049, 4100})
    run_case<float>(short_case<float>(2, 3, length, 3, 7), 1e-6, 5e-5);
  run_case<float>(short_case<float>(1, 2, 6150, 4, 8), 1e-6, 5e-5);
}

TEST(B2BKernelsEmulated, ShortBackward16BitMatchesReference) {
  for (int64_t kp : {2, 4})
    for (int64_t km : {2, 8}) run_case<__nv_bfloat16>(short_case<__nv_bfloat16>(1, 2, 45, kp, km), 1e-2, 1e-2);
  for (int64_t length : {1, 8, 9, 255, 256, 257, 4095, 4096, 4097})
    run_case<__nv_bfloat16>(short_case<__nv_bfloat16>(2, 2, length, 3, 7), 1e-2, 1e-2);
  run_case<__nv_bfloat16>(short_case<__nv_bfloat16>(1, 1, 8200, 4, 8), 1e-2, 1e-2);
  run_case<__half>(short_case<__half>(2, 3, 4100, 3, 7), 2e-3, 2e-3);
  run_case<__half>(short_case<__half>(1, 2, 300, 2, 3), 2e-3, 2e-3);
}

// Rows off the 16-byte grid (the short kernel's kRealigned form): x and dout at row stride L + 3,
// dx at L + 5; lengths around the vector, the step, the span (one more span where the walk's extra
// steps cross it: 4095 at 16-bit, 2047 at fp32), both padded widths.
TEST(B2BKernelsEmulated, ShortBackwardRealignedRowsMatchReference) {
  for (bool tail_in_last_span : {false, true}) {  // L 4095, 8191 (2047 at fp32): a last span of 17 steps
    auto realigned = [&](int64_t batch, int64_t dim, int64_t length, int64_t kp, int64_t km) {
      return Case{batch, dim, length, kp, km, Path::short_span, false, 3, true, tail_in_last_span};
    };
    for (int64_t length : {1, 5, 9, 257, 4095, 4097, 8191})
      run_case<__nv_bfloat16>(realigned(2, 2, length, 3, 7), 1e-2, 1e-2);
    run_case<__nv_bfloat16>(realigned(1, 3, 4100, 4, 8), 1e-2, 1e-2);
    for (int64_t length : {1, 3, 129, 2047, 2049})
      run_case<float>(realigned(2, 3, length, 3, 7), 1e-6, 5e-5);
    run_case<float>(realigned(1, 2, 2050, 4, 8), 1e-6, 5e-5);
    run_case<__half>(realigned(2, 3, 4103, 2, 3), 2e-3, 2e-3);
  }
}

// The library's own plan (the build's flags): Kp <= 4, Km <= 8 rows off the 16-byte grid take the
// short kernel realigned (kB2BShortBackwardRealignedRows, on since session 34), its last span walking
// the tail (kB2BShortLastSpanTakesRealignedTail): 2 spans of 2048 fp32 steps for L 3000.
TEST(B2BKernelsEmulated, DefaultPlanRealignsShortRows) {
  Activation<float> x(2, 3, 3000), dout(2, 1, 3000), dx(2, 3, 3000);  // row stride 3003: off the grid
  Weight<float> wp(3, 3), wm(1, 7), skip(1, 1);
  const detail::B2BBackwardParams g = test::b2b_backward_params(x, wp, wm, skip, dout, dx);
  const detail::B2BBackwardPlan plan = detail::plan_b2b_backward(g);
  EXPECT_EQ(plan.path, Path::short_span);
  EXPECT_TRUE(plan.realigned);
  EXPECT_EQ(plan.tiling.tiles, 2);
}

// Empty rows off the 16-byte grid plan no span: the realigned walk's extra unit belongs to rows
// with steps (session 33's GPU run faulted on L = 0 with the realigned short backward on).
TEST(B2BKernelsEmulated, ShortBackwardRealignedPlansNothingForEmptyRows) {
  Activation<float> x(2, 3, 0), dout(2, 1, 0), dx(2, 3, 0);  // row stride 3: off the grid
  Weight<float> wp(3, 3), wm(1, 7), skip(1, 1);
  const detail::B2BBackwardParams g = test::b2b_backward_params(x, wp, wm, skip, dout, dx);
  for (bool tail_in_last_span : {false, true}) {
    const detail::B2BBackwardPlan plan = detail::plan_b2b_backward(g, true, tail_in_last_span, false);
    EXPECT_EQ(plan.path, Path::short_span);
    EXPECT_TRUE(plan.realigned);
    EXPECT_EQ(plan.tiling.tiles, 0);
  }
}

// ---- the short-filter forward (Kp <= 4, Km <= 8, rows of whole 16-byte vectors) ----

// Rows padded to the next multiple of the vector width (at least one NaN slot between
// rows), so every x and out row is made of whole 16-byte vectors, as the kernel's
// dispatch requires; the last vector of a row is full when kVec | L, partial otherwise.
// realigned: rows off the 16-byte grid instead (x at row stride L + 3, out at L + 5: every pair of
// leads), on the kernel's kRealigned form.
template <typename T>
void run_short_forward(int64_t B, int64_t D, int64_t L, int64_t kp, int64_t km, double bound, bool zero_skip = false,
                       bool realigned = false, bool tail_in_last_span = false) {
  SCOPED_TRACE(::testing::Message() << "short forward B" << B << " D" << D << " L" << L << " Kp" << kp << " Km"
                                    << km << (zero_skip ? " skip=0" : "") << (realigned ? " realigned" : "")
                                    << (tail_in_last_span ? ", tail in the last span" : ""));
  constexpr int64_t kVec = detail::Vec16<T>::kElems;
  const int64_t pad = realigned ? 3 : kVec - L % kVec, out_pad = realigned ? 5 : pad;
  HostTensor x({B, 3 * D, L}), wp({3 * D, kp}), wm({D, km}), skip({D});
  std::random_device seed;
  x.fill_uniform(seed());
  wp.fill_uniform(seed());
  wm.fill_uniform(seed());
  skip.fill_uniform(seed());
  if (zero_skip)
    for (int64_t c = 0; c < D; ++c) skip(c) = 0.0;
  Activation<T> x_e(B, 3 * D, L, pad), out_e(B, D, L, out_pad);
  Weight<T> wp_e(3 * D, kp), wm_e(D, km), skip_e(D, 1);
  x_e.load(x);
  wp_e.load(wp);
  wm_e.load(wm);
  skip_e.load(skip);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(x_e.data.data()) % 16, 0u);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(out_e.data.data()) % 16, 0u);

  const detail::B2BForwardParams f = test::b2b_forward_params(x_e, wp_e, wm_e, skip_e, out_e);
  ASSERT_EQ(detail::vector_aligned<T>(f.x, f.x_stride, 2) && detail::vector_aligned<T>(f.out, f.out_stride, 2),
            !realigned);
  const int64_t spans_per_row =
      detail::b2b_short_spans_per_row(L, detail::b2b_short_span<T>(), kVec, realigned, tail_in_last_span);
  const int64_t spans = B * D * spans_per_row;
  constexpr int64_t kWarps = detail::kB2BShortThreads / 32;
  emu::launch({unsigned((spans + kWarps - 1) / kWarps), 1, 1}, detail::kB2BShortThreads, 0,
              [&] {
                detail::with_b2b_short_widths(kp, km, [&](auto widths) {
                  if (realigned)
                    detail::b2b_forward_short_kernel_emulated<T, decltype(widths), true>(f, spans_per_row, spans);
                  else
                    detail::b2b_forward_short_kernel_emulated<T, decltype(widths)>(f, spans_per_row, spans);
                });
              });

  const HostTensor out_ref = test::b2b_forward_reference(x, wp, wm, skip);
  const HostTensor magnitude = test::b2b_forward_reference(test::absolute(x), test::absolute(wp),
                                                           test::absolute(wm), test::absolute(skip));
  const HostTensor got = out_e.to_host();
  test::expect_close(got, out_ref, magnitude, bound, 0.0, "out");
  // Element-wise too: a wrong halo touches few outputs, which a 16-bit rel-L2 bound can
  // hide. Each output within its storage rounding (2^-8 bf16, 2^-11 fp16) of itself and of
  // its terms' scale (fp32 accumulation, cancellation), plus fp32 noise on the row's scale
  // and half a subnormal spacing of fp16 (outputs of tiny shapes can be ~1e-8).
  const double rounding = std::is_same_v<T, float> ? 1e-6 : (std::is_same_v<T, __half> ? 1e-3 : 8e-3);
  const double subnormal = std::is_same_v<T, __half> ? 0x1p-25 : 0.0;
  double scale = 0.0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < D; ++c)
      for (int64_t t = 0; t < L; ++t) scale = std::max(scale, std::fabs(out_ref(b, c, t)));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < D; ++c)
      for (int64_t t = 0; t < L; ++t)
        ASSERT_LE(std::fabs(got(b, c, t) - out_ref(b, c, t)),
                  rounding * (std::fabs(out_ref(b, c, t)) + magnitude(b, c, t)) + 1e-5 * scale + subnormal)
            << "out at b" << b << " c" << c << " t" << t << ": " << got(b, c, t) << " vs " << out_ref(b, c, t);
  EXPECT_EQ(test::written_outside_rows(out_e), 0) << "elements of out written outside its rows";
}

// Widths up to 4 x 8 (padded with leading zero taps; width 1, below the op's envelope,
// pads the most), lengths around the vector, the warp's step of 32 vectors (256 steps of time
// at 16-bit, 128 at fp32), its span (b2b_short_span: 4096 / 2048) and several spans (a span's
// halo from the priming step), batch and channels > 1 (the span -> (b, c) split), skip = 0.
static_assert(detail::b2b_short_span<float>() == 2048 && detail::b2b_short_span<__nv_bfloat16>() == 4096,
              "the lengths below straddle these spans and their steps of 32 vectors: revisit them with the span");
TEST(B2BKernelsEmulated, ShortForwardFloat32MatchesReference) {
  for (int64_t kp = 1; kp <= 4; ++kp)
    for (int64_t km : {1, 2, 3, 7, 8}) run_short_forward<float>(1, 2, 37, kp, km, 1e-6);
  for (int64_t length : {1, 2, 3, 4, 5, 8, 9, 127, 128, 129, 255, 257, 1000, 2047, 2048, 2049, 4097})
    run_short_forward<float>(2, 3, length, 3, 7, 1e-6);
  run_short_forward<float>(3, 1, 8200, 4, 8, 1e-6);
  run_short_forward<float>(1, 3, 1031, 2, 2, 1e-6, true);
}

TEST(B2BKernelsEmulated, ShortForwardBFloat16MatchesReference) {
  for (int64_t kp = 1; kp <= 4; ++kp)
    for (int64_t km : {1, 2, 3, 7, 8}) run_short_forward<__nv_bfloat16>(1, 2, 45, kp, km, 1e-2);
  for (int64_t length : {1, 7, 8, 9, 16, 255, 256, 257, 513, 2049, 4095, 4096, 4097})
    run_short_forward<__nv_bfloat16>(2, 3, length, 3, 7, 1e-2);
  run_short_forward<__nv_bfloat16>(3, 1, 8200, 3, 7, 1e-2, true);
  run_short_forward<__nv_bfloat16>(2, 2, 4097, 4, 8, 1e-2);  // full reach (10 steps back) across spans
}

TEST(B2BKernelsEmulated, ShortForwardFloat16MatchesReference) {
  for (int64_t length : {1, 8, 9, 1000, 1032, 4100})
    run_short_forward<__half>(2, 3, length, 4, 8, 2e-3);
  run_short_forward<__half>(1, 2, 700, 2, 3, 2e-3, true);
}

// Rows off the 16-byte grid (kRealigned): lengths under one unit, around the warp's step and its
// span (the priming step's outputs carried into a span's first unit), a walk one unit past the
// row's end, both padded widths, skip = 0, every dtype.
TEST(B2BKernelsEmulated, ShortForwardRealignedRowsMatchReference) {
  for (bool tail : {false, true}) {  // L 4095, 8191 (2047 at fp32): with `tail`, a last span of 17 steps
    for (int64_t length : {1, 2, 5, 9, 255, 257, 4095, 4097, 8191})
      run_short_forward<__nv_bfloat16>(2, 3, length, 3, 7, 1e-2, false, true, tail);
    run_short_forward<__nv_bfloat16>(1, 3, 4100, 4, 8, 1e-2, false, true, tail);  // full reach across spans
    for (int64_t length : {1, 3, 127, 2047, 2049})
      run_short_forward<float>(2, 3, length, 3, 7, 1e-6, false, true, tail);
    run_short_forward<float>(1, 3, 2050, 4, 8, 1e-6, true, true, tail);
    run_short_forward<__half>(2, 3, 4103, 4, 8, 2e-3, false, true, tail);
  }
}

}  // namespace
}  // namespace causalconv
