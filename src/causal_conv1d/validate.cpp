#include "causal_conv1d/validate.h"

#include <string>

namespace causalconv::detail {
namespace {

constexpr const char* kOp = "causal_conv1d";

// Checks x, weight, bias and the options; returns the geometry they imply.
ConvGeometry validate_inputs(const TensorView& x, const TensorView& weight, const std::optional<TensorView>& bias,
                             int64_t dilation, int64_t groups, Activation activation, Target target) {
  check_tensor(kOp, "x", x, 3, target);
  if (weight.rank != 2 && weight.rank != 3)
    fail_argument(kOp, "weight", "2 dimensions (C, K) for depthwise or 3 dimensions (C_out, C_in/groups, K)",
                  std::to_string(weight.rank) + " dimensions" +
                      (weight.rank > 0 && weight.rank <= kMaxRank ? " " + shape_string(weight) : ""));
  check_tensor(kOp, "weight", weight, weight.rank, target);
  check_matches(kOp, "weight", weight, "x", x);

  ConvGeometry g{};
  g.batch = x.size(0);
  g.c_in = x.size(1);
  g.length = x.size(2);
  g.width = weight.size(weight.rank - 1);
  g.dilation = dilation;
  g.groups = groups;
  g.activation = activation;

  if (groups == 0) {  // infer: C_in / weight.shape[1] (depthwise for a rank-2 weight)
    const int64_t per_group = weight.rank == 2 ? 1 : weight.size(1);
    if (per_group < 1 || g.c_in % per_group != 0)
      fail_argument(kOp, "weight", "shape (C_out, C_in/groups, K) whose second dim divides C_in = " +
                                       std::to_string(g.c_in), shape_string(weight));
    groups = g.c_in / per_group;
    g.groups = groups;
  }
  if (groups < 1 || g.c_in % groups != 0)
    fail_argument(kOp, "groups", "a positive divisor of C_in = " + std::to_string(g.c_in), std::to_string(groups));
  if (weight.rank == 2) {
    if (groups != g.c_in)
      fail_argument(kOp, "groups", "C_in = " + std::to_string(g.c_in) + " for a 2-D (depthwise) weight",
                    std::to_string(groups));
    g.c_out = g.c_in;
    check_sizes(kOp, "weight", weight, {g.c_in, g.width}, "(C, K)");
  } else {
    g.c_out = weight.size(0);
    if (g.c_out % groups != 0)
      fail_argument(kOp, "weight", "C_out = weight.shape[0] divisible by groups = " + std::to_string(groups),
                    shape_string(weight));
    check_sizes(kOp, "weight", weight, {g.c_out, g.c_in / groups, g.width}, "(C_out, C_in/groups, K)");
  }
  g.depthwise = groups == g.c_in && g.c_out == g.c_in;

  if (target == Target::cuda) {
    if (g.depthwise)
      check_range(kOp, "weight.shape[-1] (kernel width K, depthwise)", g.width, kMinDepthwiseWidth,
                  kMaxDepthwiseWidth);
    else
      check_range(kOp, "weight.shape[-1] (kernel width K, dense/grouped)", g.width, kMinDenseWidth,
                  kMaxDenseWidth);
  } else if (g.width < 1) {
    fail_argument(kOp, "weight.shape[-1] (kernel width K)", "K >= 1", std::to_string(g.width));
  }
  check_range(kOp, "dilation", dilation, 1, g.width > 1 ? kMaxReach / (g.width - 1) : kMaxReach);
  if (activation != Activation::none && activation != Activation::silu)
    fail_argument(kOp, "activation", "None or \"silu\"", "code " + std::to_string(static_cast<int>(activation)));

  if (bias) {
    check_tensor(kOp, "bias", *bias, 1, target);
    check_matches(kOp, "bias", *bias, "x", x);
    check_sizes(kOp, "bias", *bias, {g.c_out}, "(C_out)");
  }
  return g;
}

}  // namespace

ConvGeometry validate(const CausalConv1dForwardArgs& a, Target target) {
  ConvGeometry g = validate_inputs(a.x, a.weight, a.bias, a.dilation, a.groups, a.activation, target);
  check_tensor(kOp, "y", a.y, 3, target);
  check_matches(kOp, "y", a.y, "x", a.x);
  check_sizes(kOp, "y", a.y, {g.batch, g.c_out, g.length}, "(B, C_out, L)");
  return g;
}

ConvGeometry validate(const CausalConv1dBackwardArgs& a, Target target) {
  ConvGeometry g = validate_inputs(a.x, a.weight, a.bias, a.dilation, a.groups, a.activation, target);
  check_tensor(kOp, "dy", a.dy, 3, target);
  check_matches(kOp, "dy", a.dy, "x", a.x);
  check_sizes(kOp, "dy", a.dy, {g.batch, g.c_out, g.length}, "(B, C_out, L)");
  if (a.dx) {
    check_tensor(kOp, "dx", *a.dx, 3, target);
    check_matches(kOp, "dx", *a.dx, "x", a.x);
    check_sizes(kOp, "dx", *a.dx, {g.batch, g.c_in, g.length}, "(B, C_in, L)");
  }
  if (a.dweight) {
    check_tensor(kOp, "dweight", *a.dweight, a.weight.rank, target);
    check_matches(kOp, "dweight", *a.dweight, "x", a.x);
    if (a.weight.rank == 2)
      check_sizes(kOp, "dweight", *a.dweight, {a.weight.size(0), a.weight.size(1)}, "weight.shape");
    else
      check_sizes(kOp, "dweight", *a.dweight, {a.weight.size(0), a.weight.size(1), a.weight.size(2)},
                  "weight.shape");
  }
  if (a.dbias) {
    check_tensor(kOp, "dbias", *a.dbias, 1, target);
    check_matches(kOp, "dbias", *a.dbias, "x", a.x);
    check_sizes(kOp, "dbias", *a.dbias, {g.c_out}, "(C_out)");
  }
  return g;
}

}  // namespace causalconv::detail
