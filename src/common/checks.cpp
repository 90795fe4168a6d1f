#include "common/checks.h"


namespace causalconv::detail {

void fail_argument(const char* op, const std::string& arg, const std::string& expected, const std::string& got) {
  throw Error(ErrorKind::invalid_argument,
              std::string(op) + ": " + arg + ": expected " + expected + ", got " + got);
}

void check_tensor(const char* op, const char* arg, const TensorView& t, int rank, Target target) {
  if (t.rank < 0 || t.rank > kMaxRank)  // before anything reads sizes[]
    fail_argument(op, arg, std::to_string(rank) + " dimensions", std::to_string(t.rank) + " dimensions");
  if (target == Target::cuda) {
    if (t.device.kind != DeviceKind::cuda)
      fail_argument(op, arg, "a CUDA tensor (there is no CPU fallback; causalconv.reference runs on CPU)",
                    "a tensor on " + device_name(t.device));
    if (t.dtype != DType::f32 && t.dtype != DType::f16 && t.dtype != DType::bf16)
      fail_argument(op, arg, "float32, float16 or bfloat16 (float64 is served by causalconv.reference)",
                    dtype_name(t.dtype));
  } else {
    if (t.device.kind != DeviceKind::cpu)
      fail_argument(op, arg, "a CPU tensor for the reference", "a tensor on " + device_name(t.device));
    if (t.dtype != DType::f64) fail_argument(op, arg, "float64 for the reference", dtype_name(t.dtype));
  }
  if (t.rank != rank)
    fail_argument(op, arg, std::to_string(rank) + " dimensions",
                  std::to_string(t.rank) + " dimensions " + shape_string(t));
  for (int d = 0; d < t.rank; ++d)
    if (t.sizes[d] < 0) fail_argument(op, arg, "non-negative sizes", shape_string(t));
  if (t.data == nullptr && t.numel() > 0) fail_argument(op, arg, "a valid data pointer", "null");
}

void check_matches(const char* op, const char* arg, const TensorView& t, const char* like_name,
                   const TensorView& like) {
  if (t.dtype != like.dtype)
    fail_argument(op, arg, std::string(dtype_name(like.dtype)) + " (the dtype of " + like_name + ")",
                  dtype_name(t.dtype));
  if (t.device.kind != like.device.kind || t.device.index != like.device.index)
    fail_argument(op, arg, device_name(like.device) + " (the device of " + like_name + ")",
                  device_name(t.device));
}

void check_sizes(const char* op, const char* arg, const TensorView& t, std::initializer_list<int64_t> sizes,
                 const char* layout) {
  bool ok = t.rank == static_cast<int>(sizes.size());
  int d = 0;
  for (int64_t s : sizes) ok = ok && t.sizes[d++] == s;
  if (ok) return;
  std::string want = std::string("shape ") + layout + " = (";
  d = 0;
  for (int64_t s : sizes) want += (d++ ? ", " : "") + std::to_string(s);
  want += sizes.size() == 1 ? ",)" : ")";
  fail_argument(op, arg, want, shape_string(t));
}

void check_range(const char* op, const char* arg, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi)
    fail_argument(op, arg, "a value in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
                  std::to_string(value));
}

void check_unit_time_stride(const char* op, const char* arg, const TensorView& t) {
  if (t.stride(2) != 1 && t.size(2) > 1 && t.numel() > 0)
    fail_argument(op, arg, "unit stride along L (make it contiguous)", "stride " + std::to_string(t.stride(2)));
}

void check_buffer(const char* op, const char* name, size_t needed, const void* data, size_t bytes) {
  if (bytes < needed || (needed > 0 && data == nullptr))
    fail_argument(op, name, "at least " + std::to_string(needed) + " bytes", std::to_string(bytes) + " bytes");
}

void check_workspace(const char* op, size_t needed, const void* data, size_t bytes) {
  check_buffer(op, "workspace", needed, data, bytes);
}

}  // namespace causalconv::detail
