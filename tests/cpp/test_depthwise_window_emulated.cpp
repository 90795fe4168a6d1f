// The depthwise window kernels (channel-first rows of 16-byte vectors, dilation 1, K <= 8;
// depthwise_window_kernels.cuh) run on the CPU under tests/cpp/cuda_emulation.h, against the
// fp64 reference: the forward's halos passed between lanes, vectors and spans (span-start halos
// loaded from memory), the backward's runs of spans on a cp.async ring (halos from ring
// neighbours, across spans and runs), rows ending inside a vector and inside a span, bias and
// silu, dx and the per-run weight-gradient partials, element by element. (On the GPU:
// tests/python/test_causal_conv1d_depthwise.py.)
#include "cuda_emulation.h"  // first: it sets up the emulated CUDA built-ins

#define depthwise_forward_window depthwise_forward_window_emulated
#define depthwise_backward_window depthwise_backward_window_emulated
#define depthwise_weight_grad_reduce depthwise_weight_grad_reduce_emulated
#include "causal_conv1d/depthwise_weight_grad_reduce.cuh"
#include "causal_conv1d/depthwise_window_kernels.cuh"
#include "common/width_dispatch.h"
#undef depthwise_forward_window
#undef depthwise_backward_window
#undef depthwise_weight_grad_reduce

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include "causalconv/reference.h"
#include "depthwise_emulated_checks.h"
#include "host_tensor.h"
#include "storage_types.h"

namespace causalconv {
namespace {

using test::count_bad;
using test::HostTensor;
using test::kPoison;
using test::kSentinel;
using test::rounded;
using test::widen;
namespace emu = causalconv::emulation;

// A channel-first (B, C, L) tensor in storage type T: rows of `pitch` elements (by default whole
// 16-byte vectors, at least one vector past L; an odd pitch makes rows start off the 16-byte
// boundaries), the first row `lead` elements into the buffer, every element outside the tensor
// holding `fill_value`.
template <typename T>
struct Rows {
  static constexpr int64_t kVec = detail::Vec16<T>::kElems;
  int64_t batch, channels, length, pitch, lead;
  double fill;
  std::vector<T> buffer;
  Rows(int64_t b, int64_t c, int64_t l, double fill_value, int64_t row_pitch = 0, int64_t first = 0)
      : batch(b), channels(c), length(l), pitch(row_pitch ? row_pitch : (l + kVec - 1) / kVec * kVec + kVec),
        lead(first), fill(widen(test::round_to(T{}, fill_value))),
        buffer(size_t(first + b * c * pitch + kVec), test::round_to(T{}, fill_value)) {}
  T* data() { return buffer.data() + lead; }
  T& at(int64_t b, int64_t c, int64_t t) { return buffer[size_t(lead + (b * channels + c) * pitch + t)]; }
  void set_strides(int64_t (&s)[3]) const {
    s[0] = channels * pitch;
    s[1] = pitch;
    s[2] = 1;
  }
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
      const int64_t j = i - lead;  // element index from the first row's start
      const bool element = j >= 0 && j < batch * channels * pitch && j % pitch < length;
      const double v = widen(buffer[size_t(i)]);
      if (!element && !(v == fill || (std::isnan(v) && std::isnan(fill)))) return false;
    }
    return true;
  }
};

struct Case {
  int64_t batch, channels, length, width;
  bool bias, silu;
  bool dx = true, weight_grads = true;  // backward: which outputs are asked for
  int spans_per_run = 1;                 // backward: the runs the grid is cut into (not the host's choice)
  int64_t pitch = 0, lead = 0;           // rows off the 16-byte boundaries (the shifted walk)
};

// Calls f(std::integral_constant<int, K>) for the kernel's width.
template <typename F>
void with_width(int64_t width, F&& f) {
  if (!detail::with_width<2, detail::kMaxWindowWidth>(width, f)) FAIL() << "no window kernel for K = " << width;
}

// Runs kernel(width) for every thread of the window kernels' grid: a warp per span (or run).
template <typename F>
void launch_window_emulated(int64_t warps, int64_t width, F kernel, size_t shared_bytes = 0) {
  const unsigned blocks = unsigned((warps + detail::kWarpsPerBlock - 1) / detail::kWarpsPerBlock);
  emu::launch({blocks, 1, 1}, detail::kVectorThreads, shared_bytes, [&] { with_width(width, kernel); });
}

template <typename T>
void run_forward(const Case& cs) {
  SCOPED_TRACE(::testing::Message() << "forward B" << cs.batch << " C" << cs.channels << " L" << cs.length << " K"
                                    << cs.width << " bias " << cs.bias << " silu " << cs.silu << " pitch " << cs.pitch
                                    << " lead " << cs.lead);
  const int64_t B = cs.batch, C = cs.channels, L = cs.length, K = cs.width;
  std::random_device seed;
  HostTensor x({B, C, L}), w({C, K}), bias({C});
  x.fill_uniform(seed());
  w.fill_uniform(seed());
  bias.fill_uniform(seed());
  Rows<T> x_e(B, C, L, kPoison, cs.pitch, cs.lead), y_e(B, C, L, kSentinel, cs.pitch, cs.lead);
  x_e.load(x);
  const std::vector<T> w_e = rounded<T>(w), bias_e = rounded<T>(bias);

  detail::DepthwiseForwardParams p{};
  test::set_common_params(p, w_e, cs.bias ? bias_e.data() : nullptr, B, C, L, K, 1, cs.silu);
  p.x = x_e.data();
  p.y = y_e.data();
  x_e.set_strides(p.x_stride);
  y_e.set_strides(p.y_stride);
  // As launch_window in depthwise_forward.cu: rows off the 16-byte boundaries take the shifted walk.
  const bool shifted = cs.pitch || cs.lead;
  const int64_t span = detail::forward_window_span<T>();
  const int64_t spans_per_row = shifted ? detail::window_spans_per_row<T, true>(L, span)
                                        : detail::window_spans_per_row<T, false>(L, span);
  const int64_t spans = B * C * spans_per_row;
  launch_window_emulated(spans, K, [&](auto width) {
    if (shifted)
      detail::depthwise_forward_window_emulated<T, decltype(width)::value, true>(p, spans_per_row, spans);
    else
      detail::depthwise_forward_window_emulated<T, decltype(width)::value>(p, spans_per_row, spans);
  });

  const HostTensor y_ref = test::reference_forward(x, w, cs.bias ? &bias : nullptr, 1, cs.silu);
  EXPECT_EQ(count_bad<T>("y", y_e, y_ref, test::forward_magnitude(x, w, cs.bias ? &bias : nullptr, 1)), 0);
  EXPECT_TRUE(y_e.padding_untouched()) << "wrote outside the output's elements";
}

template <typename T>
void run_backward(const Case& cs) {
  SCOPED_TRACE(::testing::Message() << "backward B" << cs.batch << " C" << cs.channels << " L" << cs.length << " K"
                                    << cs.width << " bias " << cs.bias << " silu " << cs.silu << " dx " << cs.dx
                                    << " weight grads " << cs.weight_grads << " spans per run " << cs.spans_per_run
                                    << " pitch " << cs.pitch << " lead " << cs.lead);
  const int64_t B = cs.batch, C = cs.channels, L = cs.length, K = cs.width;
  std::random_device seed;
  HostTensor x({B, C, L}), w({C, K}), bias({C}), dy({B, C, L});
  x.fill_uniform(seed());
  w.fill_uniform(seed());
  bias.fill_uniform(seed());
  dy.fill_uniform(seed());
  Rows<T> x_e(B, C, L, kPoison, cs.pitch, cs.lead), dy_e(B, C, L, kPoison, cs.pitch, cs.lead),
      dx_e(B, C, L, kSentinel, cs.pitch, cs.lead);
  x_e.load(x);
  dy_e.load(dy);
  const std::vector<T> w_e = rounded<T>(w), bias_e = rounded<T>(bias);

  detail::DepthwiseBackwardParams p{};
  test::set_common_params(p, w_e, cs.bias ? bias_e.data() : nullptr, B, C, L, K, 1, cs.silu);
  p.x = x_e.data();
  p.dy = dy_e.data();
  p.dx = cs.dx ? dx_e.data() : nullptr;
  x_e.set_strides(p.x_stride);
  dy_e.set_strides(p.dy_stride);
  dx_e.set_strides(p.dx_stride);
  // As launch_window in depthwise_backward.cu; partials [c][b][run][K + 1]. Rows off the 16-byte
  // boundaries take the shifted walk.
  const bool shifted = cs.pitch || cs.lead;
  const int64_t span = detail::backward_ring_span<T>();
  const int64_t spans_per_row = shifted ? detail::window_spans_per_row<T, true>(L, span)
                                        : detail::window_spans_per_row<T, false>(L, span);
  const int64_t runs_per_row = (spans_per_row + cs.spans_per_run - 1) / cs.spans_per_run;
  const int64_t warps = B * C * runs_per_row, parts = B * runs_per_row;
  std::vector<float> partials(size_t(C * parts * (K + 1)), std::numeric_limits<float>::quiet_NaN());
  float* const partials_arg = cs.weight_grads ? partials.data() : nullptr;
  launch_window_emulated(
      warps, K,
      [&](auto width) {
        constexpr int kWidth = decltype(width)::value;
        if (cs.silu) {  // as launch_window picks the kernel
          if (shifted)
            detail::depthwise_backward_window_emulated<T, kWidth, true, true>(p, runs_per_row, warps,
                                                                              cs.spans_per_run, partials_arg);
          else
            detail::depthwise_backward_window_emulated<T, kWidth, false, true>(p, runs_per_row, warps,
                                                                               cs.spans_per_run, partials_arg);
          return;
        }
        if (shifted)
          detail::depthwise_backward_window_emulated<T, kWidth, true>(p, runs_per_row, warps, cs.spans_per_run,
                                                                      partials_arg);
        else
          detail::depthwise_backward_window_emulated<T, kWidth>(p, runs_per_row, warps, cs.spans_per_run,
                                                                partials_arg);
      },
      detail::backward_ring_smem_bytes());

  const test::BackwardReference ref = test::reference_backward(x, w, cs.bias ? &bias : nullptr, dy, cs.silu);
  if (cs.dx) EXPECT_EQ(count_bad<T>("dx", dx_e, ref.dx, test::dx_magnitude(w, dy)), 0);
  EXPECT_TRUE(dx_e.padding_untouched()) << (cs.dx ? "wrote outside dx's elements" : "wrote dx, not asked for");
  if (!cs.weight_grads) return;
  EXPECT_EQ(test::count_bad_weight_grads(partials, parts, x, dy, ref.dw, ref.db), 0);

  // The reduction kernel: the partials' fp32 sums in part order, rounded to T, bit for bit (a
  // (K, C) weight-gradient view, so its strides are not the contiguous ones).
  const T sentinel = test::round_to(T{}, kSentinel);
  std::vector<T> dweight(size_t(C * K), sentinel), dbias(size_t(C), sentinel);
  p.dweight = dweight.data();
  p.dw_stride[0] = 1;
  p.dw_stride[1] = C;
  p.dbias = cs.bias ? dbias.data() : nullptr;
  p.dbias_stride = 1;
  emu::launch({unsigned(detail::weight_grad_reduce_blocks(p)), 1, 1}, detail::kReduceThreads, 0,
              [&] { detail::depthwise_weight_grad_reduce_emulated<T>(p, parts, partials.data()); });
  const auto bits = [](T v) {
    uint32_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
  };
  for (int64_t c = 0; c < C; ++c)
    for (int64_t k = 0; k <= K; ++k) {
      float sum = 0.0f;
      for (int64_t q = 0; q < parts; ++q) sum += partials[size_t((c * parts + q) * (K + 1) + k)];
      const T want = test::round_to(T{}, sum);
      if (k < K)
        EXPECT_EQ(bits(dweight[size_t(k * C + c)]), bits(want)) << "dweight[" << c << "," << k << "]";
      else if (cs.bias)
        EXPECT_EQ(bits(dbias[size_t(c)]), bits(want)) << "dbias[" << c << "]";
      else
        EXPECT_EQ(bits(dbias[size_t(c)]), bits(sentinel)) << "wrote dbias, not asked for";
    }
}

// Every width; rows shorter than a vector (L = 1, L < K), ending inside a vector, inside a
// span and on a span's edge; several spans per row (halos from the previous span's vectors
// loaded by the span-start lanes); batch > 1; bias and silu on and off.
template <typename T>
void forward_cases() {
  const int64_t span = detail::forward_window_span<T>(), vec = detail::Vec16<T>::kElems;
  for (int64_t k = 2; k <= 8; ++k) run_forward<T>({2, 3, span + 5 * vec + 3, k, k % 2 == 0, k % 3 == 0});
  run_forward<T>({1, 2, 1, 4, true, true});            // L = 1
  run_forward<T>({1, 2, 5, 8, true, false});           // L < K
  run_forward<T>({1, 1, 2 * span, 4, false, true});    // whole spans
  run_forward<T>({3, 2, 33 * vec + 1, 3, true, true});  // one lane's vector past the first 32
}

// The shifted walk: rows starting 1 .. kElems - 1 elements past a 16-byte boundary (odd pitches, the
// first row too), rows shorter than the shift's vector, spans across the row's end; every width.
template <typename T>
void shifted_forward_cases() {
  const int64_t span = detail::forward_window_span<T>(), vec = detail::Vec16<T>::kElems;
  auto run = [](Case cs, int64_t pitch, int64_t lead) {
    cs.pitch = pitch;
    cs.lead = lead;
    run_forward<T>(cs);
  };
  for (int64_t k = 2; k <= 8; ++k) {
    const int64_t length = span + 5 * vec + k;  // rows of odd length back to back: every shift
    run({2, 3, length, k, k % 2 == 0, k % 3 == 0}, length, k % vec);
  }
  run({1, 3, 1, 4, true, true}, 1, 3);                      // L = 1
  run({1, 3, 5, 8, true, false}, 7, 1);                     // L < K
  run({1, 2, 2 * span - 1, 7, false, true}, 2 * span + 1, vec - 1);  // the last span past the row
  run({2, 2, 33 * vec + 3, 3, true, true}, 33 * vec + 5, 2);
}

// Runs of one span and of several (the ring wrapping around its slots), the row's last run
// short; rows shorter than a vector (L = 1, L < K), ending inside a vector, inside a span and on
// a span's edge (the look-ahead halo of the last is zero); halos across spans and runs (fp32 from
// K6 takes two vectors each side); batch > 1; bias and silu on and off; dx or the weight
// gradients alone.
template <typename T>
void backward_cases() {
  const int64_t vec = detail::Vec16<T>::kElems, span = detail::backward_ring_span<T>();
  auto run = [](Case cs, int spans_per_run) {
    cs.spans_per_run = spans_per_run;
    run_backward<T>(cs);
  };
  for (int64_t k = 2; k <= 8; ++k) run({2, 3, 5 * span + 3 * vec + 3, k, k % 2 == 0, k % 3 != 0}, int(k % 3 + 2));
  run({1, 2, 3 * span + 7, 5, true, true}, 1);
  run({2, 1, 11 * span, 7, false, true}, 16);  // whole spans; a run of 11 wraps the ring twice
  run({1, 1, 2 * span, 4, false, true}, 1);
  run({3, 2, 33 * vec + 1, 3, true, true}, 2);  // one lane's vector past the first 32
  run({1, 2, 1, 4, true, true}, 4);             // L = 1
  run({1, 2, 5, 8, true, true}, 2);             // L < K
  run({1, 2, 2 * span + 7, 6, true, true, false, true}, 2);   // weight gradients only
  run({1, 2, 2 * span + 7, 3, false, true, true, false}, 3);  // dx only
}

// The shifted walk: rows starting 1 .. kElems - 1 elements past a 16-byte boundary (odd pitches, the
// first row too), runs of one span and of several, the row's first vector reaching before it,
// rows shorter than that vector, the last span past the row; every width.
template <typename T>
void shifted_backward_cases() {
  const int64_t vec = detail::Vec16<T>::kElems, span = detail::backward_ring_span<T>();
  auto run = [](Case cs, int spans_per_run, int64_t pitch, int64_t lead) {
    cs.spans_per_run = spans_per_run;
    cs.pitch = pitch;
    cs.lead = lead;
    run_backward<T>(cs);
  };
  for (int64_t k = 2; k <= 8; ++k) {
    const int64_t length = 3 * span + 3 * vec + k;  // rows of odd length back to back: every shift
    run({2, 3, length, k, k % 2 == 0, k % 3 != 0}, int(k % 3 + 1), length, k % vec);
  }
  run({1, 3, 1, 4, true, true}, 2, 1, 3);                          // L = 1
  run({1, 3, 5, 8, true, true}, 1, 7, 1);                          // L < K
  run({1, 2, 4 * span - 1, 7, false, true}, 16, 4 * span + 1, vec - 1);  // the last span past the row
  run({1, 2, 2 * span + 7, 6, true, true, false, true}, 2, 2 * span + 9, 2);   // weight gradients only
  run({1, 2, 2 * span + 7, 3, false, true, true, false}, 3, 2 * span + 9, 5);  // dx only
}

TEST(DepthwiseWindowEmulated, ForwardFloat32) { forward_cases<float>(); }
TEST(DepthwiseWindowEmulated, ForwardFloat16) { forward_cases<__half>(); }
TEST(DepthwiseWindowEmulated, ForwardBFloat16) { forward_cases<__nv_bfloat16>(); }
TEST(DepthwiseWindowEmulated, ShiftedForwardFloat32) { shifted_forward_cases<float>(); }
TEST(DepthwiseWindowEmulated, ShiftedForwardFloat16) { shifted_forward_cases<__half>(); }
TEST(DepthwiseWindowEmulated, ShiftedForwardBFloat16) { shifted_forward_cases<__nv_bfloat16>(); }
TEST(DepthwiseWindowEmulated, BackwardFloat32) { backward_cases<float>(); }
TEST(DepthwiseWindowEmulated, BackwardFloat16) { backward_cases<__half>(); }
TEST(DepthwiseWindowEmulated, BackwardBFloat16) { backward_cases<__nv_bfloat16>(); }
TEST(DepthwiseWindowEmulated, ShiftedBackwardFloat32) { shifted_backward_cases<float>(); }
TEST(DepthwiseWindowEmulated, ShiftedBackwardFloat16) { shifted_backward_cases<__half>(); }
TEST(DepthwiseWindowEmulated, ShiftedBackwardBFloat16) { shifted_backward_cases<__nv_bfloat16>(); }

}  // namespace
}  // namespace causalconv
