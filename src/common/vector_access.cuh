// 16-byte global loads and stores of storage-type elements, converted to and from fp32.
// One LDG.128/STG.128 moves 8 bf16/fp16 or 4 fp32 values: fewer memory instructions per
// byte, which is what memory-bound kernels on Hopper run out of first.
#pragma once

#include <cstdint>

#include "common/cuda_math.cuh"

namespace causalconv::detail {

template <typename T>
struct Vec16 {
  static constexpr int kElems = 16 / int(sizeof(T));
};

// True when every 16-byte vector of a row starting at an element index that is a
// multiple of Vec16<T>::kElems is 16-byte aligned.
template <typename T>
inline bool vector_aligned(const void* base, const int64_t* strides, int count) {
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) return false;
  for (int i = 0; i < count; ++i)
    if (strides[i] % Vec16<T>::kElems != 0) return false;
  return true;
}

template <typename T>
__device__ __forceinline__ void load_vec16(const T* src, float* out) {
  const uint4 raw = *reinterpret_cast<const uint4*>(src);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < Vec16<T>::kElems; ++i) out[i] = to_float(e[i]);
}

template <typename T>
__device__ __forceinline__ void store_vec16(T* dst, const float* in) {
  uint4 raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < Vec16<T>::kElems; ++i) e[i] = from_float<T>(in[i]);
  *reinterpret_cast<uint4*>(dst) = raw;
}

// Elements [0, valid) of a vector at src, zero beyond (valid < kElems: a row's tail).
template <typename T>
__device__ __forceinline__ void load_partial(const T* src, int valid, float* out) {
#pragma unroll
  for (int i = 0; i < Vec16<T>::kElems; ++i) out[i] = i < valid ? to_float(src[i]) : 0.0f;
}

template <typename T>
__device__ __forceinline__ void store_partial(T* dst, int valid, const float* in) {
#pragma unroll
  for (int i = 0; i < Vec16<T>::kElems; ++i)
    if (i < valid) dst[i] = from_float<T>(in[i]);
}

}  // namespace causalconv::detail
