#include "b2b/validate.h"

#include <string>

namespace causalconv::detail {
namespace {

constexpr const char* kOp = "b2b_causal_conv1d";

B2BGeometry validate_inputs(const TensorView& x, const TensorView& wp, const TensorView& wm, const TensorView& skip,
                            Target target) {
  check_tensor(kOp, "x", x, 3, target);
  if (x.size(1) % 3 != 0)
    fail_argument(kOp, "x", "shape (B, 3*D, L) with channels divisible by 3", shape_string(x));
  B2BGeometry g{};
  g.batch = x.size(0);
  g.dim = x.size(1) / 3;
  g.length = x.size(2);

  check_tensor(kOp, "weight_proj", wp, 2, target);
  check_matches(kOp, "weight_proj", wp, "x", x);
  g.proj_width = wp.size(1);
  check_sizes(kOp, "weight_proj", wp, {3 * g.dim, g.proj_width}, "(3*D, Kp)");

  check_tensor(kOp, "weight_mixer", wm, 2, target);
  check_matches(kOp, "weight_mixer", wm, "x", x);
  g.mixer_width = wm.size(1);
  check_sizes(kOp, "weight_mixer", wm, {g.dim, g.mixer_width}, "(D, Km)");

  check_tensor(kOp, "skip_bias", skip, 1, target);
  check_matches(kOp, "skip_bias", skip, "x", x);
  check_sizes(kOp, "skip_bias", skip, {g.dim}, "(D)");

  if (target == Target::cuda) {
    check_range(kOp, "weight_proj.shape[1] (Kp)", g.proj_width, kMinProjWidth, kMaxProjWidth);
    check_range(kOp, "weight_mixer.shape[1] (Km)", g.mixer_width, kMinMixerWidth, kMaxMixerWidth);
  } else {
    check_range(kOp, "weight_proj.shape[1] (Kp)", g.proj_width, 1, kMaxReach);
    check_range(kOp, "weight_mixer.shape[1] (Km)", g.mixer_width, 1, kMaxReach);
  }
  return g;
}

void check_output(const char* arg, const TensorView& t, const TensorView& x, std::initializer_list<int64_t> sizes,
                  const char* layout, Target target) {
  check_tensor(kOp, arg, t, static_cast<int>(sizes.size()), target);
  check_matches(kOp, arg, t, "x", x);
  check_sizes(kOp, arg, t, sizes, layout);
}

}  // namespace

B2BGeometry validate(const B2BCausalConv1dForwardArgs& a, Target target) {
  B2BGeometry g = validate_inputs(a.x, a.weight_proj, a.weight_mixer, a.skip_bias, target);
  check_output("out", a.out, a.x, {g.batch, g.dim, g.length}, "(B, D, L)", target);
  return g;
}

B2BGeometry validate(const B2BCausalConv1dBackwardArgs& a, Target target) {
  B2BGeometry g = validate_inputs(a.x, a.weight_proj, a.weight_mixer, a.skip_bias, target);
  check_output("dout", a.dout, a.x, {g.batch, g.dim, g.length}, "(B, D, L)", target);
  check_output("dx", a.dx, a.x, {g.batch, 3 * g.dim, g.length}, "(B, 3*D, L)", target);
  check_output("dweight_proj", a.dweight_proj, a.x, {3 * g.dim, g.proj_width}, "(3*D, Kp)", target);
  check_output("dweight_mixer", a.dweight_mixer, a.x, {g.dim, g.mixer_width}, "(D, Km)", target);
  check_output("dskip_bias", a.dskip_bias, a.x, {g.dim}, "(D)", target);
  return g;
}

}  // namespace causalconv::detail
