// Fused b2b_causal_conv1d forward for short filters (Kp <= 4, Km <= 8) on rows of
// 16-byte vectors: byte-bound, no shared memory, no barriers.
//
// A warp owns channel c of batch b and a span of kB2BShortSteps * 32 consecutive 16-byte
// vectors of time, which it walks in steps of 32 vectors: at each step lane l takes vector
// l of the step, so every load and store instruction of the warp covers 512 contiguous
// bytes, and the next step's loads are issued before this step's arithmetic. Filters are
// padded with leading zero taps to Kp = 4 and Km = 8 (one instantiation per dtype). Per
// vector starting at time t the kernel needs
//   x rows 3c, 3c+1, 3c+2 over [t - 3, t + kVec)   (the projections)
//   z                     over [t - 7, t + kVec)   (the mixer)
// Each lane computes p and z over its own vector only; the steps before it (the last x
// elements and z values of the vectors before) come by one shuffle from the lanes holding
// them, and lane 0's from what lane 31 held at the previous step (kept in `carry`). So the
// projections run once per step of time (the session-6 kernel recomputed z over the 7
// steps before every vector: ~2x its projection FMAs, and its forward was issue-bound at
// 84 instructions per output). A warp starts with a priming step over the 32 vectors
// before its span, of which only the last lanes' vectors load (their tails are the first
// step's halo). Times before 0 load zero, so p and z are zero there as the causal padding
// asks; steps past the row end load zero and are never stored.
#pragma once

#include "b2b/b2b_kernels.h"
#include "common/cuda_math.cuh"
#include "common/vector_access.cuh"

namespace causalconv::detail {

constexpr int kB2BShortMaxProj = 4;   // padded projection width
constexpr int kB2BShortMaxMixer = 8;  // padded mixer width
constexpr int kB2BShortThreads = 128;
// Steps of 32 vectors per warp: the priming step costs 1 / kB2BShortSteps of the arithmetic.
// 16 beat 8 (bf16 B4 D4096 L8192 Km7 0.314 -> 0.299 ms; B1 0.089 both) and 4 (0.360) on the H200.
constexpr int kB2BShortSteps = 16;

template <typename T>
constexpr int64_t b2b_short_span() {
  return int64_t(32) * kB2BShortSteps * Vec16<T>::kElems;
}

// Word i of a 16-byte vector (i a compile-time constant after unrolling).
__device__ __forceinline__ uint32_t& vec16_word(uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// The value `v` of the lane s positions before this one in time: lane - s of this step,
// or for lanes below s, lane 32 - s + lane of the previous step (`carry`, which this call
// replaces with the value that lane needs at the next step).
template <typename V>
__device__ __forceinline__ V b2b_short_value_before(V v, V& carry, int s, int lane) {
  const V rotated = __shfl_sync(0xffffffffu, v, (lane - s) & 31);
  const V before = lane < s ? carry : rotated;
  carry = rotated;
  return before;
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
__global__ void __launch_bounds__(kB2BShortThreads)
    b2b_forward_short_kernel(B2BForwardParams p, int64_t spans_per_row, int64_t spans) {
  constexpr int kVec = Vec16<T>::kElems;
  constexpr int kP = kB2BShortMaxProj, kM = kB2BShortMaxMixer;
  constexpr int kXHalo = kP - 1;                                   // x steps before a vector
  constexpr int kXFirstWord = (kVec - kXHalo) * int(sizeof(T)) / 4;  // words of the previous vector holding them
  constexpr int kZHalo = kM - 1;                                   // z steps before a vector
  constexpr int kZVectors = (kZHalo + kVec - 1) / kVec;            // vectors holding them (1, or 2 at fp32)
  constexpr int kZ = kZVectors * kVec;                             // z window offset of step t
  constexpr int64_t kStep = 32 * kVec;                             // time steps per warp step
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
  const int64_t steps_to_end = (n - span_start + kStep - 1) / kStep;
  const int steps = steps_to_end < kB2BShortSteps ? int(steps_to_end) : kB2BShortSteps;

  // Step s's vectors of the three rows (s = -1: the priming step, where only the lanes
  // whose tails reach step 0 load; time before 0 is zero).
  uint4 next[3];
  auto load_step = [&](int s) {
    const int64_t t = span_start + s * kStep + int64_t(lane) * kVec;  // a multiple of kVec
    const bool wanted = t >= 0 && (s >= 0 || lane >= 32 - (kZVectors + 1));
    next[0] = wanted ? load_span_vector(x0, t, n) : make_uint4(0, 0, 0, 0);
    next[1] = wanted ? load_span_vector(x1, t, n) : make_uint4(0, 0, 0, 0);
    next[2] = wanted ? load_span_vector(x2, t, n) : make_uint4(0, 0, 0, 0);
  };
  load_step(-1);

  const int kp = int(p.proj_width), km = int(p.mixer_width);
  const T* wp = static_cast<const T*>(p.weight_proj);
  float w[3][kP], wm[kM];
  for (int j = 0; j < 3; ++j) b2b_short_taps<T, kP>(wp + (3 * c + j) * p.wp_stride[0], p.wp_stride[1], kp, w[j]);
  b2b_short_taps<T, kM>(static_cast<const T*>(p.weight_mixer) + c * p.wm_stride[0], p.wm_stride[1], km, wm);
  const float skip = to_float(static_cast<const T*>(p.skip_bias)[c * p.skip_stride]);

  uint32_t x_carry[3][4] = {};         // lane 0: words of lane 31's vectors at the previous step
  float z_carry[kZVectors][kVec] = {};  // lanes below s: z of lane 32 - s + lane at the previous step

#pragma unroll 1
  for (int s = -1; s < steps; ++s) {
    uint4 raw[3] = {next[0], next[1], next[2]};
    if (s + 1 < steps) load_step(s + 1);

    // win[j][i]: row 3c+j at time t - kXHalo + i.
    float win[3][kXHalo + kVec];
#pragma unroll
    for (int j = 0; j < 3; ++j) {
      uint4 before = make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int i = kXFirstWord; i < 4; ++i)
        vec16_word(before, i) = b2b_short_value_before(vec16_word(raw[j], i), x_carry[j][i], 1, lane);
      float prev[kVec];
      decode16<T>(before, prev);
#pragma unroll
      for (int i = 0; i < kXHalo; ++i) win[j][i] = prev[kVec - kXHalo + i];
      decode16<T>(raw[j], win[j] + kXHalo);
    }

    // z[kZ + i]: z at t + i from this vector; z[kZ - kZHalo ..kZ): from the vectors before.
    float z[kZ + kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      float a = 0.0f, v = 0.0f;
#pragma unroll
      for (int k = 0; k < kP; ++k) {
        a = fmaf(w[1][k], win[1][i + k], a);
        v = fmaf(w[2][k], win[2][i + k], v);
      }
      z[kZ + i] = a * v;
    }
#pragma unroll
    for (int sv = 1; sv <= kZVectors; ++sv)
#pragma unroll
      for (int i = 0; i < kVec; ++i)
        if ((kZVectors - sv) * kVec + i >= kZ - kZHalo)  // only the steps the mixer reaches
          z[(kZVectors - sv) * kVec + i] = b2b_short_value_before(z[kZ + i], z_carry[sv - 1][i], sv, lane);
    if (s < 0) continue;  // priming: the carries are set

    float y[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      float h = skip * z[kZ + i];
#pragma unroll
      for (int k = 0; k < kM; ++k) h = fmaf(wm[k], z[kZ - kZHalo + i + k], h);  // z at t + i - (kM - 1 - k)
      float gate = 0.0f;
#pragma unroll
      for (int k = 0; k < kP; ++k) gate = fmaf(w[0][k], win[0][i + k], gate);
      y[i] = gate * h;
    }
    const int64_t t = span_start + s * kStep + int64_t(lane) * kVec;
    if (t + kVec <= n)
      store_vec16(out + t, y);
    else if (t < n)
      store_partial(out + t, int(n - t), y);
  }
}

}  // namespace causalconv::detail
