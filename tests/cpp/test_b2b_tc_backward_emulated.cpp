// The tensor-core b2b backwards run on the CPU under tests/cpp/cuda_emulation.h +
// mma_emulation.h (and the sm_90a emulation of common/sm90_primitives.cuh), called directly:
// the mma.sync form (src/b2b/b2b_backward_tc_kernel.cuh) and the wgmma form
// (b2b_backward_wgmma_kernel.cuh: the tile walk from a segment's end, the carried dh and dp
// chunks, the priming tile of a segment that ends before its row, both projection widths'
// skipped k-slices, every mixer block count, partial tiles and units).
// Checked element by element against an fp64 brute force of the operator's backward:
// dx of all three rows, and dwp, dwm, dskip from the kernel's per-block partials summed
// in the reduction kernel's order; the partials of two runs are bitwise equal.
#include "cuda_emulation.h"  // first: it sets up the emulated CUDA built-ins
#include "mma_emulation.h"

#define b2b_backward_tc_kernel b2b_backward_tc_kernel_emulated
#include "b2b/b2b_backward_tc_kernel.cuh"
#undef b2b_backward_tc_kernel
#define b2b_backward_wgmma_kernel b2b_backward_wgmma_kernel_emulated
#include "b2b/b2b_backward_wgmma_kernel.cuh"
#undef b2b_backward_wgmma_kernel
#define b2b_backward_wgmma_tf32x3_kernel b2b_backward_wgmma_tf32x3_kernel_emulated
#include "b2b/b2b_backward_wgmma_tf32_kernel.cuh"
#undef b2b_backward_wgmma_tf32x3_kernel

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "b2b_kernel_params.h"
#include "b2b_test_data.h"
#include "error_tally.h"
#include "host_tensor.h"

namespace causalconv {
namespace {

using test::Activation;
using test::HostTensor;
using test::Weight;
using test::widen;
namespace emu = causalconv::emulation;

struct Case {
  int64_t batch, dim, length, kp, km;
  bool aligned = false;  // rows 16-byte aligned (cp.async staging); else odd strides (element path)
  int64_t tiles_per_block = 4;  // mma.sync: tiles per block, strided; wgmma: tiles per segment
};

// The mma.sync form (b2b_backward_tc_kernel) or, on rows of 16-byte vectors, the wgmma form
// (wgmma_dwp_band: its dwp as the lag band of mma.sync products, Kp <= detail::kDwpBandLags); the *_realigned
// wgmma forms on rows off the 16-byte grid (kRealigned); wgmma_tf32: the fp32 form
// (b2b_backward_wgmma_tf32_kernel.cuh: independent 4096-step tiles walked strided, any rows).
enum class Form {
  mma_sync,
  wgmma,
  wgmma_dwp_band,
  wgmma_realigned,
  wgmma_dwp_band_realigned,
  wgmma_tf32,
  wgmma_tf32_dwm_group  // the tf32 form with a third warpgroup on dwm (kDwmGroup)
};

using test::ErrorTally;

template <typename T, int kMaxBlocks>
void launch_emulated(const detail::B2BBackwardParams& p, const detail::B2BTiling& tiling, float* partials) {
  emu::launch({unsigned(p.batch * p.dim), unsigned(tiling.tile_blocks), 1}, detail::ToeplitzTile::kThreads,
              size_t(detail::B2BTcBackwardLayout<kMaxBlocks>::kBytes),
              [&] { detail::b2b_backward_tc_kernel_emulated<T, kMaxBlocks>(p, tiling, partials); });
}

template <typename T, int kMixerBlocks, bool kRealigned>
void launch_wgmma_emulated(const detail::B2BBackwardParams& p, const detail::B2BTiling& tiling,
                           int64_t tiles_per_segment, bool dwp_band, float* partials) {
  using Tile = detail::WgmmaToeplitzTile;
  emu::launch({unsigned(p.batch * p.dim), unsigned(tiling.tile_blocks), 1}, Tile::kThreads,
              size_t(detail::B2BWgmmaBackwardLayout<kMixerBlocks, kRealigned>::kBytes), [&] {
                if (dwp_band)
                  detail::b2b_backward_wgmma_kernel_emulated<T, kMixerBlocks, true, kRealigned>(
                      p, tiling.tiles, tiles_per_segment, partials);
                else
                  detail::b2b_backward_wgmma_kernel_emulated<T, kMixerBlocks, false, kRealigned>(
                      p, tiling.tiles, tiles_per_segment, partials);
              });
}

template <int kMixerBlocks>
void launch_wgmma_tf32_emulated(const detail::B2BBackwardParams& p, const detail::B2BTiling& tiling, bool dwm_group,
                                float* partials) {
  emu::launch({unsigned(p.batch * p.dim), unsigned(tiling.tile_blocks), 1},
              detail::b2b_wgmma_tf32_backward_threads(dwm_group),
              size_t(detail::B2BWgmmaTf32BackwardLayout<kMixerBlocks>::kBytes), [&] {
                if (dwm_group)
                  detail::b2b_backward_wgmma_tf32x3_kernel_emulated<kMixerBlocks, true>(p, tiling.tiles, partials);
                else
                  detail::b2b_backward_wgmma_tf32x3_kernel_emulated<kMixerBlocks, false>(p, tiling.tiles, partials);
              });
}

template <typename T>
void run_case(const Case& cs, Form form = Form::mma_sync) {
  const bool realigned = form == Form::wgmma_realigned || form == Form::wgmma_dwp_band_realigned;
  const bool band = form == Form::wgmma_dwp_band || form == Form::wgmma_dwp_band_realigned;
  const bool tf32 = form == Form::wgmma_tf32 || form == Form::wgmma_tf32_dwm_group;
  const bool dwm_group = form == Form::wgmma_tf32_dwm_group;
  SCOPED_TRACE(::testing::Message() << (form == Form::mma_sync ? "mma.sync"
                                        : dwm_group            ? "wgmma tf32x3, a warpgroup on dwm"
                                        : tf32                 ? "wgmma tf32x3"
                                        : band                 ? "wgmma, dwp by the mma.sync band"
                                                               : "wgmma")
                                    << (realigned ? " realigned" : "") << " B" << cs.batch << " D"
                                    << cs.dim << " L" << cs.length << " Kp" << cs.kp << " Km" << cs.km << " aligned "
                                    << cs.aligned);
  const int64_t B = cs.batch, D = cs.dim, L = cs.length, Kp = cs.kp, Km = cs.km;
  // wgmma: every row 16-byte aligned, or (realigned) x and dout rows at stride L + 3 and dx's at
  // L + 5, so that the rows of a channel lie at different leads.
  const bool aligned = cs.aligned || (form != Form::mma_sync && !tf32 && !realigned);
  const int64_t pad = aligned ? 8 - L % 8 : 3;  // >= 1 NaN slot after each row
  HostTensor xh({B, 3 * D, L}), gh({B, D, L}), wph({3 * D, Kp}), wmh({D, Km}), skiph({D});
  std::random_device seed;
  xh.fill_uniform(seed());
  gh.fill_uniform(seed());
  wph.fill_uniform(seed());
  wmh.fill_uniform(seed(), -1.0 / std::sqrt(double(Km)), 1.0 / std::sqrt(double(Km)));
  skiph.fill_uniform(seed());
  Activation<T> x(B, 3 * D, L, pad), dout(B, D, L, pad), dx(B, 3 * D, L, realigned ? 5 : pad);
  Weight<T> wp(3 * D, Kp), wm(D, Km), skip(D, 1);
  x.load(xh);  // the host tensors now hold the rounded values
  dout.load(gh);
  wp.load(wph);
  wm.load(wmh);
  skip.load(skiph);

  const detail::B2BBackwardParams p = test::b2b_backward_params(x, wp, wm, skip, dout, dx);

  detail::B2BTiling tiling = detail::make_b2b_tiling(L, detail::ToeplitzTile::kOutputs, cs.tiles_per_block);
  if (tf32) {  // tiles_per_block 4096-step tiles a block, strided
    tiling = detail::make_b2b_tiling(L, detail::WgmmaToeplitzTile::kOutputs, cs.tiles_per_block);
  } else if (form != Form::mma_sync) {  // segments of tiles_per_block consecutive 4096-step tiles
    const int64_t tiles = (L + detail::WgmmaToeplitzTile::kOutputs - 1) / detail::WgmmaToeplitzTile::kOutputs;
    tiling = {tiles, (tiles + cs.tiles_per_block - 1) / cs.tiles_per_block};
  }
  const int64_t slots = 3 * Kp + Km + 1, parts = B * tiling.tile_blocks;
  std::vector<float> partials(size_t(D * parts * slots), std::numeric_limits<float>::quiet_NaN());
  std::vector<float> again = partials;
  auto run = [&](float* out) {
    if constexpr (std::is_same<T, float>::value) {  // only the tf32 form takes fp32
      switch (detail::toeplitz64_blocks(int(Km))) {
        case 2: launch_wgmma_tf32_emulated<2>(p, tiling, dwm_group, out); break;
        case 3: launch_wgmma_tf32_emulated<3>(p, tiling, dwm_group, out); break;
        case 4: launch_wgmma_tf32_emulated<4>(p, tiling, dwm_group, out); break;
        default: launch_wgmma_tf32_emulated<5>(p, tiling, dwm_group, out); break;
      }
    } else {
    if (form != Form::mma_sync) {
      auto launch = [&](auto realigned_rows) {
        constexpr bool kRealigned = decltype(realigned_rows)::value;
        detail::with_toeplitz64_blocks(Km, [&](auto blocks) {
          launch_wgmma_emulated<T, decltype(blocks)::value, kRealigned>(p, tiling, cs.tiles_per_block, band, out);
        });
      };
      if (realigned)
        launch(std::true_type{});
      else
        launch(std::false_type{});
      return;
    }
    detail::with_toeplitz_max_blocks(
        Km, [&](auto max_blocks) { launch_emulated<T, decltype(max_blocks)::value>(p, tiling, out); });
    }
  };
  run(partials.data());
  run(again.data());
  EXPECT_EQ(std::memcmp(partials.data(), again.data(), partials.size() * sizeof(float)), 0)
      << "weight-gradient partials differ between two runs";

  // fp64 brute force, with magnitudes (the same formulas over absolute values) for the
  // tolerances: z or dh, then dp, then dx are each rounded to T (<= ulp/2 relative), so
  // |dx error| <= ulp * mag(dx) + ulp/2 |dx| to first order, plus fp32 accumulation (fp32: the
  // tf32 split's ~2^-21 a mixer term sits inside the 1e-5 of the magnitude).
  constexpr bool kFloat = std::is_same<T, float>::value;
  const double ulp = kFloat ? std::ldexp(1.0, -24) : std::is_same<T, __half>::value ? std::ldexp(1.0, -10)
                                                                                       : std::ldexp(1.0, -7);
  const size_t Ls = size_t(L);
  std::vector<double> dwp(size_t(3 * D * Kp), 0.0), dwp_mag(dwp.size(), 0.0);
  std::vector<double> dwm(size_t(D * Km), 0.0), dwm_mag(dwm.size(), 0.0), dsk(size_t(D), 0.0), dsk_mag(dsk.size(), 0.0);
  double dwp_terms2 = 0, dwm_terms2 = 0, dsk_terms2 = 0;  // sums of the squared magnitudes of every weight-gradient term
  ErrorTally dx_tally;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < D; ++c) {
      std::vector<double> pr[3], z(Ls), za(Ls), h(Ls), ha(Ls), dh(Ls), dha(Ls), dz(Ls), dza(Ls);
      std::vector<double> dp[3], dpa[3];
      for (int j = 0; j < 3; ++j) {
        pr[j].assign(Ls, 0.0);
        dp[j].assign(Ls, 0.0);
        dpa[j].assign(Ls, 0.0);
        for (int64_t t = 0; t < L; ++t)
          for (int64_t k = 0; k < Kp; ++k) {
            const int64_t src = t - (Kp - 1 - k);
            if (src >= 0) pr[j][size_t(t)] += wph(3 * c + j, k) * xh(b, 3 * c + j, src);
          }
      }
      const double sk = skiph(c);
      for (size_t t = 0; t < Ls; ++t) z[t] = pr[1][t] * pr[2][t], za[t] = std::abs(z[t]);
      for (int64_t t = 0; t < L; ++t) {
        double s = sk * z[size_t(t)], a = std::abs(sk) * za[size_t(t)];
        for (int64_t k = 0; k < Km; ++k) {
          const int64_t src = t - (Km - 1 - k);
          if (src < 0) continue;
          s += wmh(c, k) * z[size_t(src)];
          a += std::abs(wmh(c, k)) * za[size_t(src)];
        }
        h[size_t(t)] = s, ha[size_t(t)] = a;
        dh[size_t(t)] = gh(b, c, t) * pr[0][size_t(t)];
        dha[size_t(t)] = std::abs(dh[size_t(t)]);
      }
      for (int64_t t = 0; t < L; ++t) {
        double s = sk * dh[size_t(t)], a = std::abs(sk) * dha[size_t(t)];
        for (int64_t k = 0; k < Km; ++k) {
          const int64_t src = t + (Km - 1 - k);
          if (src >= L) continue;
          s += wmh(c, k) * dh[size_t(src)];
          a += std::abs(wmh(c, k)) * dha[size_t(src)];
        }
        dz[size_t(t)] = s, dza[size_t(t)] = a;
        const size_t u = size_t(t);
        dp[0][u] = gh(b, c, t) * h[u], dpa[0][u] = std::abs(gh(b, c, t)) * ha[u];
        dp[1][u] = dz[u] * pr[2][u], dpa[1][u] = dza[u] * std::abs(pr[2][u]);
        dp[2][u] = dz[u] * pr[1][u], dpa[2][u] = dza[u] * std::abs(pr[1][u]);
        dsk[size_t(c)] += dh[u] * z[u];
        dsk_mag[size_t(c)] += dha[u] * za[u];
        dsk_terms2 += (dha[u] * za[u]) * (dha[u] * za[u]);
        for (int64_t k = 0; k < Km; ++k) {
          const int64_t src = t - (Km - 1 - k);
          if (src < 0) continue;
          dwm[size_t(c * Km + k)] += dh[u] * z[size_t(src)];
          dwm_mag[size_t(c * Km + k)] += dha[u] * za[size_t(src)];
          dwm_terms2 += (dha[u] * za[size_t(src)]) * (dha[u] * za[size_t(src)]);
        }
      }
      for (int j = 0; j < 3; ++j) {
        const int64_t row = 3 * c + j;
        for (int64_t t = 0; t < L; ++t) {
          double want = 0, mag = 0;
          for (int64_t k = 0; k < Kp; ++k) {
            const int64_t src = t + (Kp - 1 - k);
            if (src < L) {
              want += wph(row, k) * dp[j][size_t(src)];
              mag += std::abs(wph(row, k)) * dpa[j][size_t(src)];
            }
            const int64_t back = t - (Kp - 1 - k);
            if (back >= 0) {
              dwp[size_t(row * Kp + k)] += dp[j][size_t(t)] * xh(b, row, back);
              dwp_mag[size_t(row * Kp + k)] += dpa[j][size_t(t)] * std::abs(xh(b, row, back));
              dwp_terms2 += std::pow(dpa[j][size_t(t)] * xh(b, row, back), 2);
            }
          }
          const double tol = (1.25 * ulp + 1e-5) * mag + ulp * std::abs(want) + 1e-6;
          dx_tally.add(widen(dx.at(b, row, t)), want, tol, "dx", b, row, t, mag);
        }
        EXPECT_TRUE(std::isnan(widen(dx.data[size_t(b * dx.stride_b + row * dx.stride_c + L)])))
            << "wrote past the end of dx row " << b << "," << row;
      }
    }
  // tests/python/conftest.py's REL_L2_BOUND and REDUCTION_REL_L2_BOUND.
  const double bound = kFloat ? 1e-6 : std::is_same<T, __half>::value ? 2e-3 : 1e-2;
  const double reduction_bound = kFloat ? 5e-5 : bound;
  EXPECT_EQ(dx_tally.bad, 0) << "dx elements out of tolerance";
  // The element-wise tolerances above are the real check; the L2 error must also meet the
  // dtype's bound (with fresh random inputs it has reached 0.5 of it in bf16), on the Python tests'
  // scale (fp32 at L = 1 once reached 2.6 times it on ||ref|| alone: session 48's CI).
  EXPECT_LE(dx_tally.rel_l2_with_magnitude(), bound);

  // Weight gradients: each dwp and dwm term's operands carry up to two roundings to T
  // (ulp/2 each); dskip sums the fp32 dh z.
  ErrorTally dwp_tally, dwm_tally, dsk_tally;
  for (int64_t c = 0; c < D; ++c)
    for (int64_t s = 0; s < slots; ++s) {
      float sum = 0.0f;  // as b2b_weight_grad_reduce: the channel's parts in order
      for (int64_t part = 0; part < parts; ++part) sum += partials[size_t((c * parts + part) * slots + s)];
      auto tol = [&](double mag) { return (1.25 * ulp + 1e-5) * mag + 1e-6; };
      if (s < 3 * Kp) {
        const int64_t row = 3 * c + s / Kp, k = s % Kp, i = row * Kp + k;
        dwp_tally.add(sum, dwp[size_t(i)], tol(dwp_mag[size_t(i)]), "dweight_proj", row, k, 0);
      } else if (s < 3 * Kp + Km) {
        const size_t i = size_t(c * Km + s - 3 * Kp);
        dwm_tally.add(sum, dwm[i], tol(dwm_mag[i]), "dweight_mixer", c, s - 3 * Kp, 0);
      } else {
        dsk_tally.add(sum, dsk[size_t(c)], 1e-5 * dsk_mag[size_t(c)] + 1e-6, "dskip_bias", c, 0, 0);  // fp32 dh, z
      }
    }
  EXPECT_EQ(dwp_tally.bad + dwm_tally.bad + dsk_tally.bad, 0) << "weight-gradient elements out of tolerance";
  if (std::getenv("B2B_TC_PRINT_ERRORS"))
    std::printf("rel L2: dx %.2e dwp %.2e dwm %.2e dskip %.2e (of their terms' RSS)\n", dx_tally.rel_l2(),
                dwp_tally.l2_relative_to(dwp_terms2), dwm_tally.l2_relative_to(dwm_terms2),
                dsk_tally.l2_relative_to(dsk_terms2));
  // The weight gradients are sums over B*L terms of mixed sign whose roundings add up like a
  // random walk, ~ulp * sqrt(sum of squared terms); with few channels their exact values can
  // cancel below that (D = 1, Kp 3: nine dwp values reached 1.13x the bound against their own
  // norm in a fresh-clone CI run, every element within its tolerance; dskip, one value per channel,
  // 5.6x in session 39's). So their L2 error is bounded against the root sum of squares of the terms.
  EXPECT_LE(dwp_tally.l2_relative_to(dwp_terms2), reduction_bound);
  EXPECT_LE(dwm_tally.l2_relative_to(dwm_terms2), reduction_bound);
  EXPECT_LE(dsk_tally.l2_relative_to(dsk_terms2), reduction_bound);
}

TEST(B2BTensorCoreBackwardEmulated, BFloat16) {
  run_case<__nv_bfloat16>({1, 1, 1, 2, 16});                // L = 1
  run_case<__nv_bfloat16>({1, 3, 15, 3, 9});                // odd D, L < 16, narrowest mixer
  run_case<__nv_bfloat16>({2, 1, 2100, 3, 128});            // B 2, 2 tiles (partial second)
  run_case<__nv_bfloat16>({1, 1, 300, 32, 256});            // L < Km, widest filters (3 projection blocks)
  run_case<__nv_bfloat16>({1, 1, 4093, 4, 255, true});      // aligned rows: cp.async staging, 2 tiles
  run_case<__nv_bfloat16>({1, 1, 5000, 3, 128, true, 1});   // one tile per block: 3 blocks along the row
}

// The wgmma form: tiles are 4096 steps; tiles_per_block is the segment length.
TEST(B2BTensorCoreBackwardEmulated, WgmmaBFloat16) {
  run_case<__nv_bfloat16>({1, 1, 1, 2, 16}, Form::wgmma);             // L = 1
  run_case<__nv_bfloat16>({1, 3, 70, 3, 9}, Form::wgmma);             // odd D, narrowest mixer, 2 blocks
  run_case<__nv_bfloat16>({2, 1, 4100, 3, 128}, Form::wgmma);         // B 2, 2 tiles (4 steps in the second)
  run_case<__nv_bfloat16>({1, 1, 300, 32, 256}, Form::wgmma);         // L < Km, widest filters, 5 blocks
  run_case<__nv_bfloat16>({1, 1, 12290, 4, 193, false, 1}, Form::wgmma);  // 4 segments of 1: priming tiles
  run_case<__nv_bfloat16>({1, 1, 16384, 17, 65, false, 3}, Form::wgmma);  // segments 3 + 1, Kp 17
}

// dwp by the band of mma.sync products (Kp <= 8, as b2b_backward.cu dispatches it): the same walks.
TEST(B2BTensorCoreBackwardEmulated, WgmmaDwpBandBFloat16) {
  run_case<__nv_bfloat16>({1, 1, 1, 2, 16}, Form::wgmma_dwp_band);
  run_case<__nv_bfloat16>({2, 3, 4100, 3, 128}, Form::wgmma_dwp_band);
  run_case<__nv_bfloat16>({1, 1, 12290, 4, 256, false, 1}, Form::wgmma_dwp_band);
  run_case<__nv_bfloat16>({1, 2, 4500, 2, 33}, Form::wgmma_dwp_band);  // Kp 2
  run_case<__nv_bfloat16>({1, 2, 4200, 8, 64}, Form::wgmma_dwp_band);  // Kp 8: every lag of the band
  run_case<__nv_bfloat16>({1, 1, 300, 5, 9}, Form::wgmma_dwp_band);    // Kp 5, L < one tile
}

TEST(B2BTensorCoreBackwardEmulated, WgmmaDwpBandFloat16) {
  run_case<__half>({1, 2, 8200, 4, 65, false, 2}, Form::wgmma_dwp_band);
}

TEST(B2BTensorCoreBackwardEmulated, WgmmaFloat16) {
  run_case<__half>({1, 2, 700, 18, 64}, Form::wgmma);                  // Kp 18: one more k-slice
  run_case<__half>({3, 1, 8200, 3, 129, false, 2}, Form::wgmma);       // B 3, segments 2 + 1, 3 blocks
}

// Rows off the 16-byte grid (kRealigned): x's and dout's rows at stride L + 3 and dx's at L + 5
// (every lead among a channel's rows, 0 included): L = 1, L < one unit, a tile boundary inside a
// unit, priming tiles, every mixer block count, both dwp forms, fp16 and bf16.
TEST(B2BTensorCoreBackwardEmulated, WgmmaRealignedRows) {
  run_case<__nv_bfloat16>({1, 3, 1, 2, 16}, Form::wgmma_realigned);                     // L = 1
  run_case<__nv_bfloat16>({1, 3, 7, 3, 9}, Form::wgmma_dwp_band_realigned);         // L < one unit
  run_case<__nv_bfloat16>({2, 2, 4100, 3, 128}, Form::wgmma_dwp_band_realigned);    // 2 tiles, 4 steps in the second
  run_case<__nv_bfloat16>({1, 1, 12291, 17, 193, false, 1}, Form::wgmma_realigned);     // segments of 1: priming tiles
  run_case<__half>({1, 2, 8197, 4, 256, false, 2}, Form::wgmma_dwp_band_realigned);  // segments 2 + 1, 5 blocks
  run_case<__half>({1, 1, 301, 18, 65}, Form::wgmma_realigned);                         // L < Km, Kp 18
}

// fp32 on warpgroup MMA (Kp <= 4): L = 1, odd D, L < Km, every mixer block count, a tile boundary
// (the dp steps past a tile summed directly), blocks walking two tiles strided, aligned rows
// (cp.async staging, 16-byte dx stores) and rows at stride L + 3 (element paths), Kp 2 to 4. Each
// case in the form b2b_backward.cu dispatches at its mixer blocks (b2b_wgmma_tf32_backward_dwm_group:
// the third warpgroup on dwm up to 4, two warpgroups above); each form's cases ran ~4 minutes of
// CI's ctest when every case ran in both.
TEST(B2BTensorCoreBackwardEmulated, WgmmaTf32x3Float32) {
  auto run = [](const Case& cs) {
    const bool dwm_group = detail::b2b_wgmma_tf32_backward_dwm_group(detail::toeplitz64_blocks(int(cs.km)));
    run_case<float>(cs, dwm_group ? Form::wgmma_tf32_dwm_group : Form::wgmma_tf32);
  };
  run({1, 1, 1, 2, 16});                  // L = 1, 2 blocks
  run({1, 3, 70, 3, 9});                  // odd D, narrow mixer
  run({2, 1, 4100, 3, 128, true});        // B 2, 2 tiles (4 steps in the second)
  run({1, 1, 300, 4, 256});               // L < Km, 5 blocks (two warpgroups)
  run({1, 1, 4500, 3, 256, true});        // 5 blocks across a tile boundary
  run({1, 2, 8192, 4, 193, true, 1});     // 2 tiles in 2 blocks, 4 blocks
  run({1, 1, 12290, 2, 65, false, 2});    // 4 tiles, 2 blocks walking 2 each
}

TEST(B2BTensorCoreBackwardEmulated, Float16) {
  run_case<__half>({1, 2, 700, 2, 16});
  run_case<__half>({1, 1, 9000, 17, 64, true});  // 5 tiles, 2 blocks: block 0 walks tiles 0, 2, 4
  run_case<__half>({8, 1, 40, 3, 9});            // B 8
  run_case<__half>({1, 1, 2049, 18, 256});       // one step into the second tile, Kp 18
}

}  // namespace
}  // namespace causalconv
