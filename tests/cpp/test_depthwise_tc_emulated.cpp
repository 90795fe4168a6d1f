// The tensor-core depthwise kernels (blocked Toeplitz form) run on the CPU under
// tests/cpp/cuda_emulation.h + mma_emulation.h, against an fp64 brute force: fragment
// construction (both Toeplitz forms), swizzled staging (cp.async with its deferred
// copies, and the element path of unaligned rows), halos on both sides, causal padding,
// tile walks, partial tiles, outputs stored from the accumulators, the forward's two
// input stages and shared A fragments, the wgmma form of the forward (64-step chunks,
// descriptors into the swizzled stage), the fp32 forward on tf32 MMAs split three ways, and the
// backward's per-tile weight-gradient partials (summed here in the order of the GPU's reduction).
// The GPU runs of the same kernels: tests/python/test_causal_conv1d_depthwise.py,
// test_tensor_core_path*.
#include "cuda_emulation.h"  // first: it sets up the emulated CUDA built-ins
#include "mma_emulation.h"

#define depthwise_forward_tc_kernel depthwise_forward_tc_kernel_emulated
#include "causal_conv1d/depthwise_forward_tc_kernel.cuh"
#undef depthwise_forward_tc_kernel
#define depthwise_forward_tf32x3_kernel depthwise_forward_tf32x3_kernel_emulated
#include "causal_conv1d/depthwise_forward_tf32_kernel.cuh"
#undef depthwise_forward_tf32x3_kernel
#define depthwise_backward_tc_kernel depthwise_backward_tc_kernel_emulated
#include "causal_conv1d/depthwise_backward_tc_kernel.cuh"
#undef depthwise_backward_tc_kernel
#define depthwise_forward_wgmma_kernel depthwise_forward_wgmma_kernel_emulated
#define depthwise_forward_wgmma_ring_kernel depthwise_forward_wgmma_ring_kernel_emulated
#include "causal_conv1d/depthwise_forward_wgmma_kernel.cuh"
#undef depthwise_forward_wgmma_kernel
#undef depthwise_forward_wgmma_ring_kernel
#define depthwise_forward_wgmma_tf32x3_kernel depthwise_forward_wgmma_tf32x3_kernel_emulated
#include "causal_conv1d/depthwise_forward_wgmma_tf32_kernel.cuh"
#undef depthwise_forward_wgmma_tf32x3_kernel

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "depthwise_emulated_checks.h"
#include "error_tally.h"
#include "host_tensor.h"
#include "padded_tensors.h"
#include "storage_types.h"
#include "toeplitz_guard_choice.h"

namespace causalconv {
namespace {

using test::Activation;
using test::HostTensor;
using test::widen;
namespace emu = causalconv::emulation;

struct Case {
  int64_t batch, channels, length, width;
  bool bias, silu;
  int64_t tiles_per_block = 8;  // the streaming wgmma form: the grid's blocks instead
  // >= 0: x holds NaN at this step of the first row, +inf 40 steps later and -inf at this step of
  // the last row; dy NaN 3 steps after it in the first row, +inf 60 after it in the last (each
  // result must be NaN / infinite exactly where its own terms make it).
  int64_t nonfinite_at = -1;
};

template <typename T>
constexpr double ulp_of() {
  return std::is_same<T, float>::value ? 0x1p-24 : std::is_same<T, __half>::value ? 0x1p-10 : 0x1p-7;
}

// Row padding of the activations: 3 (row stride L + 3, so only some rows are 16-byte aligned),
// or what makes every row start 16-byte aligned (as the wgmma form requires).
int64_t row_pad(int64_t length, bool aligned_rows) { return aligned_rows ? 8 - length % 8 : 3; }

// How the 16-step Toeplitz forms take rows off the 16-byte boundary: by element, or walked from the
// boundary before them (kShiftedRows, common/toeplitz_mma.cuh). y_pad_extra > 0 pads y's rows more
// than x's, so many rows of y lie at another distance from a boundary than x's (those must fall back
// to the element path).
struct Walk {
  bool shifted = false;
  int64_t y_pad_extra = 0;
};

// The forwards' grids tile the row's own length, shifted or not: the block that walked the last
// tile computes a shifted walk's few outputs past it (its tail, depthwise_walk_tail).
int64_t forward_tiles(int64_t length, int64_t tile_outputs) { return (length + tile_outputs - 1) / tile_outputs; }

// The backward's grid tiles the whole walk: a shifted walk is up to a unit's values minus one longer
// (one spare tile where the row has no lead; the launcher asks for it only where some row is off the
// boundary).
template <typename T>
int64_t backward_tiles(int64_t length, bool shifted) {
  const int64_t walk = length + (shifted ? 16 / int64_t(sizeof(T)) - 1 : 0);
  return (walk + detail::ToeplitzTile::kOutputs - 1) / detail::ToeplitzTile::kOutputs;
}

// Inputs of one case in storage type T: x, dy as padded activations (row_pad), w (C, K), bias (C).
template <typename T>
struct Data {
  Activation<T> x, dy;
  std::vector<T> w, bias;
  Data(const Case& cs, std::mt19937& rng, int64_t pad)
      : x(cs.batch, cs.channels, cs.length, pad), dy(cs.batch, cs.channels, cs.length, pad),
        w(size_t(cs.channels * cs.width)), bias(size_t(cs.channels)) {
    std::normal_distribution<double> normal;
    HostTensor xh({cs.batch, cs.channels, cs.length}), dyh({cs.batch, cs.channels, cs.length});
    for (int64_t b = 0; b < cs.batch; ++b)
      for (int64_t c = 0; c < cs.channels; ++c)
        for (int64_t t = 0; t < cs.length; ++t) {
          xh(b, c, t) = normal(rng);
          dyh(b, c, t) = normal(rng);
        }
    x.load(xh);
    dy.load(dyh);
    for (auto& v : w) v = test::round_to(T{}, normal(rng) / std::sqrt(double(cs.width)));
    for (auto& v : bias) v = test::round_to(T{}, normal(rng));
    // Finite values between the rows (rather than NaN): a kernel that reads them (a shifted walk's
    // first unit, unmasked) must give wrong outputs even where the NaN guard would redo a tile.
    for (Activation<T>* a : {&x, &dy})
      for (size_t i = 0; i < a->data.size(); ++i)
        if (std::isnan(widen(a->data[i]))) a->data[i] = test::round_to(T{}, 1000.0);
    if (cs.nonfinite_at >= 0) {
      const double inf = std::numeric_limits<double>::infinity();
      x.at(0, 0, cs.nonfinite_at) = test::round_to(T{}, std::numeric_limits<double>::quiet_NaN());
      if (cs.nonfinite_at + 40 < cs.length) x.at(0, 0, cs.nonfinite_at + 40) = test::round_to(T{}, inf);
      x.at(cs.batch - 1, cs.channels - 1, cs.nonfinite_at) = test::round_to(T{}, -inf);
      dy.at(0, 0, cs.nonfinite_at + 3) = test::round_to(T{}, std::numeric_limits<double>::quiet_NaN());
      if (cs.nonfinite_at + 60 < cs.length)
        dy.at(cs.batch - 1, cs.channels - 1, cs.nonfinite_at + 60) = test::round_to(T{}, inf);
    }
  }
  // The pre-activation at (b, c, t) in fp64, and the sum of its terms' magnitudes.
  double pre(const Case& cs, int64_t b, int64_t c, int64_t t, double* mag = nullptr) {
    double acc = cs.bias ? widen(bias[size_t(c)]) : 0.0, m = std::abs(acc);
    for (int64_t k = 0; k < cs.width; ++k) {
      const int64_t src = t - (cs.width - 1 - k);
      if (src < 0) continue;
      const double term = widen(w[size_t(c * cs.width + k)]) * widen(x.at(b, c, src));
      acc += term;
      m += std::abs(term);
    }
    if (mag) *mag = m;
    return acc;
  }
};

using test::ErrorTally;

// Where the fp64 reference is NaN or infinite (Case::nonfinite_at), the result must be the same
// (NaN, or the same infinity): true when `want` was such a value and so checked here.
bool checked_nonfinite(double got, double want, const char* what, int64_t i, int64_t j, int64_t k) {
  if (std::isfinite(want)) return false;
  EXPECT_TRUE(std::isnan(want) ? std::isnan(got) : got == want)
      << what << "[" << i << "," << j << "," << k << "] = " << got << ", expected " << want;
  return true;
}

// The mma.sync form (depthwise_forward_tc_kernel), the wgmma form on 16-byte aligned rows, or the
// streaming wgmma form (rows of whole 64-step chunks).
enum class Form { mma_sync, wgmma, wgmma_ring };

const char* form_name(Form form) {
  return form == Form::wgmma ? "wgmma" : form == Form::wgmma_ring ? "wgmma ring" : "mma.sync";
}

// An emulated tensor map of the streaming form's view of an activation (as its launcher encodes).
CUtensorMap row_chunks_map(const void* base, int64_t B, int64_t C, int64_t L, const int64_t* stride, int box_chunks) {
  const detail::RowChunksView v = detail::row_chunks_view(B, C, L, stride, box_chunks);
  detail::sm90::EmulatedTensorMap m{};
  m.base = base;
  m.rank = 4;
  m.swizzle_128b = true;
  for (int d = 0; d < 4; ++d) {
    m.dims[d] = v.dims[d];
    m.box[d] = v.box[d];
  }
  for (int d = 0; d < 3; ++d) m.strides[d] = v.strides[d];
  return detail::sm90::emulated_tensor_map(m);
}

template <typename T>
void run_forward(const Case& cs, Form form = Form::mma_sync, Walk walk = {}) {
  SCOPED_TRACE(::testing::Message() << "forward B" << cs.batch << " C" << cs.channels << " L" << cs.length << " K"
                                    << cs.width << " bias " << cs.bias << " silu " << cs.silu << " form "
                                    << form_name(form) << " shifted " << walk.shifted << " y pad +"
                                    << walk.y_pad_extra);
  const int64_t B = cs.batch, C = cs.channels, L = cs.length, K = cs.width;
  std::mt19937 rng(std::random_device{}());
  const int64_t pad = row_pad(L, form != Form::mma_sync && !walk.shifted);
  Data<T> d(cs, rng, pad);
  Activation<T> y(B, C, L, pad + walk.y_pad_extra);

  detail::DepthwiseForwardParams p{};
  test::set_common_params(p, d.w, cs.bias ? d.bias.data() : nullptr, B, C, L, K, 1, cs.silu);
  p.x = d.x.data.data();
  p.y = y.data.data();
  p.x_stride[0] = d.x.stride_b;
  p.x_stride[1] = d.x.stride_c;
  p.x_stride[2] = 1;
  p.y_stride[0] = y.stride_b;
  p.y_stride[1] = y.stride_c;
  p.y_stride[2] = 1;
  if constexpr (std::is_same_v<T, float>) {  // the tf32 forms: warpgroup MMA (64-step chunks) or mma.sync's
    if (form == Form::wgmma) {
      const int64_t tiles = forward_tiles(L, detail::WgmmaToeplitzTile::kOutputs);
      const emu::Dim3 grid{unsigned(B * C), unsigned((tiles + cs.tiles_per_block - 1) / cs.tiles_per_block), 1};
      detail::with_toeplitz64_blocks(K, [&](auto blocks) {
        constexpr int kBlocks = decltype(blocks)::value;
        emu::launch(grid, detail::WgmmaToeplitzTile::kThreads, size_t(detail::DepthwiseWgmmaTf32Smem<kBlocks>::kBytes),
                    [&] {
                      if (walk.shifted)
                        detail::depthwise_forward_wgmma_tf32x3_kernel_emulated<kBlocks, true>(p, tiles);
                      else
                        detail::depthwise_forward_wgmma_tf32x3_kernel_emulated<kBlocks, false>(p, tiles);
                    });
      });
    } else {
      const int64_t tiles = forward_tiles(L, detail::ToeplitzTile::kOutputs);
      const emu::Dim3 grid{unsigned(B * C), unsigned((tiles + cs.tiles_per_block - 1) / cs.tiles_per_block), 1};
      emu::launch(grid, detail::ToeplitzTile::kThreads, size_t(detail::DepthwiseTf32Smem::kBytes), [&] {
        if (walk.shifted)
          detail::depthwise_forward_tf32x3_kernel_emulated<true>(p, tiles);
        else
          detail::depthwise_forward_tf32x3_kernel_emulated<false>(p, tiles);
      });
    }
  } else if (form == Form::wgmma_ring) {
    const int64_t tiles_per_row = (L + detail::WgmmaToeplitzTile::kOutputs - 1) / detail::WgmmaToeplitzTile::kOutputs;
    const emu::Dim3 grid{unsigned(std::min(B * C * tiles_per_row, cs.tiles_per_block)), 1, 1};
    detail::with_toeplitz64_blocks(K, [&](auto blocks) {
      constexpr int kBlocks = decltype(blocks)::value;
      using Smem = detail::DepthwiseWgmmaRingSmem<kBlocks>;
      const CUtensorMap x_map = row_chunks_map(p.x, B, C, L, p.x_stride, Smem::kBoxChunks);
      const CUtensorMap y_map = row_chunks_map(p.y, B, C, L, p.y_stride, detail::WgmmaToeplitzTile::kChunks);
      test::with_guard_for(cs.nonfinite_at >= 0, [&](auto guard) {
        emu::launch(grid, Smem::kThreads, size_t(Smem::kBytes), [&] {
          detail::depthwise_forward_wgmma_ring_kernel_emulated<T, kBlocks, decltype(guard)::value>(x_map, y_map, p,
                                                                                                  tiles_per_row);
        });
      });
    });
  } else if (form == Form::wgmma) {
    const int64_t tiles = forward_tiles(L, detail::WgmmaToeplitzTile::kOutputs);
    const emu::Dim3 grid{unsigned(B * C), unsigned((tiles + cs.tiles_per_block - 1) / cs.tiles_per_block), 1};
    detail::with_toeplitz64_blocks(K, [&](auto blocks) {
      constexpr int kBlocks = decltype(blocks)::value;
      test::with_guard_for(cs.nonfinite_at >= 0, [&](auto guard) {
        constexpr bool kGuard = decltype(guard)::value;
        emu::launch(grid, detail::WgmmaToeplitzTile::kThreads, size_t(detail::DepthwiseWgmmaSmem<kBlocks>::kBytes), [&] {
          if (walk.shifted)
            detail::depthwise_forward_wgmma_kernel_emulated<T, kBlocks, kGuard, true>(p, tiles);
          else
            detail::depthwise_forward_wgmma_kernel_emulated<T, kBlocks, kGuard, false>(p, tiles);
        });
      });
    });
  } else {
    const int64_t tiles = forward_tiles(L, detail::ToeplitzTile::kOutputs);
    const emu::Dim3 grid{unsigned(B * C), unsigned((tiles + cs.tiles_per_block - 1) / cs.tiles_per_block), 1};
    detail::with_toeplitz_max_blocks(K, [&](auto max_blocks) {
      constexpr int kMaxBlocks = decltype(max_blocks)::value;
      test::with_guard_for(cs.nonfinite_at >= 0, [&](auto guard) {
        constexpr bool kGuard = decltype(guard)::value;
        emu::launch(grid, detail::ToeplitzTile::kThreads, size_t(detail::depthwise_tc_smem_bytes<kMaxBlocks>()), [&] {
          if (walk.shifted)
            detail::depthwise_forward_tc_kernel_emulated<T, kMaxBlocks, kGuard, true>(p, tiles);
          else
            detail::depthwise_forward_tc_kernel_emulated<T, kMaxBlocks, kGuard, false>(p, tiles);
        });
      });
    });
  }

  // Element by element: the output's rounding (1e-7 absolute for fp16's subnormals, 6e-8 apart) plus
  // fp32 accumulation error (for fp32 the tf32 split's ~2^-21 per term as well: one tf32 product
  // alone would be off by ~2^-11 of its terms).
  const double ulp = ulp_of<T>(), per_term = std::is_same_v<T, float> ? 4e-6 : 1e-5;
  ErrorTally tally;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t t = 0; t < L; ++t) {
        double mag;
        double want = d.pre(cs, b, c, t, &mag);
        if (cs.silu) {  // the pre-activation's fp32 error passes through silu' (|silu'| < 1.1)
          mag = std::abs(want) + mag * 1.1;
          want = want / (1.0 + std::exp(-want));
        }
        if (checked_nonfinite(widen(y.at(b, c, t)), want, "y", b, c, t)) continue;
        tally.add(widen(y.at(b, c, t)), want, ulp * std::abs(want) + per_term * mag + 1e-7, "y", b, c, t, mag);
      }
    }
  EXPECT_EQ(written_outside_rows(y), 0) << "elements written outside the rows";
  EXPECT_EQ(tally.bad, 0) << "elements out of tolerance";
  // tests/python/conftest.py's scale, ||ref|| + ||magnitude||: ||ref|| alone falls far below the terms'
  // rounding on rows whose terms cancel.
  const double l2_bound = std::is_same_v<T, float> ? 1e-6 : std::is_same_v<T, __half> ? 1e-3 : 4e-3;
  EXPECT_LE(tally.rel_l2_with_magnitude(), l2_bound);
}

// dx, and dweight/dbias from the kernel's per-tile partials summed in the reduction's order.
template <typename T>
void run_backward(const Case& cs, bool want_dx = true, bool want_dw = true, Walk walk = {}) {
  SCOPED_TRACE(::testing::Message() << "backward B" << cs.batch << " C" << cs.channels << " L" << cs.length << " K"
                                    << cs.width << " bias " << cs.bias << " silu " << cs.silu << " dx " << want_dx
                                    << " dw " << want_dw << " shifted " << walk.shifted << " dx pad +"
                                    << walk.y_pad_extra);
  const int64_t B = cs.batch, C = cs.channels, L = cs.length, K = cs.width;
  std::mt19937 rng(std::random_device{}());
  const int64_t pad = row_pad(L, false);
  Data<T> d(cs, rng, pad);
  Activation<T> dx(B, C, L, pad + walk.y_pad_extra);
  const int64_t tiles = backward_tiles<T>(L, walk.shifted);
  std::vector<float> partials(size_t(C * B * tiles * (K + 1)), std::numeric_limits<float>::quiet_NaN());

  detail::DepthwiseBackwardParams p{};
  test::set_common_params(p, d.w, cs.bias ? d.bias.data() : nullptr, B, C, L, K, 1, cs.silu);
  p.x = d.x.data.data();
  p.dy = d.dy.data.data();
  p.dx = want_dx ? dx.data.data() : nullptr;
  for (auto* s : {p.x_stride, p.dy_stride, p.dx_stride}) {
    s[0] = d.x.stride_b;
    s[1] = d.x.stride_c;
    s[2] = 1;
  }
  p.dx_stride[0] = dx.stride_b;
  p.dx_stride[1] = dx.stride_c;
  const int64_t tile_blocks = (tiles + cs.tiles_per_block - 1) / cs.tiles_per_block;
  detail::with_toeplitz_max_blocks(K, [&](auto max_blocks) {
    constexpr int kMaxBlocks = decltype(max_blocks)::value;
    test::with_guard_for(cs.nonfinite_at >= 0, [&](auto guard) {
      constexpr bool kGuard = decltype(guard)::value;
      emu::launch({unsigned(B * C), unsigned(tile_blocks), 1}, detail::ToeplitzTile::kThreads,
                  size_t(detail::DepthwiseTcBackwardSmem<kMaxBlocks>::kBytes), [&] {
                    float* const parts = want_dw ? partials.data() : nullptr;
                    if (walk.shifted)
                      detail::depthwise_backward_tc_kernel_emulated<T, kMaxBlocks, kGuard, true>(p, tiles, parts);
                    else
                      detail::depthwise_backward_tc_kernel_emulated<T, kMaxBlocks, kGuard, false>(p, tiles, parts);
                  });
    });
  });

  // fp64 reference: g = dy * silu'(pre), dx[t] = sum_k w[k] g[t + K-1-k], dw, db.
  const double ulp = ulp_of<T>();
  std::vector<double> g(static_cast<size_t>(L)), dw(static_cast<size_t>(C * K), 0.0), db(static_cast<size_t>(C), 0.0);
  std::vector<double> db_abs(db.size(), 0.0);  // sums of |g|
  std::vector<double> dw_abs(dw.size(), 0.0), dw_sq(dw.size(), 0.0);  // sums of |term| and term^2
  ErrorTally dx_tally;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t t = 0; t < L; ++t) {
        g[size_t(t)] = widen(d.dy.at(b, c, t));
        if (cs.silu) {
          const double u = d.pre(cs, b, c, t), s = 1.0 / (1.0 + std::exp(-u));
          g[size_t(t)] *= s * (1.0 + u * (1.0 - s));
        }
        db[size_t(c)] += g[size_t(t)];
        db_abs[size_t(c)] += std::abs(g[size_t(t)]);
        for (int64_t k = 0; k < K; ++k) {
          const int64_t src = t - (K - 1 - k);
          if (src < 0) continue;
          const double term = g[size_t(t)] * widen(d.x.at(b, c, src));
          dw[size_t(c * K + k)] += term;
          dw_abs[size_t(c * K + k)] += std::abs(term);
          dw_sq[size_t(c * K + k)] += term * term;
        }
      }
      if (!want_dx) continue;
      for (int64_t t = 0; t < L; ++t) {
        double want = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const int64_t src = t + (K - 1 - k);
          if (src >= L) continue;
          const double term = widen(d.w[size_t(c * K + k)]) * g[size_t(src)];
          want += term;
          mag += std::abs(term);
        }
        // silu: g is rounded to T as the MMA operand (half an ulp per term).
        const double tol = ulp * std::abs(want) + (cs.silu ? ulp : 1e-5) * mag + 1e-6;
        if (!checked_nonfinite(widen(dx.at(b, c, t)), want, "dx", b, c, t))
          dx_tally.add(widen(dx.at(b, c, t)), want, tol, "dx", b, c, t, mag);
      }
    }
  EXPECT_EQ(written_outside_rows(dx), 0) << "dx elements written outside the rows";
  const double bound = std::is_same<T, __half>::value ? 2e-3 : 1e-2;  // tests/python/conftest.py
  if (want_dx) {
    // The per-element tolerance above is the real check; the L2 one is the Python tests' bound on
    // their scale (a single element, L = 1, reached 0.51 of it on ||ref|| alone in bf16 once).
    EXPECT_EQ(dx_tally.bad, 0) << "dx elements out of tolerance";
    EXPECT_LE(dx_tally.rel_l2_with_magnitude(), bound);
  }
  if (!want_dw) return;
  ErrorTally dw_tally, db_tally;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t k = 0; k <= K; ++k) {
      float sum = 0.0f;  // as depthwise_weight_grad_reduce: parts in order
      for (int64_t part = 0; part < B * tiles; ++part) sum += partials[size_t((c * B * tiles + part) * (K + 1) + k)];
      if (k < K) {
        // fp32 sums of exact products; with silu each term also carries g's rounding to T
        // (random, at most half an ulp): a few standard deviations of their sum.
        const size_t i = size_t(c * K + k);
        const double tol = 1e-5 * dw_abs[i] + (cs.silu ? 2 * ulp * std::sqrt(dw_sq[i]) : 0.0) + 1e-6;
        if (!checked_nonfinite(sum, dw[i], "dweight", 0, c, k))
          dw_tally.add(sum, dw[i], tol, "dweight", 0, c, k, dw_abs[i]);
      } else if (!checked_nonfinite(sum, db[size_t(c)], "dbias", 0, c, 0)) {
        db_tally.add(sum, db[size_t(c)], 1e-5 * double(B * L) + 1e-6, "dbias", 0, c, 0,  // fp32 g, fp32 sums
                     db_abs[size_t(c)]);
      }
    }
  EXPECT_EQ(dw_tally.bad + db_tally.bad, 0) << "weight-gradient elements out of tolerance";
  EXPECT_LE(dw_tally.rel_l2_with_magnitude(), bound / 2);
  EXPECT_LE(db_tally.rel_l2_with_magnitude(), bound / 2);
}

const Case kForwardBFloat16Cases[] = {
    {1, 1, 1, 16, false, false},         // L = 1
    {1, 2, 15, 9, true, false},          // narrowest TC width, L < 16
    {2, 1, 2100, 17, true, true},        // 2 tiles, partial second; 2 halo chunks
    {1, 1, 4093, 128, false, true},      // 16-byte aligned rows (stride 4096): cp.async
    {1, 1, 300, 256, true, false},       // L < K, widest
    {1, 1, 5000, 31, true, false, 1},    // one tile per block: 3 blocks along the row
    {1, 1, 10237, 64, true, true},       // aligned, 5 tiles walked by one block
};

const Case kForwardFloat16Cases[] = {
    {1, 3, 17, 255, true, true},
    {1, 1, 6141, 64, false, false},  // aligned rows, 3 tiles walked by one block
    {1, 1, 1000, 33, true, false},
    {1, 1, 253, 256, false, true},   // aligned (stride 256), row end inside a unit
};

// fp32 on tf32 MMAs split three ways: 2 to 17 Toeplitz blocks, L = 1, L < 16, L < K, partial
// tiles and units, both input stages, one tile per block; the first row 16-byte aligned (cp.async),
// the others of C > 1 not where L + 3 (row_pad's stride) is no multiple of 4 (the element path).
TEST(DepthwiseTensorCoreEmulated, ForwardTf32x3) {
  const Case cases[] = {
      {1, 1, 1, 9, true, false},           // L = 1, narrowest
      {1, 2, 15, 16, false, true},         // L < 16
      {2, 3, 2100, 17, true, true},        // 2 tiles, the second partial; 2 blocks
      {1, 1, 4093, 33, false, false},      // 3 blocks; row end inside a unit
      {1, 1, 6141, 64, true, true, 1},     // 5 blocks; one tile per block
      {1, 1, 10237, 128, true, false},     // 9 blocks; 5 tiles walked by one block
      {1, 2, 300, 129, false, false},      // 10 blocks (17's template); L < K
      {1, 1, 2500, 256, true, true},       // widest: 17 blocks
  };
  for (const Case& c : cases) run_forward<float>(c);
}

// The fp32 form on warpgroup MMA (tf32 split three ways, 64-step chunks): every block count (2-5),
// L = 1, L < 64, L < K, partial tiles and units, both input stages, one tile per block, and rows walked
// from the boundary before them (leads 0-3).
TEST(DepthwiseTensorCoreEmulated, ForwardWgmmaTf32x3) {
  const Case cases[] = {
      {1, 1, 1, 16, true, false},         // L = 1
      {1, 2, 15, 17, false, true},        // L < 64
      {2, 1, 2100, 33, true, true},       // one partial tile
      {1, 1, 4093, 65, false, false},     // 2 blocks; row end inside a unit
      {1, 1, 9000, 128, true, true, 1},   // 3 blocks; one tile per block: 3 blocks along the row
      {1, 1, 10237, 129, true, false},    // 3 blocks; 3 tiles walked by one block (both stages)
      {1, 1, 5000, 193, false, true},     // 4 blocks
      {1, 2, 300, 256, true, false},      // 5 blocks; L < K
  };
  for (const Case& c : cases) run_forward<float>(c, Form::wgmma);
  run_forward<float>({1, 4, 3, 16, true, false}, Form::wgmma, {true});
  run_forward<float>({2, 3, 4100, 65, true, true}, Form::wgmma, {true});
  run_forward<float>({1, 3, 8190, 256, false, true, 1}, Form::wgmma, {true});
  run_forward<float>({1, 3, 3000, 64, true, false, 8, 3}, Form::wgmma, {true});  // NaN and infinities
}

// NaN and infinities in x reach only the outputs whose terms hold them: the Toeplitz blocks'
// zero lags (before the filter and past it) must not multiply them (0 x inf = NaN). Every form
// (with its guard, depthwise_direct.cuh), the values in the halo of a tile (inf 40 steps
// on, past a 2048- / 4096-step tile boundary) and the last row's -inf.
TEST(DepthwiseTensorCoreEmulated, NonFiniteInputsStayCausal) {
  run_forward<__nv_bfloat16>({1, 2, 3000, 20, true, false, 8, 2030});
  run_forward<__half>({2, 1, 5000, 128, false, false, 8, 4080}, Form::wgmma);
  run_forward<__nv_bfloat16>({1, 2, 8192, 193, true, true, 3, 4090}, Form::wgmma_ring);
  run_forward<float>({1, 3, 3000, 64, true, false, 8, 2040});
  // The backward: silu's input (g redone from the direct forward sums) and dx (redone from g).
  run_backward<__nv_bfloat16>({1, 2, 3000, 20, true, true, 8, 2030});
  run_backward<__half>({2, 1, 2500, 128, false, false, 8, 2030});
  // Walked from the boundary before the rows (the last row's lead is 3 at L3000, 7 at L2500 C2).
  run_forward<__nv_bfloat16>({1, 2, 3000, 20, true, false, 8, 2030}, Form::mma_sync, {true});
  run_forward<float>({1, 3, 3000, 64, true, true, 8, 3}, Form::mma_sync, {true});
  run_backward<__nv_bfloat16>({1, 2, 3000, 20, true, true, 8, 2030}, true, true, {true});
  run_backward<__half>({1, 2, 2500, 128, false, false, 8, 200}, true, true, {true});
}

// Both input stages in turn where a block walks several tiles; cp.async on the aligned rows,
// the element path on the others.
TEST(DepthwiseTensorCoreEmulated, Forward) {
  for (const Case& c : kForwardBFloat16Cases) run_forward<__nv_bfloat16>(c);
  for (const Case& c : kForwardFloat16Cases) run_forward<__half>(c);
  run_forward<__nv_bfloat16>({2, 3, 8189, 128, true, true, 2});  // aligned, 4 tiles, 2 per block
}

// Rows off the 16-byte boundary walked from the boundary before them (kShiftedRows): the same
// cases (rows at stride L + 3: leads 0-7; the grid takes the row's own tiles and the block that
// walked the last computes the walk's tail where a lead pushes it past them), rows shorter than a
// unit with a lead (the first unit masked at both ends), and y's rows at other leads than x's
// (those rows by element). Dropping the first unit's mask, or storing the walk's first `lead`
// outputs, fails it.
TEST(DepthwiseTensorCoreEmulated, ForwardShiftedRows) {
  const Walk shifted{true};
  for (const Case& c : kForwardBFloat16Cases) run_forward<__nv_bfloat16>(c, Form::mma_sync, shifted);
  for (const Case& c : kForwardFloat16Cases) run_forward<__half>(c, Form::mma_sync, shifted);
  run_forward<__nv_bfloat16>({1, 4, 1, 16, true, false}, Form::mma_sync, shifted);  // L = 1: leads 0 and 4
  run_forward<__half>({1, 3, 6, 9, true, true}, Form::mma_sync, shifted);            // leads 0, 1, 2
  run_forward<__nv_bfloat16>({2, 3, 2100, 17, true, true}, Form::mma_sync, {true, 2});
  run_forward<__nv_bfloat16>({1, 3, 4100, 128, false, true, 1}, Form::mma_sync, {true, 5});
  // fp32 (leads 0-3): the tf32 form.
  run_forward<float>({1, 4, 3, 9, true, false}, Form::mma_sync, shifted);
  run_forward<float>({2, 3, 2100, 17, true, true}, Form::mma_sync, shifted);
  run_forward<float>({1, 3, 4095, 128, false, false, 1}, Form::mma_sync, shifted);
  run_forward<float>({1, 2, 300, 256, true, true}, Form::mma_sync, {true, 1});
  // The wgmma form (4096-step tiles; its launcher takes shifted rows only where every x row shares
  // its y row's lead, so no fallback here).
  run_forward<__nv_bfloat16>({1, 4, 1, 16, true, false}, Form::wgmma, shifted);
  run_forward<__nv_bfloat16>({2, 3, 4100, 65, true, true}, Form::wgmma, shifted);
  run_forward<__nv_bfloat16>({1, 3, 8190, 128, false, false, 1}, Form::wgmma, shifted);  // leads 0, 1, 2
  run_forward<__half>({1, 3, 250, 256, true, true}, Form::wgmma, shifted);
}

// The walks' tails (depthwise_walk_tail: at most 7 outputs, 3 in fp32) on every forward form.
// Lengths just under a tile multiple (rows at stride L + 3: several leads push the walk past the
// row's last tile, the others do not; L = 1 with no tail is ForwardShiftedRows'), tails taken by the
// second of two blocks along the row, silu and bias, and K up to 256 (16 taps a thread).
TEST(DepthwiseTensorCoreEmulated, ForwardShiftedRowsTails) {
  const Walk shifted{true};
  run_forward<__nv_bfloat16>({2, 3, 4094, 17, true, true}, Form::mma_sync, shifted);    // 2 tiles, tails of 1-5
  run_forward<__half>({1, 4, 2046, 200, false, true, 1}, Form::mma_sync, shifted);      // 1 tile a block
  run_forward<__nv_bfloat16>({1, 3, 4095, 33, true, false}, Form::mma_sync, {true, 2});  // some rows by element
  run_forward<float>({2, 3, 4094, 17, true, true}, Form::mma_sync, shifted);            // tf32; tails of 1-2
  run_forward<float>({1, 4, 2047, 256, false, false, 1}, Form::mma_sync, shifted);
  run_forward<__nv_bfloat16>({1, 3, 8190, 128, false, true, 1}, Form::wgmma, shifted);  // tile 2 of 2 blocks
  run_forward<__half>({2, 3, 4093, 65, true, true}, Form::wgmma, shifted);
  run_forward<__nv_bfloat16>({1, 4, 4095, 256, true, false}, Form::wgmma, shifted);
  run_forward<float>({1, 4, 4094, 129, true, true}, Form::wgmma, shifted);             // the wgmma tf32 form
  run_forward<float>({1, 3, 8191, 65, false, false, 1}, Form::wgmma, shifted);
}

// The wgmma form: 4096-step tiles, halos of 1-4 chunks, both input stages, partial tiles and units.
TEST(DepthwiseTensorCoreEmulated, ForwardWgmma) {
  const Case bf16_cases[] = {
      {1, 1, 1, 16, false, false},        // L = 1
      {1, 2, 15, 9, true, false},         // narrowest width, L < 64
      {2, 1, 2100, 17, true, true},       // one partial tile
      {1, 1, 4093, 128, false, true},     // row end inside a unit
      {1, 1, 300, 256, true, false},      // L < K, widest: 5 blocks
      {1, 1, 9000, 65, true, false, 1},   // 2 blocks; one tile per block: 3 blocks along the row
      {1, 1, 10237, 129, true, true},     // 3 blocks; 3 tiles walked by one block (both stages)
      {1, 1, 17000, 193, true, false},    // 4 blocks; 5 tiles walked by one block
      {2, 3, 8189, 128, true, true, 1},   // 3 blocks; 2 tiles, one per block
  };
  for (const Case& c : bf16_cases) run_forward<__nv_bfloat16>(c, Form::wgmma);
  const Case f16_cases[] = {
      {1, 3, 17, 255, true, true},
      {1, 1, 6141, 64, false, false},
      {1, 1, 253, 193, false, true},  // 4 blocks, row end inside a unit
  };
  for (const Case& c : f16_cases) run_forward<__half>(c, Form::wgmma);
}

// The streaming wgmma form (L % 64 == 0; the last field is the grid's blocks): TMA boxes with the
// halo zero-filled before the row and the tail past it, every width's block count, blocks whose
// ranges cross rows (fragments rebuilt from the stage's table) and wrap the 4-stage ring several
// times, both output tiles, partial last tiles, one block per tile, and rows 16 bytes apart
// (stride L + 8); the producer's weights loaded a row ahead (across batches too: the row after
// channel C - 1 is channel 0; with the next row's loads given this row's channel, it fails).
TEST(DepthwiseTensorCoreEmulated, ForwardWgmmaRing) {
  const Case bf16_cases[] = {
      {1, 1, 64, 64, true, false, 3},      // one chunk, 2 blocks; more blocks than tiles
      {2, 3, 4160, 33, true, true, 4},     // 2 tiles a row (the second of one chunk), ranges across rows
      {1, 5, 8192, 128, true, false, 2},   // 3 blocks; 5 tiles per block: the ring wraps
      {3, 2, 12288, 129, false, true, 5},  // 3 blocks; 18 tiles over 5 blocks, rows split mid-way
      {1, 2, 128, 193, true, false, 2},    // 4 blocks; L < K
      {1, 3, 8256, 256, true, true, 9},    // 5 blocks; one tile per block
      {2, 5, 64, 100, true, false, 1},     // 10 rows of one tile in one block (a row change every tile)
      {1, 2, 4096, 70, false, false, 1},   // 2 tiles, fewer than the stages
  };
  for (const Case& c : bf16_cases) run_forward<__nv_bfloat16>(c, Form::wgmma_ring);
  const Case f16_cases[] = {
      {2, 2, 4096, 65, true, true, 3},
      {1, 4, 192, 255, false, false, 1},  // every row in one block
  };
  for (const Case& c : f16_cases) run_forward<__half>(c, Form::wgmma_ring);
}

TEST(DepthwiseTensorCoreEmulated, BackwardBFloat16) {
  run_backward<__nv_bfloat16>({1, 1, 1, 16, true, true});      // L = 1
  run_backward<__nv_bfloat16>({1, 3, 15, 9, true, false});     // C odd, L < 16, narrowest
  run_backward<__nv_bfloat16>({2, 1, 2100, 31, true, true});   // 2 tiles, partial second
  run_backward<__nv_bfloat16>({1, 1, 4093, 128, false, true});  // aligned rows: cp.async, 2 tiles deep
  run_backward<__nv_bfloat16>({1, 1, 300, 256, true, true});   // L < K, widest, look-ahead past the row
  run_backward<__nv_bfloat16>({1, 1, 6141, 64, true, false, 1});  // one tile per block
  run_backward<__nv_bfloat16>({1, 2, 509, 255, false, false});
}

// Rows off the 16-byte boundary walked from the boundary before them (kShiftedRows): x, dy and
// dx at one lead (stride L + 3), with and without silu, dx or the weight gradients alone, and dx's
// rows at other leads than x's (those rows by element).
TEST(DepthwiseTensorCoreEmulated, BackwardShiftedRows) {
  const Walk shifted{true};
  run_backward<__nv_bfloat16>({1, 4, 1, 16, true, true}, true, true, shifted);  // L = 1: leads 0 and 4
  run_backward<__nv_bfloat16>({1, 3, 15, 9, true, false}, true, true, shifted);
  run_backward<__nv_bfloat16>({2, 3, 2100, 31, true, true}, true, true, shifted);
  run_backward<__nv_bfloat16>({1, 3, 4100, 128, false, true, 1}, true, true, shifted);
  run_backward<__half>({1, 2, 300, 256, true, true}, true, true, shifted);
  run_backward<__half>({2, 3, 700, 20, true, false}, true, true, {true, 3});
  run_backward<__half>({1, 3, 700, 16, true, true}, true, false, shifted);   // dx only
  run_backward<__half>({1, 3, 700, 64, true, true}, false, true, shifted);   // weight gradients only
}

TEST(DepthwiseTensorCoreEmulated, BackwardFloat16) {
  run_backward<__half>({1, 1, 253, 256, true, true});    // aligned (stride 256)
  run_backward<__half>({2, 1, 1000, 33, true, true});
  run_backward<__half>({1, 1, 2045, 128, false, false});  // aligned, row end inside a unit
  run_backward<__half>({2, 3, 700, 20, true, true});    // partials of several rows and batches
  run_backward<__half>({1, 1, 700, 16, true, true}, true, false);   // dx only
  run_backward<__half>({1, 1, 700, 64, true, true}, false, true);   // weight gradients only
  run_backward<__half>({1, 1, 700, 64, false, false}, false, true);
}

}  // namespace
}  // namespace causalconv
