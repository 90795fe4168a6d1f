// Framework-free tensor view: what the core knows about a tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace causalconv {

// Codes are part of the binding ABI (the Python layer passes them as ints).
enum class DType : int { f32 = 0, f16 = 1, bf16 = 2, f64 = 3 };

enum class DeviceKind : int { cpu = 0, cuda = 1 };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;  // CUDA ordinal; 0 for cpu
};

constexpr int kMaxRank = 4;

// A non-owning view: pointer, dtype, device, sizes and strides (in elements).
// Any strides are allowed; kernels that need a layout ask for it by name.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  int rank = 0;
  int64_t sizes[kMaxRank] = {0, 0, 0, 0};
  int64_t strides[kMaxRank] = {0, 0, 0, 0};

  int64_t size(int d) const { return sizes[d]; }
  int64_t stride(int d) const { return strides[d]; }
  int64_t numel() const;
  bool is_contiguous() const;  // row-major, dense
};

const char* dtype_name(DType dtype);
size_t dtype_size(DType dtype);
std::string device_name(const Device& device);
std::string shape_string(const TensorView& t);  // "(2, 3, 5)"

}  // namespace causalconv
