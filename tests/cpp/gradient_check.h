// Gradient checks for the reference tests: central finite differences and a
// tolerance scaled to the gradient.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>

#include "host_tensor.h"

namespace causalconv::test {

// Central differences of `f` wrt every element of `param` (restored afterwards).
inline HostTensor finite_difference(HostTensor& param, const std::function<double()>& f) {
  constexpr double kStep = 1e-6;
  HostTensor grad(param.sizes());
  for (int64_t n = 0; n < param.numel(); ++n) {
    const double saved = param.flat(n);
    param.flat(n) = saved + kStep;
    const double up = f();
    param.flat(n) = saved - kStep;
    const double down = f();
    param.flat(n) = saved;
    grad.flat(n) = (up - down) / (2 * kStep);
  }
  return grad;
}

// Finite differences in fp64 with step 1e-6 are good to ~1e-9 here; 1e-7 of the gradient's scale.
inline void expect_gradient_close(const HostTensor& analytic, const HostTensor& numeric, const char* what) {
  const double tol = 1e-7 * std::max(1.0, max_abs(numeric));
  EXPECT_LE(max_abs_diff(analytic, numeric), tol) << what;
}

// sum(r * out): a random linear functional whose gradient wrt out is r.
inline double dot(const HostTensor& r, const HostTensor& out) {
  double s = 0.0;
  for (int64_t n = 0; n < out.numel(); ++n) s += r.flat(n) * out.flat(n);
  return s;
}

}  // namespace causalconv::test
