// The fp64 b2b_causal_conv1d reference against a literal composition (forward) and
// central finite differences of all four gradients (backward).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "causalconv/error.h"
#include "causalconv/reference.h"
#include "gradient_check.h"
#include "expect_error.h"
#include "host_tensor.h"

namespace {

using causalconv::B2BCausalConv1dBackwardArgs;
using causalconv::B2BCausalConv1dForwardArgs;
using causalconv::DType;
using causalconv::Error;
using causalconv::ErrorKind;
using causalconv::test::expect_gradient_close;
using causalconv::test::finite_difference;
using causalconv::test::expect_invalid_argument;
using causalconv::test::HostTensor;
using causalconv::test::Layout;
using causalconv::test::max_abs;
using causalconv::test::max_abs_diff;

// F.conv1d(F.pad(x, (K-1, 0)), w[:, None, :], groups=C): explicit zero padding, unflipped taps.
HostTensor brute_force_depthwise(const HostTensor& x, const HostTensor& w) {
  const int64_t B = x.size(0), C = x.size(1), L = x.size(2), K = w.size(1);
  HostTensor padded({B, C, K - 1 + L});  // zeros
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < L; ++t) padded(b, c, K - 1 + t) = x(b, c, t);
  HostTensor y({B, C, L});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < L; ++t)
        for (int64_t k = 0; k < K; ++k) y(b, c, t) += w(c, k) * padded(b, c, t + k);
  return y;
}

// DESIGN.md §2.2 written out: p = proj(x); x2, x1, v = p[:,0::3], p[:,1::3], p[:,2::3];
// z = x1 * v; h = mixer(z) + skip * z; out = x2 * h.
HostTensor brute_force_b2b(const HostTensor& x, const HostTensor& wp, const HostTensor& wm, const HostTensor& skip) {
  const int64_t B = x.size(0), D = x.size(1) / 3, L = x.size(2);
  const HostTensor p = brute_force_depthwise(x, wp);
  HostTensor x2({B, D, L}), x1({B, D, L}), v({B, D, L});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < D; ++c)
      for (int64_t t = 0; t < L; ++t) {
        x2(b, c, t) = p(b, 3 * c, t);
        x1(b, c, t) = p(b, 3 * c + 1, t);
        v(b, c, t) = p(b, 3 * c + 2, t);
      }
  HostTensor z({B, D, L});
  for (int64_t n = 0; n < z.numel(); ++n) z.flat(n) = x1.flat(n) * v.flat(n);
  const HostTensor mixed = brute_force_depthwise(z, wm);
  HostTensor out({B, D, L});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < D; ++c)
      for (int64_t t = 0; t < L; ++t) out(b, c, t) = x2(b, c, t) * (mixed(b, c, t) + skip(c) * z(b, c, t));
  return out;
}

struct B2BCase {
  std::string name;
  int64_t batch, dim, length, proj_width, mixer_width;
  Layout layout;  // of every tensor of the case, inputs and outputs
};

std::ostream& operator<<(std::ostream& os, const B2BCase& c) { return os << c.name; }

struct B2BProblem {
  B2BCase c;
  HostTensor x, weight_proj, weight_mixer, skip_bias;

  explicit B2BProblem(const B2BCase& cc, uint64_t seed = 1)
      : c(cc),
        x({c.batch, 3 * c.dim, c.length}, c.layout),
        weight_proj({3 * c.dim, c.proj_width}, c.layout),
        weight_mixer({c.dim, c.mixer_width}, c.layout),
        skip_bias({c.dim}, c.layout) {
    x.fill_uniform(seed);
    weight_proj.fill_uniform(seed + 1);
    weight_mixer.fill_uniform(seed + 2);
    skip_bias.fill_uniform(seed + 3);
  }

  HostTensor reference_forward() const {
    HostTensor out({c.batch, c.dim, c.length}, c.layout);
    out.fill_nan();  // poison: every element must be written
    B2BCausalConv1dForwardArgs a;
    a.x = x.view();
    a.weight_proj = weight_proj.view();
    a.weight_mixer = weight_mixer.view();
    a.skip_bias = skip_bias.view();
    a.out = out.view();
    causalconv::reference::b2b_causal_conv1d_forward(a);
    return out;
  }

  // sum(r * out): a random linear functional whose gradient wrt out is r.
  double functional(const HostTensor& r) const { return causalconv::test::dot(r, reference_forward()); }
};

const std::vector<B2BCase>& b2b_cases() {
  static const std::vector<B2BCase> cases = {
      // name, B, D, L, Kp, Km, layout
      {"Tiny", 1, 1, 5, 2, 2, Layout::contiguous},
      {"L1", 3, 2, 1, 3, 4, Layout::contiguous},
      {"LShorterThanK", 1, 2, 3, 4, 6, Layout::strided},
      {"Widths1", 2, 2, 6, 1, 1, Layout::contiguous},
      {"Batch3", 3, 2, 9, 3, 5, Layout::contiguous},
      {"StridedHyena", 2, 3, 12, 3, 7, Layout::strided},
  };
  return cases;
}

class ReferenceB2B : public ::testing::TestWithParam<B2BCase> {};

TEST_P(ReferenceB2B, ForwardMatchesBruteForce) {
  const B2BProblem p(GetParam());
  EXPECT_LE(max_abs_diff(p.reference_forward(), brute_force_b2b(p.x, p.weight_proj, p.weight_mixer, p.skip_bias)),
            1e-13);
}

TEST_P(ReferenceB2B, GradientsMatchFiniteDifferences) {
  B2BProblem p(GetParam(), 21);
  const B2BCase& c = p.c;
  HostTensor r({c.batch, c.dim, c.length}, c.layout);
  r.fill_uniform(99);
  HostTensor dx(p.x.sizes(), c.layout), dwp(p.weight_proj.sizes(), c.layout);
  HostTensor dwm(p.weight_mixer.sizes(), c.layout), dskip(p.skip_bias.sizes(), c.layout);
  for (HostTensor* t : {&dx, &dwp, &dwm, &dskip}) t->fill_nan();  // poison: every element must be written

  B2BCausalConv1dBackwardArgs a;
  a.x = p.x.view();
  a.weight_proj = p.weight_proj.view();
  a.weight_mixer = p.weight_mixer.view();
  a.skip_bias = p.skip_bias.view();
  a.dout = r.view();
  a.dx = dx.view();
  a.dweight_proj = dwp.view();
  a.dweight_mixer = dwm.view();
  a.dskip_bias = dskip.view();
  causalconv::reference::b2b_causal_conv1d_backward(a);

  const auto f = [&] { return p.functional(r); };
  expect_gradient_close(dx, finite_difference(p.x, f), "dx");
  expect_gradient_close(dwp, finite_difference(p.weight_proj, f), "dweight_proj");
  expect_gradient_close(dwm, finite_difference(p.weight_mixer, f), "dweight_mixer");
  expect_gradient_close(dskip, finite_difference(p.skip_bias, f), "dskip_bias");
}

INSTANTIATE_TEST_SUITE_P(Cases, ReferenceB2B, ::testing::ValuesIn(b2b_cases()),
                         [](const ::testing::TestParamInfo<B2BCase>& param_info) { return param_info.param.name; });

// ---- validation of the reference target --------------------------------------

class ReferenceB2BValidation : public ::testing::Test {
 protected:
  B2BProblem p{{"", 2, 2, 6, 3, 4, Layout::contiguous}};
  HostTensor out{{2, 2, 6}};

  B2BCausalConv1dForwardArgs args() {
    B2BCausalConv1dForwardArgs a;
    a.x = p.x.view();
    a.weight_proj = p.weight_proj.view();
    a.weight_mixer = p.weight_mixer.view();
    a.skip_bias = p.skip_bias.view();
    a.out = out.view();
    return a;
  }
};

TEST_F(ReferenceB2BValidation, BaselineIsValid) {
  EXPECT_NO_THROW(causalconv::reference::b2b_causal_conv1d_forward(args()));
}

TEST_F(ReferenceB2BValidation, Float32InputRejectedAndNothingWritten) {
  out.fill_nan();
  B2BCausalConv1dForwardArgs a = args();
  a.x.dtype = DType::f32;
  expect_invalid_argument([&] { causalconv::reference::b2b_causal_conv1d_forward(a); }, "b2b_causal_conv1d",
                          "x:");
  for (int64_t n = 0; n < out.numel(); ++n) ASSERT_TRUE(std::isnan(out.flat(n)));
}

TEST_F(ReferenceB2BValidation, Float32SkipBiasRejected) {
  B2BCausalConv1dForwardArgs a = args();
  a.skip_bias.dtype = DType::f32;
  expect_invalid_argument([&] { causalconv::reference::b2b_causal_conv1d_forward(a); }, "b2b_causal_conv1d",
                          "skip_bias:");
}

TEST_F(ReferenceB2BValidation, WrongSkipBiasShapeRejected) {
  HostTensor skip({3});
  B2BCausalConv1dForwardArgs a = args();
  a.skip_bias = skip.view();
  expect_invalid_argument([&] { causalconv::reference::b2b_causal_conv1d_forward(a); }, "b2b_causal_conv1d",
                          "skip_bias:");
}

TEST_F(ReferenceB2BValidation, WrongGradientShapeRejected) {
  HostTensor dout({2, 2, 6}), dx({2, 6, 6}), dwp({6, 3}), dwm({2, 5}), dskip({2});
  B2BCausalConv1dBackwardArgs a;
  a.x = p.x.view();
  a.weight_proj = p.weight_proj.view();
  a.weight_mixer = p.weight_mixer.view();
  a.skip_bias = p.skip_bias.view();
  a.dout = dout.view();
  a.dx = dx.view();
  a.dweight_proj = dwp.view();
  a.dweight_mixer = dwm.view();  // Km is 4
  a.dskip_bias = dskip.view();
  expect_invalid_argument([&] { causalconv::reference::b2b_causal_conv1d_backward(a); }, "b2b_causal_conv1d",
                          "dweight_mixer:");
}

}  // namespace
