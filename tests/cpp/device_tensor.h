// Test utility for CUDA tests: a device copy of a HostTensor in a storage type, and
// the GPU skip, shared by the CUDA tests.
//
//   HostTensor x({2, 3, 5});  x.fill_uniform(1);
//   DeviceTensor<__half> dx(x);          // rounds x's values to fp16 in place, copies them up
//   args.x = dx.view();                  // a cuda view with x's strides
//   ...; dx.copy_to_host();              // device values back into x, as doubles
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "causalconv/tensor.h"
#include "host_tensor.h"
#include "storage_types.h"

namespace causalconv::test {

inline bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define REQUIRE_GPU()                                                                       \
  if (!::causalconv::test::have_gpu()) GTEST_SKIP() << "no CUDA GPU visible (cudaGetDeviceCount)"; \
  static_assert(true)

// A device copy of a host tensor in storage type T, with the host tensor's strides
// (padding slots included). The host values are rounded to T in place, so the fp64
// reference sees exactly what the kernel sees.
template <typename T>
class DeviceTensor {
 public:
  explicit DeviceTensor(HostTensor& host) : host_(host) {
    std::vector<T> staged(host.storage().size());
    for (size_t i = 0; i < staged.size(); ++i) {
      staged[i] = round_to(T{}, host.storage()[i]);
      host.storage()[i] = widen(staged[i]);
    }
    EXPECT_EQ(cudaMalloc(&data_, staged.size() * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, staged.data(), staged.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceTensor() { cudaFree(data_); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  TensorView view() const {
    TensorView v = host_.view();
    v.data = data_;
    v.dtype = dtype_of<T>();
    v.device = Device{DeviceKind::cuda, 0};
    return v;
  }

  void copy_to_host() {
    std::vector<T> staged(host_.storage().size());
    EXPECT_EQ(cudaMemcpy(staged.data(), data_, staged.size() * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < staged.size(); ++i) host_.storage()[i] = widen(staged[i]);
  }

  // The raw device bytes (for bitwise comparisons).
  std::vector<unsigned char> bytes() const {
    std::vector<unsigned char> out(host_.storage().size() * sizeof(T));
    EXPECT_EQ(cudaMemcpy(out.data(), data_, out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }

 private:
  HostTensor& host_;
  void* data_ = nullptr;
};

// Caller-owned device scratch for an op's workspace.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) EXPECT_EQ(cudaMalloc(&data_, bytes), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace causalconv::test
