// The b2b forwards with the mixer on the tensor cores run on the CPU under
// tests/cpp/cuda_emulation.h + mma_emulation.h (and the sm_90a emulation of
// common/sm90_primitives.cuh), against an fp64 brute force of the operator, element by element.
// The mma.sync form: z staging into the swizzled tile, the mixer halo in chunks, skip and gate
// in the epilogue, tile walks and partial tiles, the two x stages in turn, cp.async on 16-byte
// aligned rows and the element path on the others. The wgmma form: the Hankel tables, the
// skipped k-slices at both projection widths, every mixer block count, the z halo carried from
// tile to tile and computed at each segment's first tile, partial tiles and units. The fp32 form
// (the mixer on tf32 MMAs split three ways): z and the gate from the CUDA-core projections, the
// mixer's halo, the one x stage reused while the MMAs run, NaN and infinities kept causal. (The
// GPU run: tests/python/test_b2b.py, test_tensor_core_mixer and test_fp32_wide_mixers.)
#include "cuda_emulation.h"  // first: it sets up the emulated CUDA built-ins
#include "mma_emulation.h"

#define b2b_forward_tc_kernel b2b_forward_tc_kernel_emulated
#include "b2b/b2b_forward_tc_kernel.cuh"
#undef b2b_forward_tc_kernel
#define b2b_forward_wgmma_kernel b2b_forward_wgmma_kernel_emulated
#include "b2b/b2b_forward_wgmma_kernel.cuh"
#undef b2b_forward_wgmma_kernel
#define b2b_forward_tf32x3_kernel b2b_forward_tf32x3_kernel_emulated
#include "b2b/b2b_forward_tf32_kernel.cuh"
#undef b2b_forward_tf32x3_kernel
#define b2b_forward_wgmma_tf32x3_kernel b2b_forward_wgmma_tf32x3_kernel_emulated
#include "b2b/b2b_forward_wgmma_tf32_kernel.cuh"
#undef b2b_forward_wgmma_tf32x3_kernel

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "b2b_kernel_params.h"
#include "b2b_test_data.h"
#include "host_tensor.h"
#include "toeplitz_guard_choice.h"

namespace causalconv {
namespace {

using test::Activation;
using test::HostTensor;
using test::Weight;
using test::widen;
namespace emu = causalconv::emulation;

struct Case {
  int64_t batch, dim, length, kp, km;
  int64_t tiles_per_segment = 32;  // the wgmma form's walk (its launcher's largest: 32)
  // >= 0: x row 3c+1 of the first channel holds NaN at this step and row 3c+2 +inf 40 steps later;
  // row 3c of the last channel -inf at this step (each output NaN / infinite exactly where its own
  // terms make it: the guard, common/toeplitz_guard.cuh).
  int64_t nonfinite_at = -1;
};

// The mma.sync form (b2b_forward_tc_kernel) or, on rows of 16-byte vectors, the wgmma form, or the
// wgmma form on rows off the 16-byte grid (kRealigned; x's rows at stride L + 3, out's at L + 5).
// fp32: the tf32x3 form, with its projections per step (mma_sync) or by units (tf32_unit_projections),
// or the wgmma tf32x3 form (wgmma).
enum class Form { mma_sync, wgmma, wgmma_realigned, tf32_unit_projections };

template <typename T, int kMaxBlocks, bool kGuard>
void launch_emulated(const detail::B2BForwardParams& f) {
  const detail::B2BTiling tiling =
      detail::make_b2b_tiling(f.length, detail::B2BForwardTile::kOutputs, detail::kB2BForwardTilesPerBlock);
  const emu::Dim3 grid{unsigned(f.batch * f.dim), unsigned(tiling.tile_blocks), 1};
  emu::launch(grid, detail::ToeplitzTile::kThreads, size_t(detail::B2BTcLayout<kMaxBlocks>::kBytes),
              [&] { detail::b2b_forward_tc_kernel_emulated<T, kMaxBlocks, kGuard>(f, tiling); });
}

void launch_tf32_emulated(const detail::B2BForwardParams& f, bool unit_projections) {
  const detail::B2BTiling tiling =
      detail::make_b2b_tiling(f.length, detail::B2BForwardTile::kOutputs, detail::kB2BForwardTilesPerBlock);
  const emu::Dim3 grid{unsigned(f.batch * f.dim), unsigned(tiling.tile_blocks), 1};
  emu::launch(grid, detail::ToeplitzTile::kThreads, size_t(detail::B2BTf32Layout::kBytes),
              [&] {
                if (unit_projections)
                  detail::b2b_forward_tf32x3_kernel_emulated<true>(f, tiling);
                else
                  detail::b2b_forward_tf32x3_kernel_emulated<false>(f, tiling);
              });
}

template <int kMixerBlocks>
void launch_wgmma_tf32_emulated(const detail::B2BForwardParams& f, int64_t tiles_per_block) {
  using Tile = detail::WgmmaToeplitzTile;
  const int64_t tiles = (f.length + Tile::kOutputs - 1) / Tile::kOutputs;
  const emu::Dim3 grid{unsigned(f.batch * f.dim), unsigned((tiles + tiles_per_block - 1) / tiles_per_block), 1};
  emu::launch(grid, Tile::kThreads, size_t(detail::B2BWgmmaTf32Layout<kMixerBlocks>::kBytes),
              [&] { detail::b2b_forward_wgmma_tf32x3_kernel_emulated<kMixerBlocks>(f, tiles); });
}

template <typename T, int kMixerBlocks, bool kRealigned, bool kGuard>
void launch_wgmma_emulated(const detail::B2BForwardParams& f, int64_t tiles_per_segment) {
  using Tile = detail::WgmmaToeplitzTile;
  const int64_t tiles = (f.length + Tile::kOutputs - 1) / Tile::kOutputs;
  const emu::Dim3 grid{unsigned(f.batch * f.dim), unsigned((tiles + tiles_per_segment - 1) / tiles_per_segment), 1};
  emu::launch(grid, Tile::kThreads, size_t(detail::B2BWgmmaLayout<kMixerBlocks, kRealigned>::kBytes), [&] {
    detail::b2b_forward_wgmma_kernel_emulated<T, kMixerBlocks, kGuard, kRealigned>(f, tiles, tiles_per_segment);
  });
}

template <typename T>
void run_case(const Case& cs, Form form = Form::mma_sync) {
  const char* const name = form == Form::tf32_unit_projections    ? "tf32x3 unit projections"
                           : std::is_same_v<T, float> && form == Form::wgmma ? "wgmma tf32x3"
                           : std::is_same_v<T, float>     ? "tf32x3"
                           : form == Form::wgmma           ? "wgmma"
                           : form == Form::wgmma_realigned ? "wgmma realigned"
                                                           : "mma.sync";
  SCOPED_TRACE(::testing::Message() << name << " B" << cs.batch << " D" << cs.dim << " L" << cs.length << " Kp"
                                    << cs.kp << " Km" << cs.km);
  const int64_t B = cs.batch, D = cs.dim, L = cs.length, Kp = cs.kp, Km = cs.km;
  // The 16-bit wgmma form: every row 16-byte aligned. The fp32 forms take any rows.
  const int64_t pad = form == Form::wgmma && !std::is_same_v<T, float> ? 8 - L % 8 : 3;
  const int64_t out_pad = form == Form::wgmma_realigned ? 5 : pad;
  HostTensor x({B, 3 * D, L}), wp({3 * D, Kp}), wm({D, Km}), skip({D});
  std::random_device seed;
  x.fill_uniform(seed());
  wp.fill_uniform(seed());
  wm.fill_uniform(seed());
  skip.fill_uniform(seed());
  if (cs.nonfinite_at >= 0) {
    const double inf = std::numeric_limits<double>::infinity();
    x(0, 1, cs.nonfinite_at) = std::numeric_limits<double>::quiet_NaN();
    if (cs.nonfinite_at + 40 < L) x(0, 2, cs.nonfinite_at + 40) = inf;
    x(B - 1, 3 * (D - 1), cs.nonfinite_at) = -inf;
  }
  Activation<T> x_e(B, 3 * D, L, pad), out_e(B, D, L, out_pad);
  Weight<T> wp_e(3 * D, Kp), wm_e(D, Km), skip_e(D, 1);
  x_e.load(x);  // the host tensors now hold the rounded values
  wp_e.load(wp);
  wm_e.load(wm);
  skip_e.load(skip);

  const detail::B2BForwardParams f = test::b2b_forward_params(x_e, wp_e, wm_e, skip_e, out_e);
  if constexpr (std::is_same_v<T, float>) {
    if (form == Form::wgmma) {
      detail::with_toeplitz64_blocks(
          Km, [&](auto blocks) { launch_wgmma_tf32_emulated<decltype(blocks)::value>(f, cs.tiles_per_segment); });
    } else {
      launch_tf32_emulated(f, form == Form::tf32_unit_projections);
    }
  } else {  // the 16-bit forms at the guard the library builds, except for cases with NaN (toeplitz_guard_choice.h)
    test::with_guard_for(cs.nonfinite_at >= 0, [&](auto guard) {
      constexpr bool kGuard = decltype(guard)::value;
      if (form == Form::mma_sync) {
        detail::with_toeplitz_max_blocks(
            Km, [&](auto max_blocks) { launch_emulated<T, decltype(max_blocks)::value, kGuard>(f); });
        return;
      }
      detail::with_toeplitz64_blocks(Km, [&](auto blocks) {
        constexpr int kBlocks = decltype(blocks)::value;
        if (form == Form::wgmma_realigned)
          launch_wgmma_emulated<T, kBlocks, true, kGuard>(f, cs.tiles_per_segment);
        else
          launch_wgmma_emulated<T, kBlocks, false, kGuard>(f, cs.tiles_per_segment);
      });
    });
  }

  // fp64 brute force with error magnitudes: z is rounded to T for the MMA (relative ulp/2); fp32:
  // the output's rounding, and the tf32 split's ~2^-21 of each mixer term.
  constexpr bool kFloat = std::is_same_v<T, float>;
  const double ulp = kFloat ? std::ldexp(1.0, -24) : std::is_same<T, __half>::value ? std::ldexp(1.0, -10)
                                                                                     : std::ldexp(1.0, -7);
  const double per_term = kFloat ? 4e-6 : ulp + 1e-5;
  int64_t bad = 0;
  double err2 = 0, ref2 = 0, mag2 = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < D; ++c) {
      // A projection's value, and (mag) the sum of its terms' magnitudes: the scale of its fp32
      // rounding, which the gate and z carry into the output.
      auto proj = [&](int64_t row, int64_t t, double* mag = nullptr) {
        double s = 0, m = 0;
        for (int64_t k = 0; k < Kp; ++k) {
          const int64_t src = t - (Kp - 1 - k);
          if (src >= 0) {
            s += wp(row, k) * x(b, row, src);
            m += std::abs(wp(row, k) * x(b, row, src));
          }
        }
        if (mag) *mag = m;
        return s;
      };
      std::vector<double> z(static_cast<size_t>(L)), z_mag(static_cast<size_t>(L));
      for (int64_t t = 0; t < L; ++t) {
        double m1, m2;
        const double x1 = proj(3 * c + 1, t, &m1), v = proj(3 * c + 2, t, &m2);
        z[size_t(t)] = x1 * v;
        z_mag[size_t(t)] = m1 * std::abs(v) + std::abs(x1) * m2;
      }
      for (int64_t t = 0; t < L; ++t) {
        // mag: the mixer terms' magnitudes; zmag: what z's own rounding adds through them.
        double h = skip(c) * z[size_t(t)], mag = std::abs(h), zmag = std::abs(skip(c)) * z_mag[size_t(t)];
        for (int64_t k = 0; k < Km; ++k) {
          const int64_t src = t - (Km - 1 - k);
          if (src < 0) continue;
          h += wm(c, k) * z[size_t(src)];
          mag += std::abs(wm(c, k) * z[size_t(src)]);
          zmag += std::abs(wm(c, k)) * z_mag[size_t(src)];
        }
        double gate_mag;
        const double gate = proj(3 * c, t, &gate_mag), want = gate * h;
        const double got = widen(out_e.at(b, c, t));
        if (!std::isfinite(want)) {  // NaN / infinite exactly where its own terms make it
          EXPECT_TRUE(std::isnan(want) ? std::isnan(got) : got == want)
              << "out[" << b << "," << c << "," << t << "] = " << got << ", expected " << want;
          continue;
        }
        // The output's terms' magnitude: the mixer's through the gate, and for fp32 (whose roundings
        // of the projections are not hidden by a 16-bit z's) z's and the gate's own.
        const double out_mag = std::abs(gate) * (mag + (kFloat ? zmag : 0.0)) + (kFloat ? gate_mag * std::abs(h) : 0.0);
        // 16-bit: the gate's own fp32 error (~2^-24 of each of its Kp terms) where it cancels far below
        // them (Kp 32 at fp16 met it: outputs ~1e-4 off by ~3e-6).
        const double gate_error = kFloat ? 0.0 : 4e-6 * gate_mag * std::abs(h);
        const double tol = ulp * std::abs(want) + per_term * out_mag + gate_error + 1e-6;
        mag2 += out_mag * out_mag;
        if (!(std::abs(got - want) <= tol)) {
          if (bad < 5) ADD_FAILURE() << "out[" << b << "," << c << "," << t << "] = " << got << ", expected " << want;
          ++bad;
        }
        err2 += (got - want) * (got - want);
        ref2 += want * want;
      }
    }
  EXPECT_EQ(bad, 0) << "elements out of tolerance";
  if constexpr (kFloat) {  // tests/python/conftest.py: 1e-6 of (||ref|| + ||magnitude||)
    const double norm = std::sqrt(ref2) + std::sqrt(mag2);
    EXPECT_LE(std::sqrt(err2) / std::max(norm, 1e-300), 1e-6);
  } else {
    const double bound = std::is_same<T, __half>::value ? 2e-3 : 1e-2;
    EXPECT_LE(std::sqrt(err2 / std::max(ref2, 1e-300)), bound);
  }
  EXPECT_EQ(test::written_outside_rows(out_e), 0) << "elements of out written outside its rows";
}

// Row strides are L + 3 (Activation's padding): rows are 16-byte aligned where L + 3 is a
// multiple of 8. A block walks up to 4 tiles, through both x stages in turn.
const Case kBFloat16Cases[] = {
    {1, 1, 1, 2, 16},       // L = 1
    {2, 2, 2100, 3, 9},     // narrowest TC mixer, 2 tiles (partial second)
    {1, 1, 1100, 32, 256},  // widest: halos longer than the tile's tail
    {1, 1, 4093, 4, 128},   // 16-byte aligned rows (stride 4096), 2 tiles
    {1, 1, 2500, 17, 16},   // Kp 17: 2 projection blocks, Km 16: z pairs 9
    {1, 2, 16381, 3, 128},  // aligned rows, 8 tiles: 2 blocks walk 4 each
    {2, 1, 10237, 4, 16},   // aligned, 5 tiles: walks of 3 and 2
};

const Case kFloat16Cases[] = {
    {1, 2, 300, 3, 255},
    {1, 1, 700, 18, 40},    // Kp 18: 3 projection blocks
    {1, 1, 9000, 3, 64},    // 5 tiles: blocks along the row walking several tiles
    {1, 1, 12285, 3, 33},   // aligned rows, 6 tiles
};

// Every row 16-byte aligned. Tiles of 4096 steps; segments of tiles_per_segment tiles.
const Case kWgmmaBFloat16Cases[] = {
    {1, 1, 1, 2, 16},               // L = 1
    {2, 2, 100, 3, 9},              // L < one unit of chunks past the halo; Km 9: 2 mixer blocks
    {1, 1, 9000, 3, 128, 8},        // 3 tiles, the halo carried twice; partial last tile and unit
    {1, 1, 9000, 32, 256, 2},       // Kp 32 (6 slices); 5 mixer blocks; a segment starting at tile 2
    {1, 2, 12300, 17, 150, 1},      // Kp 17 (5 slices); 4 mixer blocks; every tile a segment's first
    {2, 1, 5000, 18, 66, 8},        // Kp 18; 3 mixer blocks, the last nonzero in one k-slice only
};

const Case kWgmmaFloat16Cases[] = {
    {1, 2, 300, 3, 255},
    {1, 1, 8193, 4, 65, 1},         // 2 mixer blocks at their widest; 3 tiles, the last holding one step
    {1, 1, 4096, 5, 129},           // one whole tile; 3 mixer blocks at their widest
};

// fp32 on tf32 MMAs: row strides L + 3 (some rows 16-byte aligned: cp.async, the others element
// by element), every mixer block count, Kp up to 32 (the staged reach), partial tiles, blocks
// walking several tiles through the one stage, L < Km.
TEST(B2BTensorCoreEmulated, Float32Tf32x3) {
  const Case cases[] = {
      {1, 1, 1, 2, 16},        // L = 1
      {2, 2, 2100, 3, 9},      // narrowest mixer (2 blocks), 2 tiles, partial second
      {1, 1, 1100, 32, 256},   // widest: 17 blocks; Kp 32; L < tile
      {1, 1, 4093, 4, 128},    // aligned rows, 2 tiles
      {1, 2, 9000, 3, 64},     // 5 tiles: blocks walking 4 and 1
      {1, 1, 300, 5, 255},     // L < ... Km
      {1, 2, 3000, 3, 128, 32, 2030},  // NaN / inf kept causal (the guard's slow path)
  };
  for (const Case& c : cases) {
    run_case<float>(c);
    if (c.kp <= detail::kB2BUnitProjectionTaps) run_case<float>(c, Form::tf32_unit_projections);
  }
}

// fp32 on warpgroup MMA (4096-step tiles; the last field but one is the tiles a block walks; Kp <= 4,
// the unit projections): every mixer block count, L = 1, L < Km, partial tiles, blocks walking
// several tiles through the one stage, row strides L + 3 (cp.async and element staging), NaN / inf
// kept causal (the slow path).
TEST(B2BTensorCoreEmulated, WgmmaFloat32Tf32x3) {
  const Case cases[] = {
      {1, 1, 1, 2, 16},                // L = 1
      {2, 2, 2100, 3, 9, 8},           // narrowest mixer (2 blocks), one partial tile
      {1, 1, 1100, 4, 256},            // widest: 5 blocks; L < tile
      {1, 1, 9000, 4, 128, 8},         // 3 tiles walked by one block; partial last
      {1, 2, 9000, 3, 193, 1},         // 4 blocks; one tile per block
      {1, 1, 300, 2, 255},             // L < Km
      {1, 2, 5000, 3, 65, 8, 4090},    // NaN / inf across a tile boundary
  };
  for (const Case& c : cases) run_case<float>(c, Form::wgmma);
}

// NaN and infinities stay causal on the 16-bit forms (with their guard): near a 2048-step tile's
// end (mma.sync), and across a 4096-step tile boundary whose z halo is carried (wgmma).
TEST(B2BTensorCoreEmulated, NonFiniteInputsStayCausal) {
  run_case<__nv_bfloat16>({1, 2, 3000, 3, 20, 32, 2030});
  run_case<__half>({1, 2, 9000, 3, 128, 8, 4090}, Form::wgmma);
}

TEST(B2BTensorCoreEmulated, WgmmaBFloat16) {
  for (const Case& c : kWgmmaBFloat16Cases) run_case<__nv_bfloat16>(c, Form::wgmma);
}

TEST(B2BTensorCoreEmulated, WgmmaFloat16) {
  for (const Case& c : kWgmmaFloat16Cases) run_case<__half>(c, Form::wgmma);
}

// The wgmma form on rows off the 16-byte grid: x's rows at stride L + 3 and out's at L + 5, so the
// three x rows of a channel and its output row lie at different leads (0 among them): L = 1, L
// under one unit, L < Km, tile boundaries inside a unit, segments starting mid-row (the z halo on
// the CUDA cores), every mixer block count, and the guard's tile stored through the realigned path.
TEST(B2BTensorCoreEmulated, WgmmaRealignedRows) {
  const Case bf16_cases[] = {
      {1, 3, 1, 2, 16},          // L = 1
      {1, 3, 7, 3, 9},           // L < one unit: the first unit masked at both ends
      {2, 2, 100, 3, 9},         // 2 mixer blocks
      {1, 3, 9000, 3, 128, 8},   // 3 tiles, the halo carried twice
      {2, 1, 5000, 18, 66, 1},   // Kp 18; every tile a segment's first
  };
  for (const Case& c : bf16_cases) run_case<__nv_bfloat16>(c, Form::wgmma_realigned);
  const Case f16_cases[] = {
      {1, 2, 9000, 32, 256, 2},       // Kp 32; 5 mixer blocks; a segment starting at tile 2
      {1, 2, 8193, 4, 150, 1},        // 4 mixer blocks; the last tile one step
      {1, 2, 9000, 3, 128, 8, 4090},  // NaN / inf across a tile boundary (the guard's tile)
  };
  for (const Case& c : f16_cases) run_case<__half>(c, Form::wgmma_realigned);
}

TEST(B2BTensorCoreEmulated, BFloat16) {
  for (const Case& c : kBFloat16Cases) run_case<__nv_bfloat16>(c);
}

TEST(B2BTensorCoreEmulated, Float16) {
  for (const Case& c : kFloat16Cases) run_case<__half>(c);
}

}  // namespace
}  // namespace causalconv
