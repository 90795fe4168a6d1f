// The dense Hopper kernels (src/causal_conv1d/dense_wgmma_kernels.cuh: TMA + mbarriers + wgmma,
// warp-specialised) run on the CPU under tests/cpp/cuda_emulation.h and the host emulation in
// common/sm90_primitives.cuh, against the fp64 reference: the convolution (forward with bias and
// silu, and the transposed dx job) and the weight gradients (dweight, dbias), in bf16, fp16 and
// fp32 (bf16 hi/lo split). The prepared weights and the channel-last / row-staged operands are
// built here exactly as dense_wgmma.cu's pre-passes lay them out, and the tensor maps as its
// launchers encode them. (On the GPU: tests/python, the dense tests on an H200.)
#include "cuda_emulation.h"  // first: it sets up the emulated CUDA built-ins

#define dense_wgmma_conv dense_wgmma_conv_emulated
#define dense_wgmma_conv_rows dense_wgmma_conv_rows_emulated
#define dense_wgmma_weight_grad dense_wgmma_weight_grad_emulated
#include "causal_conv1d/dense_wgmma_kernels.cuh"
#undef dense_wgmma_conv
#undef dense_wgmma_conv_rows
#undef dense_wgmma_weight_grad

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <type_traits>
#include <vector>

#include "causalconv/reference.h"
#include "host_tensor.h"
#include "padded_tensors.h"

namespace causalconv {
namespace {

using test::HostTensor;
using test::widen;
namespace emu = causalconv::emulation;
namespace sm90 = causalconv::detail::sm90;

template <typename T>
constexpr int kCopies = std::is_same_v<T, float> ? 2 : 1;

template <typename T>
const char* name_of() {
  return std::is_same_v<T, float> ? "fp32" : std::is_same_v<T, __half> ? "fp16" : "bf16";
}

template <typename T>
double ulp() {
  return std::is_same_v<T, float> ? std::ldexp(1.0, -23) : std::is_same_v<T, __half> ? std::ldexp(1.0, -10)
                                                                                      : std::ldexp(1.0, -7);
}

// Error allowed per unit of the terms' magnitude: fp32 sums of exact products (16-bit), or the
// bf16 hi/lo split's dropped lo*lo term and lo rounding (fp32).
template <typename T>
double term_tolerance() {
  return std::is_same_v<T, float> ? 1e-4 : 3e-5;
}

// The 16-bit operand bits of a value stored as T (fp32: bf16 hi and lo), as operand_bits.
template <typename T>
void operand_bits(T v, uint16_t& hi, uint16_t& lo) {
  lo = 0;
  if constexpr (std::is_same_v<T, float>) {
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    hi = __bfloat16_as_ushort(h);
    lo = __bfloat16_as_ushort(__float2bfloat16_rn(v - __bfloat162float(h)));
  } else {
    std::memcpy(&hi, &v, 2);
  }
}

// Rounds a host tensor to T in place; returns the T values in logical order.
template <typename T>
std::vector<T> rounded(HostTensor& h) {
  std::vector<T> out(size_t(h.numel()));
  for (int64_t i = 0; i < h.numel(); ++i) {
    out[size_t(i)] = test::round_to(T{}, h.flat(i));
    h.flat(i) = widen(out[size_t(i)]);
  }
  return out;
}

HostTensor abs_tensor(const HostTensor& h) {
  HostTensor a(h.sizes());
  for (int64_t i = 0; i < h.numel(); ++i) a.flat(i) = std::abs(h.flat(i));
  return a;
}

sm90::EmulatedTensorMap tensor_map(const void* base, int rank, std::vector<uint64_t> dims,
                                   std::vector<uint64_t> strides, std::vector<uint32_t> box) {
  sm90::EmulatedTensorMap m{};
  m.base = base;
  m.rank = rank;
  for (int d = 0; d < rank; ++d) {
    m.dims[d] = dims[size_t(d)];
    m.box[d] = box[size_t(d)];
    if (d > 0) m.strides[d - 1] = strides[size_t(d - 1)];
  }
  m.swizzle_128b = true;
  return m;
}

// x (B, G*S, L) as T -> out[copy][b][t][g][s < s8] (zero for s >= S): copy_to_channel_last.
template <typename T>
std::vector<uint16_t> channel_last(const std::vector<T>& x, int64_t B, int64_t G, int64_t S, int64_t L,
                                   int64_t s8) {
  const int64_t copy_elems = B * L * G * s8;
  std::vector<uint16_t> out(size_t(copy_elems * kCopies<T>), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t t = 0; t < L; ++t) {
          uint16_t hi, lo;
          operand_bits<T>(x[size_t((b * G * S + g * S + s) * L + t)], hi, lo);
          const int64_t at = ((b * L + t) * G + g) * s8 + s;
          out[size_t(at)] = hi;
          if (kCopies<T> == 2) out[size_t(copy_elems + at)] = lo;
        }
  return out;
}

// Rows of L values (rows x L, contiguous) in rows of `pitch` (a whole 16 bytes past L), as TS;
// the padding is NaN, which the kernels must never read.
constexpr int64_t padded_pitch(int64_t L) { return (L + 7) / 8 * 8 + 8; }

template <typename TS, typename T>
std::vector<TS> padded_rows(const std::vector<T>& values, int64_t rows, int64_t L) {
  const int64_t pitch = padded_pitch(L);
  std::vector<TS> out(size_t(rows * pitch), test::round_to(TS{}, std::nan("")));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < L; ++t) out[size_t(r * pitch + t)] = test::round_to(TS{}, widen(values[size_t(r * L + t)]));
  return out;
}

// ---- the convolution: forward, or dx as the transposed convolution ----

template <typename T>
uint16_t nan_bits() {
  return std::is_same_v<T, __half> ? uint16_t(0x7E00) : uint16_t(0x7FC0);
}

struct ConvCase {
  bool transposed;
  int64_t batch, groups, cin_g, cout_g, width, dilation, length;
  bool bias, silu;
  unsigned ctas;  // the persistent grid (at most the tile count)
};

// rows: the source read from its own (B, C, L) rows by dense_wgmma_conv_rows, rows padded to a
// 16-byte pitch with NaN that must never be read; else channel-last as the pre-pass stages it.
// fp32_rows (16-bit T): the rows given in fp32 (as the silu gradient reaches dx), which the
// kernel rounds to T (values already T's, so the reference is unchanged).
// keep (forward from rows): the kernel also stores x's channel-last copy for the weight gradient,
// which must equal the pre-pass's, every padding channel included.
// aligned_y: y's rows 16-byte aligned (pitch past L rounded up to 8), which 16-bit outputs store
// 8 steps a lane at a time (store_conv_tile); else an odd pitch.
template <typename T>
void run_conv(const ConvCase& cs, bool rows = false, bool fp32_rows = false, bool keep = false,
              bool aligned_y = false) {
  using Tr = detail::WgTraits<T>;
  SCOPED_TRACE(::testing::Message() << name_of<T>() << (rows ? (fp32_rows ? " fp32 rows" : " rows") : " staged")
                                    << (keep ? " keeping x" : "") << (aligned_y ? " aligned y" : "")
                                    << (cs.transposed ? " dx" : " forward") << " B" << cs.batch
                                    << " G" << cs.groups << " Cin/g " << cs.cin_g << " Cout/g " << cs.cout_g << " K"
                                    << cs.width << " d" << cs.dilation << " L" << cs.length << " bias " << cs.bias
                                    << " silu " << cs.silu << " ctas " << cs.ctas);
  const int64_t B = cs.batch, G = cs.groups, K = cs.width, L = cs.length, dil = cs.dilation;
  const int64_t cin = G * cs.cin_g, cout = G * cs.cout_g;
  const int64_t src_g = cs.transposed ? cs.cout_g : cs.cin_g, dst_g = cs.transposed ? cs.cin_g : cs.cout_g;
  std::random_device seed;
  HostTensor x({B, cin, L}), w({cout, cs.cin_g, K}), bias({cout}), dy({B, cout, L});
  x.fill_uniform(seed());
  w.fill_uniform(seed());
  bias.fill_uniform(seed());
  dy.fill_uniform(seed());
  HostTensor& src = cs.transposed ? dy : x;
  const std::vector<T> src_e = rounded<T>(src), w_e = rounded<T>(w), bias_e = rounded<T>(bias);

  // prepare_wgmma_weights: W'[copy][g][k][r < r_pad][c < c_pad].
  const int64_t r_pad = (dst_g + detail::kBM - 1) / detail::kBM * detail::kBM;
  const int64_t c_chunks = (src_g + detail::kBK - 1) / detail::kBK, c_pad = c_chunks * detail::kBK;
  const int64_t weight_elems = G * K * r_pad * c_pad;
  std::vector<uint16_t> weights(size_t(weight_elems * kCopies<T>), 0);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t r = 0; r < dst_g; ++r)
        for (int64_t c = 0; c < src_g; ++c) {
          const int64_t at = cs.transposed ? ((g * src_g + c) * cs.cin_g + r) * K + (K - 1 - k)
                                           : ((g * dst_g + r) * cs.cin_g + c) * K + k;
          uint16_t hi, lo;
          operand_bits<T>(w_e[size_t(at)], hi, lo);
          const int64_t i = ((g * K + k) * r_pad + r) * c_pad + c;
          weights[size_t(i)] = hi;
          if (kCopies<T> == 2) weights[size_t(weight_elems + i)] = lo;
        }
  const int64_t s8 = (src_g + 7) / 8 * 8;
  const std::vector<uint16_t> staged = channel_last<T>(src_e, B, G, src_g, L, s8);
  const int64_t src_pitch = padded_pitch(L), src_channels = G * src_g;
  const std::vector<T> src_rows = padded_rows<T>(src_e, B * src_channels, L);
  const std::vector<float> src_rows_fp32 = padded_rows<float>(src_e, B * src_channels, L);
  const CUtensorMap src_map =
      rows && !std::is_same_v<T, float> ? sm90::emulated_tensor_map(tensor_map(
                 src_rows.data(), 4, {uint64_t(L), uint64_t(src_g), uint64_t(G), uint64_t(B)},
                 {uint64_t(src_pitch) * 2, uint64_t(src_g * src_pitch) * 2, uint64_t(src_channels * src_pitch) * 2},
                 {64, uint32_t(detail::kBK), 1, 1}))
           : sm90::emulated_tensor_map(
                 tensor_map(staged.data(), 4, {uint64_t(s8), uint64_t(G), uint64_t(L), uint64_t(B * kCopies<T>)},
                            {uint64_t(s8) * 2, uint64_t(G * s8) * 2, uint64_t(L * G * s8) * 2},
                            {uint32_t(detail::kBK), 1, uint32_t(detail::kBN), 1}));
  const CUtensorMap w_map = sm90::emulated_tensor_map(
      tensor_map(weights.data(), 2, {uint64_t(c_pad), uint64_t(weight_elems / c_pad * kCopies<T>)},
                 {uint64_t(c_pad) * 2}, {uint32_t(detail::kBK), uint32_t(detail::kBM)}));

  // The destination (B, G*dst_g, L) with a row pitch of L + 3 (odd: rows alternate between the
  // paired and the single stores) or aligned_y's, filled with a sentinel that must survive
  // outside the elements.
  const int64_t channels = G * dst_g, pitch = aligned_y ? (L + 7) / 8 * 8 + 8 : L + 3;
  const T sentinel = test::round_to(T{}, 1234.0);
  std::vector<T> dst(size_t(B * channels * pitch + 1), sentinel);

  detail::WgParams p{};
  p.y = dst.data();
  p.bias = cs.bias && !cs.transposed ? bias_e.data() : nullptr;
  p.y_stride[0] = channels * pitch;
  p.y_stride[1] = pitch;
  p.y_stride[2] = 1;
  p.bias_stride = 1;
  p.batch = int32_t(B);
  p.groups = int32_t(G);
  p.out_g = int32_t(dst_g);
  p.length = int32_t(L);
  p.width = int32_t(K);
  p.dilation = int32_t(dil);
  p.c_chunks = int32_t(c_chunks);
  p.o_tiles = int32_t(r_pad / detail::kBM);
  p.t_tiles = int32_t((L + detail::kBN - 1) / detail::kBN);
  p.o_pad = int32_t(r_pad);
  p.w_lo_rows = int32_t(weight_elems / c_pad);
  p.shift_base = cs.transposed ? 0 : -int32_t((K - 1) * dil);
  p.silu = cs.silu && !cs.transposed;
  p.tiles = int64_t(p.o_tiles) * p.t_tiles * B * G;
  const unsigned grid = unsigned(std::min<int64_t>(p.tiles, cs.ctas));
  std::vector<uint16_t> kept(keep ? staged.size() : 0, uint16_t(0x5A5A));  // a pattern every element must lose
  CUtensorMap keep_map = w_map;
  if (keep) {
    keep_map = sm90::emulated_tensor_map(
        tensor_map(kept.data(), 4, {uint64_t(s8), uint64_t(G), uint64_t(L), uint64_t(B * kCopies<T>)},
                   {uint64_t(s8) * 2, uint64_t(G * s8) * 2, uint64_t(L * G * s8) * 2},
                   {uint32_t(detail::kBK), 1, uint32_t(detail::kBN), 1}));
    p.keep_x = 1;
  }
  if (rows) {
    p.src = fp32_rows ? static_cast<const void*>(src_rows_fp32.data()) : static_cast<const void*>(src_rows.data());
    p.src_stride[0] = src_channels * src_pitch;
    p.src_stride[1] = src_pitch;
    p.src_stride[2] = 1;
    p.in_g = int32_t(src_g);
    const size_t smem = fp32_rows ? detail::RowTraits<T, float>::kSmemBytes : detail::RowTraits<T, T>::kSmemBytes;
    emu::launch({grid, 1, 1}, detail::kThreads, smem, [&] {
      if (fp32_rows)
        detail::dense_wgmma_conv_rows_emulated<T, float>(w_map, src_map, keep_map, p);
      else
        detail::dense_wgmma_conv_rows_emulated<T, T>(w_map, src_map, keep_map, p);
    });
  } else {
    emu::launch({grid, 1, 1}, detail::kThreads, Tr::kSmemBytes,
                [&] { detail::dense_wgmma_conv_emulated<T>(w_map, src_map, p); });
  }

  // The reference, and its magnitude: the same operator on |inputs| (no activation).
  HostTensor ref({B, channels, L}), mag({B, channels, L});
  if (!cs.transposed) {
    CausalConv1dForwardArgs args{x.view(), w.view(), std::nullopt, ref.view(), dil, G,
                                 p.silu ? Activation::silu : Activation::none};
    if (p.bias) args.bias = bias.view();
    reference::causal_conv1d_forward(args);
    const HostTensor ax = abs_tensor(x), aw = abs_tensor(w), ab = abs_tensor(bias);
    CausalConv1dForwardArgs margs{ax.view(), aw.view(), std::nullopt, mag.view(), dil, G, Activation::none};
    if (p.bias) margs.bias = ab.view();
    reference::causal_conv1d_forward(margs);
  } else {
    CausalConv1dBackwardArgs args{x.view(), w.view(), std::nullopt, dy.view(), ref.view(), std::nullopt,
                                  std::nullopt, dil, G, Activation::none};
    reference::causal_conv1d_backward(args);
    const HostTensor ax = abs_tensor(x), aw = abs_tensor(w), ady = abs_tensor(dy);
    CausalConv1dBackwardArgs margs{ax.view(), aw.view(), std::nullopt, ady.view(), mag.view(), std::nullopt,
                                   std::nullopt, dil, G, Activation::none};
    reference::causal_conv1d_backward(margs);
  }

  int64_t bad = 0;
  double worst = 0.0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t t = 0; t < L; ++t) {
        const double got = widen(dst[size_t((b * channels + c) * pitch + t)]), r = ref(b, c, t);
        const double err = std::abs(got - r), allowed = ulp<T>() * std::abs(r) + term_tolerance<T>() * mag(b, c, t) + 1e-7;
        worst = std::max(worst, err / (mag(b, c, t) + 1e-30));
        if (!(err <= allowed)) {
          if (bad < 5) ADD_FAILURE() << "[" << b << "," << c << "," << t << "] = " << got << ", expected " << r;
          ++bad;
        }
      }
  EXPECT_EQ(bad, 0);
  int64_t touched = 0;
  for (int64_t i = 0; i < int64_t(dst.size()); ++i) {
    const int64_t row = i / pitch, t = i % pitch;
    if ((row >= B * channels || t >= L) && widen(dst[size_t(i)]) != widen(sentinel)) ++touched;
  }
  EXPECT_EQ(touched, 0) << "wrote outside the destination's elements";
  if (keep) {
    int64_t differ = 0;
    for (size_t i = 0; i < kept.size(); ++i) differ += kept[i] != staged[i];
    EXPECT_EQ(differ, 0) << "elements of the kept x unlike the pre-pass's copy, of " << kept.size();
  }
  std::printf("[ dense_wgmma ] %s %s %s: max |error| / magnitude %.3g\n", name_of<T>(), rows ? "rows" : "staged",
              cs.transposed ? "dx" : "forward", worst);
}

// ---- the weight gradients ----

struct DwCase {
  int64_t batch, groups, cin_g, cout_g, width, dilation, length;
  bool grad_in_place;  // dy read by TMA where it lies (else staged rows, as stage_rows)
  bool dbias = true;   // false: no dbias (no CTA sums its rows)
};

// source_wide: CTAs over 4 x 64 sources of one tap (m64n256k16), as the launcher runs groups of
// more than 192 sources; else 64 sources of up to 4 taps.
template <typename T>
void run_weight_grad(const DwCase& cs, bool source_wide = false) {
  using Tr = detail::DwTraits<T>;
  SCOPED_TRACE(::testing::Message() << name_of<T>() << (source_wide ? " source-wide" : "") << " dweight B"
                                    << cs.batch << " G" << cs.groups << " Cin/g "
                                    << cs.cin_g << " Cout/g " << cs.cout_g << " K" << cs.width << " d"
                                    << cs.dilation << " L" << cs.length << " in place " << cs.grad_in_place
                                    << " dbias " << cs.dbias);
  const int64_t B = cs.batch, G = cs.groups, K = cs.width, L = cs.length, dil = cs.dilation;
  const int64_t S = cs.cin_g, D = cs.cout_g, cin = G * S, cout = G * D;
  const bool in_place = cs.grad_in_place;
  std::random_device seed;
  HostTensor x({B, cin, L}), w({cout, S, K}), dy({B, cout, L});
  x.fill_uniform(seed());
  w.fill_uniform(seed());
  dy.fill_uniform(seed());
  const std::vector<T> x_e = rounded<T>(x), dy_e = rounded<T>(dy);

  // x, channel-last as the forward stages it.
  const int64_t s8 = (S + 7) / 8 * 8;
  const std::vector<uint16_t> x_staged = channel_last<T>(x_e, B, G, S, L, s8);
  const CUtensorMap x_map = sm90::emulated_tensor_map(
      tensor_map(x_staged.data(), 4, {uint64_t(s8), uint64_t(G), uint64_t(L), uint64_t(B * kCopies<T>)},
                 {uint64_t(s8) * 2, uint64_t(G * s8) * 2, uint64_t(L * G * s8) * 2},
                 {uint32_t(detail::kBK), 1, uint32_t(detail::kDwSteps), 1}));

  // The gradient rows in T, time innermost, for TMA: in place (a row pitch past L, padding NaN),
  // or staged as stage_rows writes them (pitch rounded up to 8; the padding is never read: NaN
  // here). 16-bit: boxes of 64 steps; fp32: of 32 (two per unit).
  const int64_t pitch = in_place ? (L + 7) / 8 * 8 + 8 : (L + 7) / 8 * 8;
  constexpr uint32_t kElementBytes = sizeof(T);
  std::vector<uint16_t> rows;
  std::vector<float> rows_f32;
  const void* rows_base;
  if constexpr (std::is_same_v<T, float>) {
    rows_f32.assign(size_t(B * cout * pitch), std::numeric_limits<float>::quiet_NaN());
    for (int64_t r = 0; r < B * cout; ++r)
      for (int64_t t = 0; t < L; ++t) rows_f32[size_t(r * pitch + t)] = dy_e[size_t(r * L + t)];
    rows_base = rows_f32.data();
  } else {
    rows.assign(size_t(B * cout * pitch), nan_bits<T>());
    for (int64_t r = 0; r < B * cout; ++r)
      for (int64_t t = 0; t < L; ++t) {
        uint16_t hi, lo;
        operand_bits<T>(dy_e[size_t(r * L + t)], hi, lo);
        rows[size_t(r * pitch + t)] = hi;
      }
    rows_base = rows.data();
  }
  sm90::EmulatedTensorMap g_rows =
      tensor_map(rows_base, 4, {uint64_t(L), uint64_t(D), uint64_t(G), uint64_t(B)},
                 {uint64_t(pitch) * kElementBytes, uint64_t(D * pitch) * kElementBytes,
                  uint64_t(cout * pitch) * kElementBytes},
                 {128 / kElementBytes, uint32_t(detail::kBM), 1, 1});
  g_rows.element_bytes = kElementBytes;
  const CUtensorMap g_map = sm90::emulated_tensor_map(g_rows);

  // wg_dw_layout's partition.
  const int64_t o_tiles = (D + detail::kBM - 1) / detail::kBM, c_chunks = detail::dw_source_groups(S, source_wide);
  const int64_t k_chunks = detail::dw_tap_groups(K, source_wide);
  const int64_t t_units = (L + detail::kDwSteps - 1) / detail::kDwSteps, units = B * t_units;
  const int64_t part_elems = cout * S * K + cout;
  const int64_t ctas = G * o_tiles * c_chunks * k_chunks;
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>((detail::kDwTargetCtas + ctas - 1) / ctas, units));
  std::vector<float> partials(size_t(parts * part_elems), std::numeric_limits<float>::quiet_NaN());

  detail::DwParams p{};
  p.partials = partials.data();
  p.part_elems = part_elems;
  p.units = units;
  p.batch = int32_t(B);
  p.groups = int32_t(G);
  p.out_g = int32_t(D);
  p.in_g = int32_t(S);
  p.width = int32_t(K);
  p.dilation = int32_t(dil);
  p.o_tiles = int32_t(o_tiles);
  p.c_chunks = int32_t(c_chunks);
  p.t_units = int32_t(t_units);
  p.parts = int32_t(parts);
  p.sum_bias = cs.dbias;
  detail::DwLaunch launches[2];  // as launch_wgmma_weight_grad
  for (int i = 0, n = detail::dw_launches(int(K), source_wide, launches); i < n; ++i) {
    p.q_base = launches[i].q_base;
    p.q_count = launches[i].q_count;
    const unsigned grid = unsigned(G * o_tiles * c_chunks * p.q_count);
    auto launch = [&](auto kernel, size_t smem) {
      emu::launch({grid, unsigned(parts), 1}, detail::kThreads, smem, [&] { kernel(g_map, x_map, p); });
    };
    constexpr size_t smem = detail::kDwSmemBytes<T>;
    if (source_wide) {
      launch(detail::dense_wgmma_weight_grad_emulated<T, 1, detail::kDwWideChunks>, smem);
      continue;
    }
    switch (launches[i].taps) {
      case 1: launch(detail::dense_wgmma_weight_grad_emulated<T, 1, 1>, smem); break;
      case 2: launch(detail::dense_wgmma_weight_grad_emulated<T, 2, 1>, smem); break;
      case 3: launch(detail::dense_wgmma_weight_grad_emulated<T, 3, 1>, smem); break;
      default: launch(detail::dense_wgmma_weight_grad_emulated<T, 4, 1>, smem); break;
    }
  }

  HostTensor dw_ref({cout, S, K}), db_ref({cout}), dw_mag({cout, S, K}), db_mag({cout});
  CausalConv1dBackwardArgs args{x.view(), w.view(), std::nullopt, dy.view(), std::nullopt, dw_ref.view(),
                                db_ref.view(), dil, G, Activation::none};
  reference::causal_conv1d_backward(args);
  const HostTensor ax = abs_tensor(x), ady = abs_tensor(dy);
  CausalConv1dBackwardArgs margs{ax.view(), w.view(), std::nullopt, ady.view(), std::nullopt, dw_mag.view(),
                                 db_mag.view(), dil, G, Activation::none};
  reference::causal_conv1d_backward(margs);

  int64_t bad = 0;
  double worst = 0.0;
  auto check = [&](const char* what, int64_t i, int64_t index, double r, double m) {
    double got = 0.0;  // the partials' ordered sum
    for (int64_t part = 0; part < parts; ++part) got += double(partials[size_t(part * part_elems + i)]);
    const double err = std::abs(got - r);
    worst = std::max(worst, err / (m + 1e-30));
    if (!(err <= term_tolerance<T>() * m + 1e-7)) {
      if (bad < 5) ADD_FAILURE() << what << "[" << index << "] = " << got << ", expected " << r;
      ++bad;
    }
  };
  for (int64_t i = 0; i < cout * S * K; ++i) {  // reference (o, s, k); the partials are tap-major (k, o, s)
    const int64_t o = i / (S * K), s = i / K % S, k = i % K;
    check("dweight", (k * cout + o) * S + s, i, dw_ref.flat(i), dw_mag.flat(i));
  }
  if (cs.dbias)
    for (int64_t o = 0; o < cout; ++o) check("dbias", cout * S * K + o, o, db_ref(o), db_mag(o));
  EXPECT_EQ(bad, 0);
  std::printf("[ dense_wgmma ] %s%s dweight/dbias (%lld parts): max |error| / magnitude %.3g\n", name_of<T>(),
              source_wide ? " source-wide" : "", static_cast<long long>(parts), worst);
}

// Channels per group not multiples of 64/128 (and above them: two source chunks, two output
// tiles), K in {1, 3, 4, 7} (dweight also 9), dilations 1 to 3, L not a multiple of 256 (dweight: of 64).
const ConvCase kForward[] = {
    {false, 2, 2, 48, 40, 3, 1, 300, true, true, 3},
    {false, 1, 1, 72, 136, 4, 3, 257, true, false, 2},
    {false, 1, 2, 40, 48, 1, 1, 130, false, false, 1},
    {false, 1, 1, 48, 40, 7, 3, 200, true, true, 4},
};
const ConvCase kDx[] = {
    {true, 2, 2, 40, 48, 4, 3, 300, false, false, 2},
    {true, 1, 1, 136, 72, 3, 1, 100, false, false, 1},
    {true, 1, 2, 48, 40, 7, 1, 70, false, false, 3},
};
// The rows kernel's window: its widest reach (off0 + (K-1)d = 6 + 58 = 64 steps), several tiles
// per CTA through both windows of the ring, two source chunks.
const ConvCase kRowsForward[] = {
    {false, 1, 1, 72, 40, 3, 29, 600, true, false, 2},
    {false, 2, 1, 136, 48, 4, 1, 520, false, true, 1},
};
const DwCase kWeightGrad[] = {
    {2, 2, 48, 40, 3, 1, 100, true},
    {1, 1, 72, 136, 7, 3, 150, false},
    {1, 2, 40, 48, 1, 1, 70, true},
    {1, 1, 48, 40, 4, 3, 130, false},
    {1, 1, 40, 48, 9, 2, 90, true},  // two full 4-tap chunks in one launch, then one tap
    {2, 1, 48, 136, 4, 1, 200, false, false},  // no dbias: two output tiles, 8 parts
    {1, 1, 136, 136, 2, 1, 100, true},         // 3 source chunks: dbias rows split 44 / 44 / 40
    {2, 1, 37, 41, 3, 1, 150, false},          // odd sources and outputs: unaligned partial rows
};

TEST(DenseWgmmaEmulated, ForwardBf16) {
  for (const auto& cs : kForward) run_conv<__nv_bfloat16>(cs);
}
TEST(DenseWgmmaEmulated, ForwardFp16) {
  for (const auto& cs : kForward) run_conv<__half>(cs);
}
TEST(DenseWgmmaEmulated, ForwardFp32) {
  run_conv<float>(kForward[0]);
  run_conv<float>(kForward[1]);
}
TEST(DenseWgmmaEmulated, ForwardFromRowsBf16) {
  for (const auto& cs : kForward) run_conv<__nv_bfloat16>(cs, true);
  for (const auto& cs : kRowsForward) run_conv<__nv_bfloat16>(cs, true);
}
TEST(DenseWgmmaEmulated, ForwardFromRowsFp16) {
  run_conv<__half>(kForward[1], true);
  run_conv<__half>(kRowsForward[0], true);
}
// The forward that keeps x for the weight gradient: two output tiles (only o-tile 0 stores),
// several tiles per CTA, two source chunks, and a group of 37 sources (rows padded to 40).
TEST(DenseWgmmaEmulated, ForwardFromRowsKeepingX) {
  const ConvCase odd_groups{false, 2, 2, 37, 40, 4, 1, 600, true, false, 2};
  run_conv<__nv_bfloat16>(odd_groups, true, false, true);
  run_conv<__nv_bfloat16>(kForward[1], true, false, true);
  run_conv<__nv_bfloat16>(kRowsForward[1], true, false, true);
  run_conv<__half>(kRowsForward[0], true, false, true);
  run_conv<float>(odd_groups, true, false, true);
  run_conv<float>(kForward[1], true, false, true);
}
TEST(DenseWgmmaEmulated, ForwardFromRowsFp32) {
  run_conv<float>(kForward[0], true);
  run_conv<float>(kForward[3], true);
  for (const auto& cs : kRowsForward) run_conv<float>(cs, true);
}
TEST(DenseWgmmaEmulated, DxFromRowsBf16) {
  for (const auto& cs : kDx) run_conv<__nv_bfloat16>(cs, true);
}
TEST(DenseWgmmaEmulated, DxFromRowsFp32) { run_conv<float>(kDx[0], true); }
// 16-bit y with 16-byte aligned rows: whole 8-step groups (L = 520) and a last partial one.
TEST(DenseWgmmaEmulated, AlignedOutputRows) {
  run_conv<__nv_bfloat16>(kRowsForward[1], true, false, false, true);
  run_conv<__nv_bfloat16>(kForward[0], true, false, false, true);
  run_conv<__half>(kForward[3], false, false, false, true);
  run_conv<__nv_bfloat16>(kDx[1], true, false, false, true);
}
TEST(DenseWgmmaEmulated, DxFromFp32Rows16Bit) {  // the silu gradient's path for 16-bit dtypes
  run_conv<__nv_bfloat16>(kDx[0], true, true);
  run_conv<__half>(kDx[2], true, true);
}
TEST(DenseWgmmaEmulated, DxBf16) {
  for (const auto& cs : kDx) run_conv<__nv_bfloat16>(cs);
}
TEST(DenseWgmmaEmulated, DxFp16) { run_conv<__half>(kDx[1]); }
TEST(DenseWgmmaEmulated, DxFp32) { run_conv<float>(kDx[0]); }
TEST(DenseWgmmaEmulated, WeightGradBf16) {
  for (const auto& cs : kWeightGrad) run_weight_grad<__nv_bfloat16>(cs);
  run_weight_grad<__nv_bfloat16>({1, 1, 40, 48, 4, 64, 300, false});  // taps 64 steps apart
}
// Source-wide CTAs (one tap, 4 x 64 sources, N = 256): 256 sources exactly, a last group cut
// inside a box (its other boxes wholly past the channels, zero-filled), two groups.
const DwCase kWeightGradSourceWide[] = {
    {1, 1, 256, 136, 4, 1, 130, true},
    {2, 2, 200, 48, 3, 2, 100, false},
    {1, 1, 300, 40, 2, 1, 90, true},
};
TEST(DenseWgmmaEmulated, WeightGradSourceWideBf16) {
  for (const auto& cs : kWeightGradSourceWide) run_weight_grad<__nv_bfloat16>(cs, true);
}
TEST(DenseWgmmaEmulated, WeightGradSourceWideFp16AndFp32) {
  run_weight_grad<__half>(kWeightGradSourceWide[0], true);
  run_weight_grad<float>(kWeightGradSourceWide[1], true);
  run_weight_grad<float>({1, 1, 256, 48, 5, 1, 80, false, false}, true);
}
TEST(DenseWgmmaEmulated, WeightGradFp16) {
  run_weight_grad<__half>(kWeightGrad[0]);
  run_weight_grad<__half>(kWeightGrad[1]);
}
TEST(DenseWgmmaEmulated, WeightGradFp32) {
  run_weight_grad<float>(kWeightGrad[0]);
  run_weight_grad<float>(kWeightGrad[3]);
  run_weight_grad<float>(kWeightGrad[5]);
  run_weight_grad<float>(kWeightGrad[6]);
  run_weight_grad<float>({1, 1, 40, 136, 3, 2, 100, true, true});  // G in place
}

}  // namespace
}  // namespace causalconv
