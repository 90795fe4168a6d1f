// Fused b2b_causal_conv1d forward for short filters (Kp <= 4, Km <= 8) on rows of
// 16-byte vectors: byte-bound, no shared memory, no barriers.
//
// A warp owns channel c of batch b and a span of 32 * kB2BShortVectors consecutive
// 16-byte vectors of time; lane l takes vectors e * 32 + l of the span, so every load
// and store instruction of the warp covers 512 contiguous bytes. All loads of the
// three x rows 3c, 3c+1, 3c+2 are issued before any compute. Filters are padded with
// leading zero taps to Kp = 4 and Km = 8 (one instantiation per dtype), so per vector
// starting at time t the kernel needs
//   x1, v (rows 3c+1, 3c+2) over [t - 10, t + kVec)   (z over [t - 7, t + kVec))
//   gate x2 (row 3c)        over [t - 3,  t + kVec)
// The steps before a vector come from the lanes holding the vectors before it
// (span_vector_before); lanes at the span's start load theirs from memory. z for the
// Hm steps before each vector is recomputed from those x windows rather than passed
// between lanes: ~(kVec + 7) / kVec times the projection FMAs, which the byte budget
// affords, and no second round of shuffles. Times before 0 load zero, so p and z are
// zero there as the causal padding asks; steps past the row end load zero and are
// never stored.
#pragma once

#include "b2b/b2b_kernels.h"
#include "common/cuda_math.cuh"
#include "common/vector_access.cuh"

namespace causalconv::detail {

constexpr int kB2BShortMaxProj = 4;   // padded projection width
constexpr int kB2BShortMaxMixer = 8;  // padded mixer width
constexpr int kB2BShortThreads = 128;
// Per row and thread: 3 rows x 32 bytes in flight. 2 vectors (80 registers, 6 blocks/SM) beat 4
// (127 registers, 4 blocks/SM): Km 7 forward 0.128 -> 0.117 ms on the H200 (session 6).
constexpr int kB2BShortVectors = 2;

template <typename T>
constexpr int64_t b2b_short_span() {
  return int64_t(32) * kB2BShortVectors * Vec16<T>::kElems;
}

// A warp's span of one row (vectors e * 32 + lane) and, for lanes below s, the vector s
// positions before the span (zero before time 0).
template <typename T, int kHaloVectors>
__device__ __forceinline__ void b2b_short_load_row(const T* row, int64_t span_start, int64_t n, int lane,
                                                   uint4 (&v)[kB2BShortVectors], uint4 (&before)[kHaloVectors]) {
  constexpr int kVec = Vec16<T>::kElems;
#pragma unroll
  for (int e = 0; e < kB2BShortVectors; ++e) v[e] = load_span_vector(row, span_start + int64_t(e * 32 + lane) * kVec, n);
#pragma unroll
  for (int s = 1; s <= kHaloVectors; ++s) {
    const int64_t t = span_start + int64_t(lane - s) * kVec;  // a multiple of kVec: t < 0 means wholly before 0
    before[s - 1] = lane < s && t >= 0 ? load_raw16(row + t) : make_uint4(0, 0, 0, 0);
  }
}

// win[i] = the row at time t - kHaloVectors * kVec + i for vector e's first step t.
template <typename T, int kHaloVectors>
__device__ __forceinline__ void b2b_short_window(const uint4 (&v)[kB2BShortVectors],
                                                 const uint4 (&before)[kHaloVectors], int e, int lane, float* win) {
  constexpr int kVec = Vec16<T>::kElems;
#pragma unroll
  for (int s = 1; s <= kHaloVectors; ++s)
    decode16<T>(span_vector_before(v, e, s, before[s - 1], lane), win + (kHaloVectors - s) * kVec);
  decode16<T>(v[e], win + kHaloVectors * kVec);
}

// Taps of a filter of runtime width `width` <= kPadded, right-aligned (leading zeros).
template <typename T, int kPadded>
__device__ __forceinline__ void b2b_short_taps(const T* w, int64_t tap_stride, int width, float (&taps)[kPadded]) {
#pragma unroll
  for (int k = 0; k < kPadded; ++k) {
    const int src = k - (kPadded - width);
    taps[k] = src >= 0 ? to_float(w[src * tap_stride]) : 0.0f;
  }
}

template <typename T>
__global__ void __launch_bounds__(kB2BShortThreads, 6)
    b2b_forward_short_kernel(B2BForwardParams p, int64_t spans_per_row, int64_t spans) {
  constexpr int kVec = Vec16<T>::kElems;
  constexpr int kP = kB2BShortMaxProj, kM = kB2BShortMaxMixer;
  constexpr int kZHalo = kM - 1;                                      // z steps before a vector
  constexpr int kXHaloVectors = (kZHalo + kP - 1 + kVec - 1) / kVec;  // x1, v: kZHalo + kP - 1 steps
  constexpr int kGHaloVectors = (kP - 1 + kVec - 1) / kVec;           // gate row: kP - 1 steps
  constexpr int kX = kXHaloVectors * kVec, kG = kGHaloVectors * kVec;  // window offsets of step t
  const int lane = threadIdx.x % 32;
  const int64_t span = int64_t(blockIdx.x) * (kB2BShortThreads / 32) + threadIdx.x / 32;
  if (span >= spans) return;  // whole warps: the shuffles below see full warps
  const int64_t row = div_nonneg(span, spans_per_row);
  const int64_t span_start = (span - row * spans_per_row) * b2b_short_span<T>();
  const int64_t b = div_nonneg(row, p.dim), c = row - b * p.dim;
  const int64_t n = p.length;
  const T* x0 = static_cast<const T*>(p.x) + b * p.x_stride[0] + 3 * c * p.x_stride[1];
  const T* x1 = x0 + p.x_stride[1];
  const T* x2 = x1 + p.x_stride[1];
  T* out = static_cast<T*>(p.out) + b * p.out_stride[0] + c * p.out_stride[1];

  uint4 raw0[kB2BShortVectors], raw1[kB2BShortVectors], raw2[kB2BShortVectors];
  uint4 before0[kGHaloVectors], before1[kXHaloVectors], before2[kXHaloVectors];
  b2b_short_load_row<T, kGHaloVectors>(x0, span_start, n, lane, raw0, before0);
  b2b_short_load_row<T, kXHaloVectors>(x1, span_start, n, lane, raw1, before1);
  b2b_short_load_row<T, kXHaloVectors>(x2, span_start, n, lane, raw2, before2);

  const int kp = int(p.proj_width), km = int(p.mixer_width);
  const T* wp = static_cast<const T*>(p.weight_proj);
  float w0[kP], w1[kP], w2[kP], wm[kM];
  b2b_short_taps<T, kP>(wp + 3 * c * p.wp_stride[0], p.wp_stride[1], kp, w0);
  b2b_short_taps<T, kP>(wp + (3 * c + 1) * p.wp_stride[0], p.wp_stride[1], kp, w1);
  b2b_short_taps<T, kP>(wp + (3 * c + 2) * p.wp_stride[0], p.wp_stride[1], kp, w2);
  b2b_short_taps<T, kM>(static_cast<const T*>(p.weight_mixer) + c * p.wm_stride[0], p.wm_stride[1], km, wm);
  const float skip = to_float(static_cast<const T*>(p.skip_bias)[c * p.skip_stride]);

#pragma unroll
  for (int e = 0; e < kB2BShortVectors; ++e) {
    // z[j] = z at time t - kZHalo + j, from x1 and v at t - kZHalo + j - (kP - 1 - k).
    float z[kZHalo + kVec];
    {
      float a[kX + kVec], v[kX + kVec];
      b2b_short_window<T, kXHaloVectors>(raw1, before1, e, lane, a);
      b2b_short_window<T, kXHaloVectors>(raw2, before2, e, lane, v);
#pragma unroll
      for (int j = 0; j < kZHalo + kVec; ++j) {
        const int first = kX - kZHalo + j - (kP - 1);  // >= 0: kX >= kZHalo + kP - 1
        float pa = 0.0f, pv = 0.0f;
#pragma unroll
        for (int k = 0; k < kP; ++k) {
          pa = fmaf(w1[k], a[first + k], pa);
          pv = fmaf(w2[k], v[first + k], pv);
        }
        z[j] = pa * pv;
      }
    }
    float g[kG + kVec];  // the gate row at t - kG + i
    b2b_short_window<T, kGHaloVectors>(raw0, before0, e, lane, g);
    float y[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      float h = skip * z[kZHalo + i];
#pragma unroll
      for (int k = 0; k < kM; ++k) h = fmaf(wm[k], z[i + k], h);  // z at t + i - (kM - 1 - k)
      float gate = 0.0f;
#pragma unroll
      for (int k = 0; k < kP; ++k) gate = fmaf(w0[k], g[kG + i - (kP - 1) + k], gate);
      y[i] = gate * h;
    }
    const int64_t t = span_start + int64_t(e * 32 + lane) * kVec;
    if (t + kVec <= n)
      store_vec16(out + t, y);
    else if (t < n)
      store_partial(out + t, int(n - t), y);
  }
}

}  // namespace causalconv::detail
