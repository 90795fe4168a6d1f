// Test utility: element-by-element comparison against a reference with a per-element
// tolerance, counting the misses (the first five reported) and accumulating the relative L2
// error over all elements.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace causalconv::test {

struct ErrorTally {
  int64_t bad = 0;
  double err2 = 0, ref2 = 0, mag2 = 0;
  // One element, at index (i, j, k) of `what`; mag: the sum of its terms' magnitudes, if known.
  void add(double got, double want, double tol, const char* what, int64_t i, int64_t j, int64_t k,
           double mag = 0) {
    mag2 += mag * mag;
    if (!(std::abs(got - want) <= tol)) {
      if (bad < 5)
        ADD_FAILURE() << what << "[" << i << "," << j << "," << k << "] = " << got << ", expected " << want
                      << " (tolerance " << tol << ")";
      ++bad;
    }
    err2 += (got - want) * (got - want);
    ref2 += want * want;
  }
  double rel_l2() const { return std::sqrt(err2 / std::max(ref2, 1e-300)); }
  // The L2 error relative to ||ref|| + ||magnitudes|| (tests/python/conftest.py's scale): on a few
  // elements whose terms cancel (a row of L = 1), ||ref|| alone can fall far below the terms'
  // rounding.
  double rel_l2_with_magnitude() const {
    return std::sqrt(err2) / std::max(std::sqrt(ref2) + std::sqrt(mag2), 1e-300);
  }
  // The L2 error relative to another norm's square (e.g. the sum of squared term magnitudes
  // of a reduction, whose exact value can cancel far below its terms).
  double l2_relative_to(double norm2) const { return std::sqrt(err2 / std::max(norm2, 1e-300)); }
};

}  // namespace causalconv::test
