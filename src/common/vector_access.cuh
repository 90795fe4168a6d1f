// 16-byte global loads and stores of storage-type elements, converted to and from fp32.
// One LDG.128/STG.128 moves 8 bf16/fp16 or 4 fp32 values: fewer memory instructions per
// byte, which is what memory-bound kernels on Hopper run out of first. Raw (undecoded)
// vectors can be kept in registers and passed between lanes with shfl_vec16.
#pragma once

#include <cstdint>
#include <type_traits>

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

// True when every row (the last dim) of tensor a and the same row of tensor b start the same
// number of bytes past a 16-byte boundary: then one walk by 16-byte vectors from that boundary
// (load_span_vector / store_span_vector with kShifted) serves both.
template <typename T>
inline bool vector_shifts_match(const void* a, const int64_t* a_strides, const void* b, const int64_t* b_strides,
                                int count) {
  if (reinterpret_cast<uintptr_t>(a) % 16 != reinterpret_cast<uintptr_t>(b) % 16) return false;
  for (int i = 0; i < count; ++i)
    if ((a_strides[i] - b_strides[i]) % Vec16<T>::kElems != 0) return false;
  return true;
}

__device__ __forceinline__ uint4 load_raw16(const void* src) {
#ifdef CAUSALCONV_CUDA_EMULATION
  emulation::require_aligned16(src);  // as the GPU requires of a 16-byte access
#endif
  return *reinterpret_cast<const uint4*>(src);
}

// Elements [0, valid) of the vector at src, zero beyond (a row's tail; valid <= 0: all zero).
template <typename T>
__device__ __forceinline__ uint4 load_raw_partial(const T* src, int valid) {
  uint4 raw = make_uint4(0, 0, 0, 0);
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < Vec16<T>::kElems; ++i)
    if (i < valid) e[i] = src[i];
  return raw;
}

template <typename T>
__device__ __forceinline__ void decode16(const uint4& raw, float* out) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = pair_half_to_float<T>(words[i], false);
      out[2 * i + 1] = pair_half_to_float<T>(words[i], true);
    }
  } else {
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < Vec16<T>::kElems; ++i) out[i] = to_float(e[i]);
  }
}

__device__ __forceinline__ uint4 shfl_vec16(const uint4& v, int src_lane) {
  return make_uint4(__shfl_sync(0xffffffffu, v.x, src_lane), __shfl_sync(0xffffffffu, v.y, src_lane),
                    __shfl_sync(0xffffffffu, v.z, src_lane), __shfl_sync(0xffffffffu, v.w, src_lane));
}

template <typename T>
__device__ __forceinline__ void load_vec16(const T* src, float* out) {
  decode16<T>(load_raw16(src), out);
}

// One 16-byte store instruction. A plain uint4 assignment is not enough: in the short b2b
// kernels and one window depthwise kernel the compiler split it into four 4-byte stores
// (STG.E x 4, each filling a quarter of its sectors). No "memory" clobber, so the compiler
// may move other memory accesses across it: for outputs a kernel never reads back.
__device__ __forceinline__ void store_raw16(void* dst, const uint4& v) {
#ifdef __CUDA_ARCH__
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
#else
#ifdef CAUSALCONV_CUDA_EMULATION
  emulation::require_aligned16(dst);  // the CPU emulation of the kernels
#endif
  *reinterpret_cast<uint4*>(dst) = v;
#endif
}

// The 16-byte unit at `unit` (aligned) with its bytes outside [lo, hi) zeroed.
__device__ __forceinline__ uint4 masked_unit(const void* unit, int lo, int hi) {
  uint4 v = *reinterpret_cast<const uint4*>(unit);
  uint32_t* word = reinterpret_cast<uint32_t*>(&v);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int from = lo - 4 * k, to = hi - 4 * k;  // kept bytes of word k: [from, to)
    const uint32_t keep_from = from <= 0 ? ~0u : from >= 4 ? 0u : ~0u << (8 * from);
    const uint32_t keep_to = to >= 4 ? ~0u : to <= 0 ? 0u : ~0u >> (8 * (4 - to));
    word[k] &= keep_from & keep_to;
  }
  return v;
}

// The 16 bytes at byte `shift` (0 <= shift < 16) of the 32 bytes lo, hi (lo first): a unit of a row
// read as two 16-byte units of the row's 16-byte grid. Selects, not an indexed array, so the words
// stay in registers.
__device__ __forceinline__ uint4 unit_at_byte(const uint4& lo, const uint4& hi, int shift) {
  const uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  const int words = shift >> 2, bits = 8 * (shift & 3);
  uint32_t a[6], b[5];
#pragma unroll
  for (int i = 0; i < 6; ++i) a[i] = (words & 2) ? w[i + 2] : w[i];
#pragma unroll
  for (int i = 0; i < 5; ++i) b[i] = (words & 1) ? a[i + 1] : a[i];
  auto word = [bits](uint32_t low, uint32_t high) { return uint32_t(((uint64_t(high) << 32) | low) >> bits); };
  return make_uint4(word(b[0], b[1]), word(b[1], b[2]), word(b[2], b[3]), word(b[3], b[4]));
}

// The vector as four 32-bit words.
template <typename T>
__device__ __forceinline__ uint4 encode16(const float* in) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<T, float>)
      w[i] = __float_as_uint(in[i]);
    else
      w[i] = pack2<std::is_same_v<T, __half>>(in[2 * i], in[2 * i + 1]);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

template <typename T>
__device__ __forceinline__ void store_vec16(T* dst, const float* in) {
  store_raw16(dst, encode16<T>(in));
}

template <typename T>
__device__ __forceinline__ void load_partial(const T* src, int valid, float* out) {
  decode16<T>(load_raw_partial(src, valid), out);
}

template <typename T>
__device__ __forceinline__ void store_partial(T* dst, int valid, const float* in) {
#pragma unroll
  for (int i = 0; i < Vec16<T>::kElems; ++i)
    if (i < valid) dst[i] = from_float<T>(in[i]);
}

// ---- warp spans: a warp's 32 * kVectors consecutive vectors of one row, lane l holding
// vectors e * 32 + l (so each load instruction of the warp covers 512 contiguous bytes).
// Neighbouring vectors, which carry a convolution's halo, come from other lanes.

// Raw vector of elements t .. t + kElems - 1 of a row of n, zero outside [0, n). t is a multiple
// of kElems, or with kShifted any value, negative too: rows walked from the 16-byte boundary at or
// before their first element (rows that do not start 16-byte aligned).
template <typename T, bool kShifted = false>
__device__ __forceinline__ uint4 load_span_vector(const T* row, int64_t t, int64_t n) {
  constexpr int kVec = Vec16<T>::kElems;
  if constexpr (!kShifted) {
    if (t + kVec <= n) return load_raw16(row + t);
    return load_raw_partial(row + t, int(t < n ? n - t : 0));
  } else {
    if (t >= 0 && t + kVec <= n) return load_raw16(row + t);
    uint4 raw = make_uint4(0, 0, 0, 0);
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      if (t + i >= 0 && t + i < n) e[i] = row[t + i];
    return raw;
  }
}

// Stores the vector of values at span position t (as load_span_vector's): whole when it lies
// inside the row, only its elements inside [0, n) otherwise.
template <typename T, bool kShifted = false>
__device__ __forceinline__ void store_span_vector(T* row, int64_t t, int64_t n, const float* values) {
  constexpr int kVec = Vec16<T>::kElems;
  if constexpr (!kShifted) {
    if (t + kVec <= n)
      store_vec16(row + t, values);
    else if (t < n)
      store_partial(row + t, int(n - t), values);
  } else {
    if (t >= 0 && t + kVec <= n) {
      store_vec16(row + t, values);
      return;
    }
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      if (t + i >= 0 && t + i < n) row[t + i] = from_float<T>(values[i]);
  }
}

// How far a row starts past the 16-byte boundary before it, in elements (0 when it starts on
// one): walked by 16-byte vectors from that boundary, its vector v holds elements
// kElems * v - shift .. kElems * v - shift + kElems - 1. The row pointer is element-aligned.
template <typename T>
__device__ __forceinline__ int64_t row_shift16(const T* row) {
  return int64_t((reinterpret_cast<uintptr_t>(row) % 16) / sizeof(T));
}

// The vector s positions before vector e of this lane: lane - s of the same e, or
// lane 32 - s + lane of e - 1. Lanes below s at e == 0 take `outside` (loaded by them).
template <int kVectors>
__device__ __forceinline__ uint4 span_vector_before(const uint4 (&v)[kVectors], int e, int s, const uint4& outside,
                                                    int lane) {
  const int src = (lane - s) & 31;
  const uint4 same = shfl_vec16(v[e], src);
  const uint4 earlier = e > 0 ? shfl_vec16(v[e > 0 ? e - 1 : 0], src) : outside;
  return lane >= s ? same : earlier;
}

// ---- quads: 4 consecutive elements (8 bytes of 16-bit values, 16 bytes of fp32), one
// lane's channels in the channel-last kernels (a warp: 128 channels of one time step).
template <typename T>
using QuadRaw = typename std::conditional<sizeof(T) == 4, uint4, uint2>::type;

// src and dst: aligned to the quad's size.
template <typename T>
__device__ __forceinline__ void load_quad(const T* src, float (&out)[4]) {
  const QuadRaw<T> raw = *reinterpret_cast<const QuadRaw<T>*>(src);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) out[i] = to_float(e[i]);
}

template <typename T>
__device__ __forceinline__ void store_quad(T* dst, const float (&in)[4]) {
  QuadRaw<T> raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) e[i] = from_float<T>(in[i]);
  *reinterpret_cast<QuadRaw<T>*>(dst) = raw;
}

}  // namespace causalconv::detail
