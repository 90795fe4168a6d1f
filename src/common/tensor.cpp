#include "causalconv/tensor.h"


namespace causalconv {

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= sizes[d];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "float32";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::f64: return "float64";
  }
  return "unknown dtype";
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::f64: return 8;
  }
  return 0;
}

std::string device_name(const Device& device) {
  if (device.kind == DeviceKind::cpu) return "cpu";
  return "cuda:" + std::to_string(device.index);
}

std::string shape_string(const TensorView& t) {
  // Plain string building, no iostreams: keeps the core free of locale machinery.
  std::string s = "(";
  for (int d = 0; d < t.rank && d < kMaxRank; ++d) s += (d ? ", " : "") + std::to_string(t.sizes[d]);
  return s + (t.rank == 1 ? ",)" : ")");
}

}  // namespace causalconv
