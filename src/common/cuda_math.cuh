// Element conversions for the kernels: storage types in, fp32 arithmetic.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace causalconv::detail {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Two values as one 32-bit word of 16-bit MMA operands, fp16 or bf16 (the first in the low half).
template <bool kHalf>
__device__ __forceinline__ uint32_t pack2(float a, float b) {
  if constexpr (kHalf) {
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

// One half of such a word (the high one when `high`) as fp32.
template <typename T>
__device__ __forceinline__ float pair_half_to_float(uint32_t pair, bool high) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    // A bf16 is the top half of its fp32: one shift or mask (to_float on the upper half of a
    // word costs two instructions).
    return __uint_as_float(high ? pair & 0xffff0000u : pair << 16);
  } else {
    const uint16_t bits = uint16_t(high ? pair >> 16 : pair & 0xffffu);
    T v;
    memcpy(&v, &bits, 2);
    return to_float(v);
  }
}

// The bf16 hi half of v, as fp32: the fp32 split's operands are bf16_hi(v) and v - bf16_hi(v).
__device__ __forceinline__ float bf16_hi(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// Quotient of non-negative a / b: 32-bit division when both fit (a 64-bit divide is a
// ~100-instruction subroutine; in a per-block prologue it can cost more than the tile).
__device__ __forceinline__ int64_t div_nonneg(int64_t a, int64_t b) {
  if (((a | b) >> 32) == 0) return int64_t(uint32_t(a) / uint32_t(b));
  return a / b;
}

// silu's sigmoid 1 / (1 + e^-v), in the precision the output keeps (T: the op's storage type).
// The division is __fdividef (MUFU.RCP and a multiply, within 2 ulp; 0 once the divisor passes
// 2^126, i.e. v < -87, where silu(v) is below 1e-36) instead of an IEEE division (~12
// instructions and a slow-path branch per value). fp32 outputs are checked per element at ~1e-6,
// so they keep the full-precision expf (1 ulp); 16-bit outputs round to 2^-9 (bf16) or 2^-12
// (fp16) of the value, so they take __expf (one multiply and MUFU.EX2; relative error ~2^-20 at
// |v| <= 8, ~2^-17 at |v| = 100), half the instructions. H200, session 16: with both exact, silu
// took the bf16 B4 C4096 L8192 K4 forward from 0.135 to 0.184 ms; the fast division alone to
// 0.152; this to 0.135.
template <typename T>
__device__ __forceinline__ float sigmoid(float v) {
  const float e = std::is_same_v<T, float> ? expf(-v) : __expf(-v);
  return __fdividef(1.0f, 1.0f + e);
}

template <typename T>
__device__ __forceinline__ float silu(float v) { return v * sigmoid<T>(v); }

// d silu(u) / du = s (1 + u (1 - s)), s = sigmoid(u).
template <typename T>
__device__ __forceinline__ float silu_derivative(float u) {
  const float s = sigmoid<T>(u);
  return s * (1.0f + u * (1.0f - s));
}

// part[0] + part[stride] + ... + part[(parts-1) * stride], added in that order: the fixed order
// of the ordered weight-gradient reductions, which makes their results the same bits run after run.
__device__ __forceinline__ float sum_in_order(const float* part, int64_t parts, int64_t stride) {
  float s = 0.0f;
#pragma unroll 8
  for (int64_t q = 0; q < parts; ++q) s += part[q * stride];
  return s;
}

// Sum over a full warp in a fixed butterfly order (every lane gets it): the same bits run
// after run, as the deterministic weight gradients need.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace causalconv::detail
