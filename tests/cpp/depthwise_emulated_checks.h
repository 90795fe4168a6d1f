// What the emulated depthwise kernel tests share (channel-last, window and tensor-core
// kernels): the parameters' common fields, element-by-element comparison with the fp64
// reference scaled by the magnitude of the terms each output sums, and the weight gradients
// summed from the kernels' per-part partials in the reduction kernel's order.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "causal_conv1d/depthwise_kernels.h"
#include "causalconv/reference.h"
#include "host_tensor.h"
#include "storage_types.h"

namespace causalconv::test {

// The fields DepthwiseForwardParams and DepthwiseBackwardParams share: shapes, a contiguous
// (C, K) weight, a contiguous bias or none (the callers set the activations and their strides).
template <typename T, typename Params>
void set_common_params(Params& p, const std::vector<T>& weight, const T* bias, int64_t batch, int64_t channels,
                       int64_t length, int64_t width, int64_t dilation, bool silu) {
  p.weight = weight.data();
  p.bias = bias;
  p.dtype = dtype_of<T>();
  p.batch = batch;
  p.channels = channels;
  p.length = length;
  p.width = width;
  p.dilation = dilation;
  p.w_stride[0] = width;
  p.w_stride[1] = 1;
  p.bias_stride = 1;
  p.silu = silu;
}

// Inputs are filled with NaN around their elements (a kernel reading padding fails its
// comparison), outputs with a finite sentinel (a kernel writing padding, even NaN, is caught).
constexpr double kPoison = std::numeric_limits<double>::quiet_NaN(), kSentinel = 1234.0;

// A contiguous tensor rounded to T, in place (so the reference sees the rounded values).
template <typename T>
std::vector<T> rounded(HostTensor& h) {
  std::vector<T> out(size_t(h.numel()));
  for (int64_t i = 0; i < h.numel(); ++i) {
    out[size_t(i)] = round_to(T{}, h.flat(i));
    h.flat(i) = widen(out[size_t(i)]);
  }
  return out;
}

template <typename T>
double ulp() {
  return std::is_same_v<T, float> ? std::ldexp(1.0, -23) : std::is_same_v<T, __half> ? std::ldexp(1.0, -10)
                                                                                      : std::ldexp(1.0, -7);
}

// Element by element: the rounding to T of the result plus fp32 accumulation error relative to
// the terms' magnitude (mag). Got: a (B, C, L) tensor in T with batch, channels, length, at().
template <typename T, typename Got>
int64_t count_bad(const char* what, Got& got, const HostTensor& ref, const HostTensor& mag) {
  int64_t bad = 0;
  for (int64_t b = 0; b < got.batch; ++b)
    for (int64_t c = 0; c < got.channels; ++c)
      for (int64_t t = 0; t < got.length; ++t) {
        const double g = widen(got.at(b, c, t)), r = ref(b, c, t);
        if (!(std::abs(g - r) <= ulp<T>() * std::abs(r) + 2e-6 * mag(b, c, t) + 1e-7)) {
          if (bad < 5) ADD_FAILURE() << what << "[" << b << "," << c << "," << t << "] = " << g << ", expected " << r;
          ++bad;
        }
      }
  return bad;
}

// The fp64 reference of a depthwise forward (bias: none when null).
inline HostTensor reference_forward(const HostTensor& x, const HostTensor& w, const HostTensor* bias,
                                    int64_t dilation, bool silu) {
  HostTensor y({x.size(0), x.size(1), x.size(2)});
  CausalConv1dForwardArgs args{x.view(), w.view(), std::nullopt, y.view(), dilation, x.size(1),
                               silu ? causalconv::Activation::silu : causalconv::Activation::none};
  if (bias) args.bias = bias->view();
  reference::causal_conv1d_forward(args);
  return y;
}

// The fp64 reference of a depthwise backward at dilation 1: dx, dweight, dbias.
struct BackwardReference {
  HostTensor dx, dw, db;
};
inline BackwardReference reference_backward(const HostTensor& x, const HostTensor& w, const HostTensor* bias,
                                            const HostTensor& dy, bool silu) {
  BackwardReference r{HostTensor({x.size(0), x.size(1), x.size(2)}), HostTensor({w.size(0), w.size(1)}),
                      HostTensor({w.size(0)})};
  CausalConv1dBackwardArgs args{x.view(), w.view(), std::nullopt, dy.view(), r.dx.view(), r.dw.view(),
                                r.db.view(), 1, x.size(1), silu ? causalconv::Activation::silu : causalconv::Activation::none};
  if (bias) args.bias = bias->view();
  reference::causal_conv1d_backward(args);
  return r;
}

// Sum of |w[k] x[t - (K-1-k)d]| (+|bias|): the scale of a forward output's rounding error.
inline HostTensor forward_magnitude(const HostTensor& x, const HostTensor& w, const HostTensor* bias,
                                    int64_t dilation) {
  const int64_t B = x.size(0), C = x.size(1), L = x.size(2), K = w.size(1);
  HostTensor mag({B, C, L});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < L; ++t) {
        double m = bias ? std::abs((*bias)(c)) : 0.0;
        for (int64_t k = 0; k < K; ++k) {
          const int64_t s = t - (K - 1 - k) * dilation;
          if (s >= 0) m += std::abs(w(c, k) * x(b, c, s));
        }
        mag(b, c, t) = m;
      }
  return mag;
}

// dx at dilation 1: the sum over taps of w * g, with |silu'| <= 1.1.
inline HostTensor dx_magnitude(const HostTensor& w, const HostTensor& dy) {
  const int64_t B = dy.size(0), C = dy.size(1), L = dy.size(2), K = w.size(1);
  HostTensor mag({B, C, L});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < L; ++t) {
        double m = 0;
        for (int64_t k = 0; k < K; ++k)
          if (t + (K - 1 - k) < L) m += 1.1 * std::abs(w(c, k) * dy(b, c, t + (K - 1 - k)));
        mag(b, c, t) = m;
      }
  return mag;
}

// dweight[c, k] (k < K) and dbias[c] (k = K) at dilation 1 from partials laid out as
// [c][part][K + 1], summed over parts in order in fp32 as the reduction kernel does; every
// partial must have been written (they start as NaN).
inline int64_t count_bad_weight_grads(const std::vector<float>& partials, int64_t parts, const HostTensor& x,
                                      const HostTensor& dy, const HostTensor& dw_ref, const HostTensor& db_ref) {
  const int64_t B = x.size(0), C = x.size(1), L = x.size(2), K = dw_ref.size(1);
  int64_t bad = 0;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t k = 0; k <= K; ++k) {
      float sum = 0.0f;
      for (int64_t q = 0; q < parts; ++q) {
        const float v = partials[size_t((c * parts + q) * (K + 1) + k)];
        if (std::isnan(v)) {
          ADD_FAILURE() << "partial (" << c << ", " << q << ", " << k << ") not written";
          return bad + 1;
        }
        sum += v;
      }
      const double ref = k < K ? dw_ref(c, k) : db_ref(c);
      double mag = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < L; ++t) {
          const int64_t s = t - (K - 1 - k);
          mag += 1.1 * std::abs(dy(b, c, t)) * (k == K ? 1.0 : s >= 0 ? std::abs(x(b, c, s)) : 0.0);
        }
      if (!(std::abs(sum - ref) <= 1e-5 * mag + 1e-6)) {  // fp32 sums of up to B*L terms
        if (bad < 5)
          ADD_FAILURE() << (k < K ? "dweight[" : "dbias[") << c << "," << k << "] = " << sum << ", expected " << ref;
        ++bad;
      }
    }
  return bad;
}

}  // namespace causalconv::test
