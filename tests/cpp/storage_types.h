// The storage types the kernels take (float, __half, __nv_bfloat16) in the tests: a double
// rounded to one, widened back, and the DType that names it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "causalconv/tensor.h"

namespace causalconv::test {

inline float round_to(float, double v) { return float(v); }
inline __half round_to(__half, double v) { return __float2half_rn(float(v)); }
inline __nv_bfloat16 round_to(__nv_bfloat16, double v) { return __float2bfloat16_rn(float(v)); }
inline double widen(float v) { return v; }
inline double widen(__half v) { return __half2float(v); }
inline double widen(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::f32; }
template <>
constexpr DType dtype_of<__half>() { return DType::f16; }
template <>
constexpr DType dtype_of<__nv_bfloat16>() { return DType::bf16; }

}  // namespace causalconv::test
