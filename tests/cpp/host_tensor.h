// Test utility: an owning fp64 CPU tensor (std::vector storage + a TensorView over it).
//
//   HostTensor x({2, 3, 5});                            // contiguous, zeros
//   HostTensor y({2, 3, 5}, Layout::strided);           // same sizes, non-contiguous strides
//   x.fill_uniform(42); y.fill_nan();                   // seeded values in [-1, 1); NaN poison
//   args.x = x.view();                                  // hand it to an op
//   x(1, 2, 4) = 0.5; double v = x.flat(7);             // multi-index / row-major logical index
//   EXPECT_LE(max_abs_diff(x, y), 1e-12);               // compares logical elements only
//
// The logical (row-major) order is the same for every layout, so a seed gives the
// same values whatever the strides. For device tests, storage() is the whole
// buffer (padding included) and view().strides are its strides in elements.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "causalconv/tensor.h"

namespace causalconv::test {

enum class Layout {
  contiguous,  // row-major, dense
  // Non-contiguous on purpose: dims stored in reverse order (dim 0 innermost), every
  // other slot used and each dim padded by one; unused slots hold NaN, so a kernel
  // that reads padding produces NaN and fails its comparison.
  strided,
};

class HostTensor {
 public:
  // A rank-0 tensor holding one zero (so numel() == 1 always has storage behind it).
  HostTensor() : HostTensor(std::vector<int64_t>{}) {}

  // Sizes in the given layout, elements zero.
  explicit HostTensor(const std::vector<int64_t>& sizes, Layout layout = Layout::contiguous) {
    if (sizes.size() > static_cast<size_t>(kMaxRank)) throw std::invalid_argument("HostTensor: rank > kMaxRank");
    view_.dtype = DType::f64;
    view_.rank = static_cast<int>(sizes.size());
    int64_t extent = 1;
    if (layout == Layout::contiguous) {
      for (int d = view_.rank - 1; d >= 0; --d) {
        view_.sizes[d] = sizes[d];
        view_.strides[d] = extent;
        extent *= sizes[d];
      }
      storage_.assign(static_cast<size_t>(extent), 0.0);
    } else {
      extent = 2;
      for (int d = 0; d < view_.rank; ++d) {
        view_.sizes[d] = sizes[d];
        view_.strides[d] = extent;
        extent *= sizes[d] + 1;
      }
      storage_.assign(static_cast<size_t>(extent), std::numeric_limits<double>::quiet_NaN());
      fill(0.0);
    }
    view_.data = storage_.data();
  }

  // Copies keep their own storage; the view always points at this object's buffer.
  HostTensor(const HostTensor& other) : storage_(other.storage_), view_(other.view_) { view_.data = storage_.data(); }
  HostTensor(HostTensor&& other) noexcept : storage_(std::move(other.storage_)), view_(other.view_) {
    view_.data = storage_.data();
  }
  HostTensor& operator=(HostTensor other) noexcept {
    storage_.swap(other.storage_);
    view_ = other.view_;
    view_.data = storage_.data();
    return *this;
  }

  // The view to pass to ops (fp64, cpu, this tensor's strides).
  const TensorView& view() const { return view_; }

  int rank() const { return view_.rank; }
  int64_t size(int d) const { return view_.sizes[d]; }
  std::vector<int64_t> sizes() const { return std::vector<int64_t>(view_.sizes, view_.sizes + view_.rank); }
  int64_t numel() const { return view_.numel(); }

  // Whole buffer including padding slots (for copying to a device with the same strides).
  std::vector<double>& storage() { return storage_; }
  const std::vector<double>& storage() const { return storage_; }

  // Element at a multi-index, bounds-checked.
  template <class... Index>
  double& operator()(Index... index) {
    return storage_[offset({static_cast<int64_t>(index)...})];
  }
  template <class... Index>
  double operator()(Index... index) const {
    return storage_[offset({static_cast<int64_t>(index)...})];
  }

  // Element n of the logical row-major order (0 <= n < numel()), whatever the layout.
  double& flat(int64_t n) { return storage_[flat_offset(n)]; }
  double flat(int64_t n) const { return storage_[flat_offset(n)]; }

  void fill(double value) {
    for (int64_t n = 0; n < numel(); ++n) flat(n) = value;
  }
  void fill_nan() { fill(std::numeric_limits<double>::quiet_NaN()); }
  // Uniform in [lo, hi), drawn in logical order from std::mt19937_64(seed).
  void fill_uniform(uint64_t seed, double lo = -1.0, double hi = 1.0) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> dist(lo, hi);
    for (int64_t n = 0; n < numel(); ++n) flat(n) = dist(rng);
  }

  // Logical copy from a tensor of the same sizes (any layouts).
  void copy_from(const HostTensor& other) {
    require_same_sizes(*this, other, "copy_from");
    for (int64_t n = 0; n < numel(); ++n) flat(n) = other.flat(n);
  }

  // The logical elements in row-major order.
  std::vector<double> to_vector() const {
    std::vector<double> out(static_cast<size_t>(numel()));
    for (int64_t n = 0; n < numel(); ++n) out[static_cast<size_t>(n)] = flat(n);
    return out;
  }

  static void require_same_sizes(const HostTensor& a, const HostTensor& b, const char* what) {
    if (a.sizes() != b.sizes()) throw std::invalid_argument(std::string("HostTensor::") + what + ": sizes differ");
  }

 private:
  size_t offset(std::initializer_list<int64_t> index) const {
    if (static_cast<int>(index.size()) != view_.rank) throw std::out_of_range("HostTensor: wrong number of indices");
    int64_t off = 0;
    int d = 0;
    for (int64_t i : index) {
      if (i < 0 || i >= view_.sizes[d]) throw std::out_of_range("HostTensor: index out of range");
      off += i * view_.strides[d++];
    }
    return static_cast<size_t>(off);
  }

  size_t flat_offset(int64_t n) const {
    if (n < 0 || n >= numel()) throw std::out_of_range("HostTensor: flat index out of range");
    int64_t off = 0;
    for (int d = view_.rank - 1; d >= 0; --d) {
      off += (n % view_.sizes[d]) * view_.strides[d];
      n /= view_.sizes[d];
    }
    return static_cast<size_t>(off);
  }

  std::vector<double> storage_;
  TensorView view_{};
};

// max |a - b| over logical elements; NaN if any element of either is NaN (so an
// unwritten, poisoned output always fails an EXPECT_LE on it).
inline double max_abs_diff(const HostTensor& a, const HostTensor& b) {
  HostTensor::require_same_sizes(a, b, "max_abs_diff");
  double worst = 0.0;
  for (int64_t n = 0; n < a.numel(); ++n) {
    const double d = std::abs(a.flat(n) - b.flat(n));
    if (std::isnan(d)) return std::numeric_limits<double>::quiet_NaN();
    worst = std::max(worst, d);
  }
  return worst;
}

// ||a - b|| over logical elements (NaN if any difference is NaN).
inline double l2_distance(const HostTensor& a, const HostTensor& b) {
  HostTensor::require_same_sizes(a, b, "l2_distance");
  double diff2 = 0.0;
  for (int64_t n = 0; n < a.numel(); ++n) diff2 += (a.flat(n) - b.flat(n)) * (a.flat(n) - b.flat(n));
  return std::sqrt(diff2);
}

inline double l2_norm(const HostTensor& a) {
  double sum2 = 0.0;
  for (int64_t n = 0; n < a.numel(); ++n) sum2 += a.flat(n) * a.flat(n);
  return std::sqrt(sum2);
}

// ||a - ref||_2 / ||ref||_2 over logical elements (the plain ||a - ref||_2 when ref is
// all zero); NaN if any element of either is NaN.
inline double rel_l2(const HostTensor& a, const HostTensor& ref) {
  HostTensor::require_same_sizes(a, ref, "rel_l2");
  double diff2 = 0.0, ref2 = 0.0;
  for (int64_t n = 0; n < a.numel(); ++n) {
    const double d = a.flat(n) - ref.flat(n);
    if (std::isnan(d)) return std::numeric_limits<double>::quiet_NaN();
    diff2 += d * d;
    ref2 += ref.flat(n) * ref.flat(n);
  }
  return ref2 > 0.0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
}

// max |a| over logical elements (a scale for relative tolerances).
inline double max_abs(const HostTensor& a) {
  double worst = 0.0;
  for (int64_t n = 0; n < a.numel(); ++n) worst = std::max(worst, std::abs(a.flat(n)));
  return worst;
}

}  // namespace causalconv::test
