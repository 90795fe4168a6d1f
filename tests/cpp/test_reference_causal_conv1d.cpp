// The fp64 causal_conv1d reference against a literal brute-force definition (forward)
// and central finite differences (backward), on tiny shapes covering every mode.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "causalconv/error.h"
#include "causalconv/reference.h"
#include "gradient_check.h"
#include "expect_error.h"
#include "host_tensor.h"

namespace {

using causalconv::Activation;
using causalconv::CausalConv1dBackwardArgs;
using causalconv::CausalConv1dForwardArgs;
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

// y = silu?(F.conv1d(F.pad(x, ((K-1)*d, 0)), w, bias, dilation=d, groups=groups)), spelled out:
// build the zero-padded input explicitly, then correlate it with the unflipped taps.
HostTensor brute_force_conv(const HostTensor& x, const HostTensor& w, const HostTensor* bias, int64_t dilation,
                            int64_t groups, bool silu) {
  const int64_t B = x.size(0), c_in = x.size(1), L = x.size(2);
  const int64_t c_out = w.size(0), K = w.size(w.rank() - 1);
  const int64_t pad = (K - 1) * dilation;
  HostTensor padded({B, c_in, pad + L});  // zeros
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < c_in; ++i)
      for (int64_t t = 0; t < L; ++t) padded(b, i, pad + t) = x(b, i, t);

  const int64_t in_per_group = c_in / groups, out_per_group = c_out / groups;
  HostTensor y({B, c_out, L});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t o = 0; o < c_out; ++o)
      for (int64_t t = 0; t < L; ++t) {
        const int64_t group = o / out_per_group;
        double acc = bias ? (*bias)(o) : 0.0;
        for (int64_t j = 0; j < in_per_group; ++j)
          for (int64_t k = 0; k < K; ++k) {
            const double tap = w.rank() == 2 ? w(o, k) : w(o, j, k);
            acc += tap * padded(b, group * in_per_group + j, t + k * dilation);
          }
        y(b, o, t) = silu ? acc / (1.0 + std::exp(-acc)) : acc;
      }
  return y;
}

struct ConvCase {
  std::string name;
  int64_t batch, c_in, c_out, length, width, dilation, groups;
  int weight_rank;  // 2 only for depthwise: (C, K)
  bool bias, silu;
  Layout layout;  // of every tensor of the case, inputs and outputs
};

std::ostream& operator<<(std::ostream& os, const ConvCase& c) { return os << c.name; }

// Inputs of one case with random values, plus args wired to them.
struct ConvProblem {
  ConvCase c;
  HostTensor x, weight, bias;

  explicit ConvProblem(const ConvCase& cc, uint64_t seed = 1) : c(cc) {
    x = HostTensor({c.batch, c.c_in, c.length}, c.layout);
    weight = c.weight_rank == 2 ? HostTensor({c.c_out, c.width}, c.layout)
                                : HostTensor({c.c_out, c.c_in / c.groups, c.width}, c.layout);
    bias = HostTensor({c.c_out}, c.layout);
    x.fill_uniform(seed);
    weight.fill_uniform(seed + 1);
    bias.fill_uniform(seed + 2);
  }

  HostTensor make_output() const {
    HostTensor y({c.batch, c.c_out, c.length}, c.layout);
    y.fill_nan();  // poison: every element must be written
    return y;
  }

  CausalConv1dForwardArgs forward_args(const HostTensor& y) const {
    CausalConv1dForwardArgs a;
    a.x = x.view();
    a.weight = weight.view();
    if (c.bias) a.bias = bias.view();
    a.y = y.view();
    a.dilation = c.dilation;
    a.groups = c.groups;
    a.activation = c.silu ? Activation::silu : Activation::none;
    return a;
  }

  CausalConv1dBackwardArgs backward_args(const HostTensor& dy) const {
    CausalConv1dBackwardArgs a;
    a.x = x.view();
    a.weight = weight.view();
    if (c.bias) a.bias = bias.view();
    a.dy = dy.view();
    a.dilation = c.dilation;
    a.groups = c.groups;
    a.activation = c.silu ? Activation::silu : Activation::none;
    return a;
  }

  HostTensor reference_forward() const {
    HostTensor y = make_output();
    causalconv::reference::causal_conv1d_forward(forward_args(y));
    return y;
  }

  // sum(r * y): a random linear functional whose gradient wrt y is r.
  double functional(const HostTensor& r) const { return causalconv::test::dot(r, reference_forward()); }
};

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      // name, B, C_in, C_out, L, K, d, groups, weight rank, bias, silu, layout
      {"DepthwiseRank2", 1, 3, 3, 10, 4, 1, 3, 2, true, false, Layout::contiguous},
      {"DepthwiseRank2SiluDil3", 3, 3, 3, 11, 3, 3, 3, 2, true, true, Layout::contiguous},
      {"DepthwiseRank3", 3, 5, 5, 9, 3, 1, 5, 3, false, false, Layout::contiguous},
      {"DepthwiseRank3Dil3Strided", 3, 5, 5, 9, 3, 3, 5, 3, true, true, Layout::strided},
      {"DepthwiseRank2Strided", 2, 4, 4, 7, 2, 1, 4, 2, false, true, Layout::strided},
      {"DepthwiseL1", 1, 2, 2, 1, 4, 1, 2, 2, true, true, Layout::contiguous},
      {"DepthwiseLShorterThanK", 3, 2, 2, 3, 5, 1, 2, 2, true, false, Layout::contiguous},
      {"DepthwiseLShorterThanReach", 1, 2, 2, 5, 3, 3, 2, 3, false, true, Layout::strided},
      {"DepthwiseK1", 2, 3, 3, 6, 1, 1, 3, 2, true, true, Layout::contiguous},
      {"DepthwiseMultiplier", 2, 2, 4, 6, 3, 1, 2, 3, true, false, Layout::contiguous},
      {"Grouped", 1, 4, 6, 8, 3, 1, 2, 3, true, false, Layout::contiguous},
      {"GroupedSiluDil3Strided", 3, 4, 6, 10, 3, 3, 2, 3, false, true, Layout::strided},
      {"GroupedL1", 3, 4, 6, 1, 2, 1, 2, 3, true, true, Layout::contiguous},
      {"Dense", 1, 3, 4, 8, 4, 1, 1, 3, true, false, Layout::contiguous},
      {"DenseSiluDil3", 3, 3, 2, 9, 2, 3, 1, 3, true, true, Layout::contiguous},
      {"DenseStridedLShorterThanK", 3, 2, 3, 2, 4, 1, 1, 3, false, true, Layout::strided},
      {"DenseK1", 1, 3, 2, 5, 1, 1, 1, 3, false, false, Layout::strided},
      {"DenseK1Dil3", 3, 2, 2, 4, 1, 3, 1, 3, true, true, Layout::contiguous},
  };
  return cases;
}

class ReferenceConv : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ReferenceConv, ForwardMatchesBruteForce) {
  const ConvProblem p(GetParam());
  const HostTensor y = p.reference_forward();
  const HostTensor expected =
      brute_force_conv(p.x, p.weight, p.c.bias ? &p.bias : nullptr, p.c.dilation, p.c.groups, p.c.silu);
  EXPECT_LE(max_abs_diff(y, expected), 1e-13);
}

TEST_P(ReferenceConv, GradientsMatchFiniteDifferences) {
  ConvProblem p(GetParam(), 7);
  HostTensor r({p.c.batch, p.c.c_out, p.c.length}, p.c.layout);
  r.fill_uniform(99);

  HostTensor dx(p.x.sizes(), p.c.layout), dweight(p.weight.sizes(), p.c.layout), dbias(p.bias.sizes(), p.c.layout);
  dx.fill_nan();
  dweight.fill_nan();
  dbias.fill_nan();
  CausalConv1dBackwardArgs a = p.backward_args(r);
  a.dx = dx.view();
  a.dweight = dweight.view();
  a.dbias = dbias.view();
  causalconv::reference::causal_conv1d_backward(a);

  const auto f = [&] { return p.functional(r); };
  expect_gradient_close(dx, finite_difference(p.x, f), "dx");
  expect_gradient_close(dweight, finite_difference(p.weight, f), "dweight");
  // dbias is the gradient wrt bias whether or not the op was given one: with no bias
  // it is the gradient wrt a bias that is zero, so perturb a zeroed bias for the check.
  if (!p.c.bias) {
    p.c.bias = true;
    p.bias.fill(0.0);
  }
  expect_gradient_close(dbias, finite_difference(p.bias, f), "dbias");
}

TEST_P(ReferenceConv, AbsentGradientsAreSkippedAndPresentOnesUnchanged) {
  const ConvProblem p(GetParam(), 3);
  HostTensor dy({p.c.batch, p.c.c_out, p.c.length});
  dy.fill_uniform(5);

  HostTensor dx_all(p.x.sizes()), dweight_all(p.weight.sizes()), dbias_all(p.bias.sizes());
  CausalConv1dBackwardArgs all = p.backward_args(dy);
  all.dx = dx_all.view();
  all.dweight = dweight_all.view();
  all.dbias = dbias_all.view();
  causalconv::reference::causal_conv1d_backward(all);

  // Every subset of the three outputs, including none at all.
  for (int mask = 0; mask < 8; ++mask) {
    HostTensor dx(p.x.sizes()), dweight(p.weight.sizes()), dbias(p.bias.sizes());
    dx.fill_nan();
    dweight.fill_nan();
    dbias.fill_nan();
    CausalConv1dBackwardArgs a = p.backward_args(dy);
    if (mask & 1) a.dx = dx.view();
    if (mask & 2) a.dweight = dweight.view();
    if (mask & 4) a.dbias = dbias.view();
    ASSERT_NO_THROW(causalconv::reference::causal_conv1d_backward(a)) << "mask " << mask;
    if (mask & 1) {
      EXPECT_EQ(max_abs_diff(dx, dx_all), 0.0) << "mask " << mask;
    }
    if (mask & 2) {
      EXPECT_EQ(max_abs_diff(dweight, dweight_all), 0.0) << "mask " << mask;
    }
    if (mask & 4) {
      EXPECT_EQ(max_abs_diff(dbias, dbias_all), 0.0) << "mask " << mask;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, ReferenceConv, ::testing::ValuesIn(conv_cases()),
                         [](const ::testing::TestParamInfo<ConvCase>& param_info) { return param_info.param.name; });

// The two depthwise weight layouts are one op: same output, same gradients.
TEST(ReferenceConvDepthwise, Rank2AndRank3WeightsAgree) {
  ConvProblem rank2({"", 2, 3, 3, 9, 4, 2, 3, 2, true, true, Layout::contiguous});
  ConvProblem rank3({"", 2, 3, 3, 9, 4, 2, 3, 3, true, true, Layout::strided});
  rank3.x.copy_from(rank2.x);
  rank3.bias.copy_from(rank2.bias);
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t k = 0; k < 4; ++k) rank3.weight(c, 0, k) = rank2.weight(c, k);
  EXPECT_EQ(max_abs_diff(rank2.reference_forward(), rank3.reference_forward()), 0.0);

  HostTensor dy({2, 3, 9});
  dy.fill_uniform(11);
  HostTensor dx2({2, 3, 9}), dx3({2, 3, 9}), dw2({3, 4}), dw3({3, 1, 4});
  CausalConv1dBackwardArgs a2 = rank2.backward_args(dy), a3 = rank3.backward_args(dy);
  a2.dx = dx2.view();
  a2.dweight = dw2.view();
  a3.dx = dx3.view();
  a3.dweight = dw3.view();
  causalconv::reference::causal_conv1d_backward(a2);
  causalconv::reference::causal_conv1d_backward(a3);
  EXPECT_EQ(max_abs_diff(dx2, dx3), 0.0);
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(dw2(c, k), dw3(c, 0, k));
}

// exp overflows for large |pre-activation|; silu and its derivative must stay finite.
TEST(ReferenceConvSilu, SaturatedPreActivationsStayFinite) {
  ConvProblem p({"", 1, 2, 2, 6, 3, 1, 2, 2, true, true, Layout::contiguous});
  p.bias(0) = 1000.0;
  p.bias(1) = -1000.0;
  const HostTensor y = p.reference_forward();
  HostTensor dy({1, 2, 6}), dx({1, 2, 6}), dw({2, 3}), db({2});
  dy.fill(1.0);
  CausalConv1dBackwardArgs a = p.backward_args(dy);
  a.dx = dx.view();
  a.dweight = dw.view();
  a.dbias = db.view();
  causalconv::reference::causal_conv1d_backward(a);
  for (int64_t t = 0; t < 6; ++t) {
    EXPECT_NEAR(y(0, 0, t), 1000.0, 10.0);  // silu(u) ~ u for large u
    EXPECT_EQ(y(0, 1, t), 0.0);             // silu(u) ~ 0 for very negative u
    EXPECT_TRUE(std::isfinite(dx(0, 0, t)) && std::isfinite(dx(0, 1, t)));
  }
  EXPECT_NEAR(db(0), 6.0, 1e-9);  // silu' -> 1
  EXPECT_EQ(db(1), 0.0);          // silu' -> 0
}

// ---- validation of the reference target --------------------------------------

class ReferenceConvValidation : public ::testing::Test {
 protected:
  ConvProblem p{{"", 2, 4, 4, 8, 3, 1, 2, 3, true, false, Layout::contiguous}};  // grouped, groups 2
  HostTensor y = p.make_output();

  void expect_forward_rejected(const CausalConv1dForwardArgs& a, const std::string& arg) {
    expect_invalid_argument([&] { causalconv::reference::causal_conv1d_forward(a); }, "causal_conv1d", arg);
    for (int64_t n = 0; n < y.numel(); ++n) ASSERT_TRUE(std::isnan(y.flat(n))) << "y written before the throw";
  }
};

TEST_F(ReferenceConvValidation, BaselineIsValid) {
  EXPECT_NO_THROW(causalconv::reference::causal_conv1d_forward(p.forward_args(y)));
}

TEST_F(ReferenceConvValidation, Float32InputRejected) {
  CausalConv1dForwardArgs a = p.forward_args(y);
  a.x.dtype = DType::f32;
  expect_forward_rejected(a, "x:");
}

TEST_F(ReferenceConvValidation, Float32WeightRejected) {
  CausalConv1dForwardArgs a = p.forward_args(y);
  a.weight.dtype = DType::f32;
  expect_forward_rejected(a, "weight:");
}

TEST_F(ReferenceConvValidation, CudaTensorRejected) {
  CausalConv1dForwardArgs a = p.forward_args(y);
  a.bias->device = {causalconv::DeviceKind::cuda, 0};
  expect_forward_rejected(a, "bias:");
}

TEST_F(ReferenceConvValidation, WrongWeightShapeRejected) {
  HostTensor w({4, 3, 3});  // C_in/groups is 2
  CausalConv1dForwardArgs a = p.forward_args(y);
  a.weight = w.view();
  expect_forward_rejected(a, "weight:");
}

TEST_F(ReferenceConvValidation, GroupsNotDividingInputChannelsRejected) {
  CausalConv1dForwardArgs a = p.forward_args(y);
  a.groups = 3;
  expect_forward_rejected(a, "groups:");
}

TEST_F(ReferenceConvValidation, WrongOutputShapeRejected) {
  HostTensor y_short({2, 4, 7});
  y_short.fill_nan();
  CausalConv1dForwardArgs a = p.forward_args(y_short);
  expect_invalid_argument([&] { causalconv::reference::causal_conv1d_forward(a); }, "causal_conv1d", "y:");
}

TEST_F(ReferenceConvValidation, ZeroDilationRejected) {
  CausalConv1dForwardArgs a = p.forward_args(y);
  a.dilation = 0;
  expect_forward_rejected(a, "dilation:");
}

TEST_F(ReferenceConvValidation, WrongGradientShapeRejected) {
  HostTensor dy({2, 4, 8}), dweight({4, 2, 4});
  CausalConv1dBackwardArgs a = p.backward_args(dy);
  a.dweight = dweight.view();
  expect_invalid_argument([&] { causalconv::reference::causal_conv1d_backward(a); }, "causal_conv1d", "dweight:");
}

}  // namespace
