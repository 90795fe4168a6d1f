// Test tensors in a storage type T (float, __half, __nv_bfloat16) laid out as the kernels take
// them, with padded strides and NaN in the padding, and their comparison with an fp64 reference:
// for the emulated and the CUDA kernel tests of every op.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "host_tensor.h"
#include "storage_types.h"

namespace causalconv::test {

// A (B, C, L) activation in storage type T with padded batch and channel strides
// (unit stride along L, as the kernels need); padding slots hold NaN.
template <typename T>
struct Activation {
  int64_t batch, channels, length;
  int64_t stride_c, stride_b;
  std::vector<T> data;

  // pad: NaN slots after each row (3 by default: rows not 16-byte vectors).
  Activation(int64_t b, int64_t c, int64_t l, int64_t pad = 3)
      : batch(b), channels(c), length(l), stride_c(l + pad), stride_b((c + 1) * (l + pad)),
        data(size_t(b * stride_b), round_to(T{}, std::numeric_limits<double>::quiet_NaN())) {}
  T& at(int64_t b, int64_t c, int64_t t) { return data[size_t(b * stride_b + c * stride_c + t)]; }
  // Rounds host's values to T, stores them, and writes the rounded values back to host.
  void load(HostTensor& host) {
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t t = 0; t < length; ++t) {
          at(b, c, t) = round_to(T{}, host(b, c, t));
          host(b, c, t) = widen(at(b, c, t));
        }
  }
  HostTensor to_host() {
    HostTensor h({batch, channels, length});
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t t = 0; t < length; ++t) h(b, c, t) = widen(at(b, c, t));
    return h;
  }
};

// Elements of a that are no (b, c, t) position (the pads after the rows and after each batch):
// they hold NaN from the start, so a kernel that wrote outside its rows leaves some that do not.
template <typename T>
int64_t written_outside_rows(const Activation<T>& a) {
  int64_t written = 0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    const int64_t in_batch = int64_t(i) % a.stride_b, c = in_batch / a.stride_c, t = in_batch % a.stride_c;
    if ((c >= a.channels || t >= a.length) && !std::isnan(widen(a.data[i]))) ++written;
  }
  return written;
}

// A (rows, cols) weight stored transposed (column-major): stride (1, rows).
template <typename T>
struct Weight {
  int64_t rows, cols;
  std::vector<T> data;
  Weight(int64_t r, int64_t c)
      : rows(r), cols(c), data(size_t(r * c), round_to(T{}, std::numeric_limits<double>::quiet_NaN())) {}
  T& at(int64_t r, int64_t c) { return data[size_t(r + c * rows)]; }
  void load(HostTensor& host) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        at(r, c) = round_to(T{}, cols == 1 && host.rank() == 1 ? host(r) : host(r, c));
        (host.rank() == 1 ? host(r) : host(r, c)) = widen(at(r, c));
      }
  }
  HostTensor to_host(bool vector = false) {
    HostTensor h(vector ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, cols});
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) (vector ? h(r) : h(r, c)) = widen(at(r, c));
    return h;
  }
};

inline HostTensor absolute(const HostTensor& t) {
  HostTensor a(t.sizes());
  for (int64_t n = 0; n < t.numel(); ++n) a.flat(n) = std::fabs(t.flat(n));
  return a;
}


// ||got - ref|| <= rel * (||ref|| + ||magnitude||) + absolute * sqrt(n): relative error, with the
// terms' scale standing in for ||ref|| when they cancel, plus an absolute allowance (fp16's
// subnormal spacing for outputs that small).
inline void expect_close(const HostTensor& got, const HostTensor& ref, const HostTensor& magnitude, double rel,
                         double absolute_allowance, const char* what) {
  const double allowed = rel * (l2_norm(ref) + l2_norm(magnitude)) +
                         absolute_allowance * std::sqrt(double(ref.numel()));
  EXPECT_LE(l2_distance(got, ref), allowed) << what << " (relative L2 " << rel_l2(got, ref) << ")";
}

}  // namespace causalconv::test
