// The window kernels of the depthwise convolution: channel-first rows of 16-byte vectors,
// dilation 1, K <= 8 (a template argument). Device code only (the launchers stay in
// depthwise_forward.cu / depthwise_backward.cu), so that
// tests/cpp/test_depthwise_window_emulated.cpp can run them as host C++ under
// tests/cpp/cuda_emulation.h.
//
// A warp's span is 32 * kVectors consecutive 16-byte vectors of one row; lane l takes vectors
// e * 32 + l, so every load and store instruction of the warp covers 512 contiguous bytes. The
// forward's grid is one warp per span, the backward's one warp per run of spans; both ordered row
// by row (row = b * C + c).
#pragma once

#include <cstdint>

#include "causal_conv1d/depthwise_kernels.h"
#include "common/async_copy.cuh"
#include "common/cuda_math.cuh"
#include "common/vector_access.cuh"

// Included by one translation unit each (the launchers' .cu file, or an emulated test): the
// anonymous namespace keeps each copy of the kernels to itself.
namespace causalconv::detail {
namespace {

constexpr int kVectorThreads = 128;
constexpr int kMaxWindowWidth = 8;
constexpr int kWarpsPerBlock = kVectorThreads / 32;

// ---- forward (no shared memory) ----
// All of a thread's loads are issued before any compute. The halo of a vector (the K-1
// inputs before it) comes from the lanes holding the vectors before it; only lanes at the
// span's start load theirs from memory.
// Vectors per lane: 4 (64 bytes in flight per thread) for every dtype. For 16-bit, 4 (56
// registers) beat 8 (78 registers) on every case of the H200 bench, most at short rows and K 7
// (session 6).
constexpr int kForwardWindowVectors = 4;

template <typename T>
constexpr int64_t forward_window_span() {
  return int64_t(32) * kForwardWindowVectors * Vec16<T>::kElems;
}

// Spans per row of n steps: with kShifted (rows that may start past a 16-byte boundary, walked
// from that boundary) a row reaches up to kElems - 1 steps further.
template <typename T, bool kShifted>
inline int64_t window_spans_per_row(int64_t n, int64_t span) {
  return (n + (kShifted ? Vec16<T>::kElems - 1 : 0) + span - 1) / span;
}

// kShifted: x's and y's rows need not start 16-byte aligned, but each pair starts the same
// distance past a 16-byte boundary (row_shift16); the span walk starts at that boundary.
template <typename T, int kWidth, bool kShifted = false>
__global__ void __launch_bounds__(kVectorThreads)
    depthwise_forward_window(DepthwiseForwardParams p, int64_t spans_per_row, int64_t spans) {
  constexpr int kVec = Vec16<T>::kElems;
  constexpr int kVectors = kForwardWindowVectors;
  constexpr int kHaloVectors = (kWidth - 1 + kVec - 1) / kVec;
  constexpr int kHalo = kHaloVectors * kVec;
  const int lane = threadIdx.x % 32;
  const int64_t span = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (span >= spans) return;  // whole warps: the shuffles below see full warps
  const int64_t row = div_nonneg(span, spans_per_row);
  const int64_t span_in_row = (span - row * spans_per_row) * forward_window_span<T>();
  const int64_t b = div_nonneg(row, p.channels), c = row - b * p.channels;
  const int64_t n = p.length;
  const T* x = static_cast<const T*>(p.x) + b * p.x_stride[0] + c * p.x_stride[1];
  T* y = static_cast<T*>(p.y) + b * p.y_stride[0] + c * p.y_stride[1];
  const int64_t span_start = kShifted ? span_in_row - row_shift16(x) : span_in_row;

  uint4 raw[kVectors];
#pragma unroll
  for (int e = 0; e < kVectors; ++e)
    raw[e] = load_span_vector<T, kShifted>(x, span_start + int64_t(e * 32 + lane) * kVec, n);
  uint4 before[kHaloVectors];  // lanes below s: the vector s positions before the span's first
#pragma unroll
  for (int s = 1; s <= kHaloVectors; ++s) {
    const int64_t t = span_start + int64_t(lane - s) * kVec;
    if constexpr (kShifted)
      before[s - 1] = lane < s ? load_span_vector<T, true>(x, t, n) : make_uint4(0, 0, 0, 0);
    else
      before[s - 1] = lane < s && t >= 0 ? load_raw16(x + t) : make_uint4(0, 0, 0, 0);
  }

  const T* weight = static_cast<const T*>(p.weight) + c * p.w_stride[0];
  float w[kWidth];
#pragma unroll
  for (int k = 0; k < kWidth; ++k) w[k] = to_float(weight[k * p.w_stride[1]]);
  const float bias = p.bias ? to_float(static_cast<const T*>(p.bias)[c * p.bias_stride]) : 0.0f;

#pragma unroll
  for (int e = 0; e < kVectors; ++e) {
    float win[kHalo + kVec];  // x[t - kHalo + i] for this vector's first step t
#pragma unroll
    for (int s = 1; s <= kHaloVectors; ++s)
      decode16<T>(span_vector_before(raw, e, s, before[s - 1], lane), win + kHalo - s * kVec);
    decode16<T>(raw[e], win + kHalo);
    float out[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      float acc = bias;
#pragma unroll
      for (int k = 0; k < kWidth; ++k) acc = fmaf(w[k], win[kHalo + i - (kWidth - 1 - k)], acc);
      out[i] = p.silu ? silu<T>(acc) : acc;
    }
    const int64_t t = span_start + int64_t(e * 32 + lane) * kVec;
    store_span_vector<T, kShifted>(y, t, n, out);
  }
}

// ---- backward: dx, and per-run weight-gradient partials ----
// A warp owns a run of up to kRingMaxSpansPerRun consecutive spans of one row, each span
// kRingVectors vectors per lane, copied by cp.async into a ring of kRingSlots spans in shared
// memory, kRingAhead spans ahead of the one it computes: its loads overlap its compute, and its
// set-up (two divisions, the addresses, the filter) and warp sums are paid once per run. The halos
// on both sides of a vector are its ring neighbours (the previous span's last vectors, the next
// span's first ones), read by ld.shared. Each thread sums its weight-gradient terms over the run,
// a fixed shuffle tree sums the warp, and lane 0 writes the run's partials; an ordered reduction
// (depthwise_backward.cu) finishes them.
// Measured against a span per warp that loaded its whole span and then computed (H200, session
// 14, bf16 backward kernels): K7 B1 C4096 L8192 65.3 -> 57.3 us, K4 B4 C4096 L8192 196 -> 191,
// K4 B8 C2048 L2048 57.6 -> 51.0. Not taken: the forward on the same ring (lost to its span per
// warp: bf16 K7 39.0 -> 40.0 us, K4 B4 93.4 -> 90.0 % of copy), and copying x and dy by one
// single-tensor helper each (K7 57.3 -> 58.9 us).
constexpr int kRingVectors = 2;
constexpr int kRingSlots = 4;                                  // a power of two
constexpr int kRingAhead = kRingSlots - 1;                     // spans copied ahead of the current one
constexpr int kRingVectorsPerWarp = kRingSlots * kRingVectors * 32;  // per tensor (x, dy)
constexpr int kRingMaxSpansPerRun = 16;
// Runs are shortened (halved) while the grid would have fewer warps than this (the H200 holds
// ~2600 of these warps at once: keep several waves).
constexpr int64_t kRingMinWarps = 16384;

template <typename T>
constexpr int64_t backward_ring_span() {
  return int64_t(32) * kRingVectors * Vec16<T>::kElems;
}

constexpr size_t backward_ring_smem_bytes() { return size_t(kWarpsPerBlock) * 2 * kRingVectorsPerWarp * 16; }

// Spans per run for rows of spans_per_row spans (the host's grid and the partials' layout use it).
inline int64_t backward_ring_spans_per_run(int64_t rows, int64_t spans_per_row) {
  int64_t run = kRingMaxSpansPerRun;
  while (run > 1 && rows * ((spans_per_row + run - 1) / run) < kRingMinWarps) run /= 2;
  return run;
}

#ifndef CAUSALCONV_CUDA_EMULATION
// The block's dynamic shared memory (16-byte aligned).
__device__ __forceinline__ uint4* window_ring_shared() {
  extern __shared__ uint4 window_ring_smem[];
  return window_ring_smem;
}
#endif

// Copies span `span` of a run (vectors from run_start + span * kRingVectors * 32 on) into its ring
// slot; span == spans (the one after the run) only its first kHaloVectors vectors, the run's
// after-halo; nothing past that. Zero past the row's end. A span inside the row takes a path
// without per-vector bounds (every span but a row's last). kShifted: run_start may be negative
// (the row's walk starts at the 16-byte boundary before it); a vector reaching before the row is
// loaded and stored by the thread itself, zero before the row (cp.async can zero only a tail).
template <typename T, int kHaloVectors, bool kShifted = false>
__device__ __forceinline__ void ring_copy_span(uint4* x_ring, uint4* dy_ring, const T* x, const T* dy,
                                               int64_t run_start, int span, int spans, int64_t n, int lane) {
  constexpr int kVec = Vec16<T>::kElems;
  if (span > spans) return;
  const int v0 = span * kRingVectors * 32 + lane;
  const int64_t t0 = run_start + int64_t(v0) * kVec;
  uint4* const x_slot = x_ring + (v0 & (kRingVectorsPerWarp - 1));
  uint4* const dy_slot = dy_ring + (v0 & (kRingVectorsPerWarp - 1));
  if (span < spans && run_start + int64_t(span + 1) * backward_ring_span<T>() <= n &&
      (!kShifted || run_start + int64_t(span) * backward_ring_span<T>() >= 0)) {
#pragma unroll
    for (int e = 0; e < kRingVectors; ++e) {
      cp_async16(x_slot + e * 32, x + t0 + e * 32 * kVec, 16);
      cp_async16(dy_slot + e * 32, dy + t0 + e * 32 * kVec, 16);
    }
    return;
  }
#pragma unroll
  for (int e = 0; e < kRingVectors; ++e) {
    if (span == spans && (e > 0 || lane >= kHaloVectors)) continue;
    const int64_t t = t0 + e * 32 * kVec;
    if (kShifted && t < 0) {
      x_slot[e * 32] = load_span_vector<T, true>(x, t, n);
      dy_slot[e * 32] = load_span_vector<T, true>(dy, t, n);
      continue;
    }
    const int bytes = t >= n ? 0 : n - t >= kVec ? 16 : int(n - t) * int(sizeof(T));
    cp_async16(x_slot + e * 32, bytes ? x + t : x, bytes);
    cp_async16(dy_slot + e * 32, bytes ? dy + t : dy, bytes);
  }
}

// xw[j] = x[t - kHalo + j], j < kHalo + kVec, for the lane's vector e at ring position i: its
// before-halo (vector 0's from the copy taken before the previous span's slot was refilled) and
// the vector itself.
template <typename T, int kHaloVectors>
__device__ __forceinline__ void decode_x_window(const uint4* x_ring, const uint4 (&x_before0)[kHaloVectors], int e,
                                                int i, float* xw) {
  constexpr int kVec = Vec16<T>::kElems, kHalo = kHaloVectors * kVec;
#pragma unroll
  for (int h = 1; h <= kHaloVectors; ++h)
    decode16<T>(e == 0 ? x_before0[h - 1] : x_ring[(i - h) & (kRingVectorsPerWarp - 1)], xw + kHalo - h * kVec);
  decode16<T>(x_ring[i], xw + kHalo);
}

// kShifted: x's, dy's and dx's rows need not start 16-byte aligned, but each triple starts the
// same distance past a 16-byte boundary (row_shift16); the row's walk starts at that boundary.
// kSilu: the call applies silu (a template argument: the silu path's registers would otherwise be
// every call's; session 16, bf16 K4 72 -> 96). With silu, g = dy * silu'(pre) at the K-1 steps
// after each vector (dx's look-ahead) is taken from the lanes that computed it for their own
// vectors (shuffles) instead of every lane recomputing it: kVec g per vector instead of
// kVec + K - 1 (bf16 K4: 8 instead of 11, each two MUFU operations and K FMAs). Only the steps
// after lane 31's last vector of a span (the next span's first) are computed once more, one step
// per lane h < K-1, from the ring's elements. H200, session 17 (side by side with recomputing):
// bf16 B4 C4096 L8192 K4 bias + silu fwd+bwd 0.374 -> 0.350 ms, the calls without silu unchanged.
template <typename T, int kWidth, bool kShifted = false, bool kSilu = false>
__global__ void __launch_bounds__(kVectorThreads)
    depthwise_backward_window(DepthwiseBackwardParams p, int64_t runs_per_row, int64_t runs, int spans_per_run,
                            float* partials) {
  constexpr int kVec = Vec16<T>::kElems;
  constexpr int kHaloVectors = (kWidth - 1 + kVec - 1) / kVec;  // on each side
  constexpr int kHalo = kHaloVectors * kVec;
  constexpr int kMask = kRingVectorsPerWarp - 1;
  const int lane = threadIdx.x % 32;
  const int64_t run = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (run >= runs) return;  // whole warps: the shuffles and __syncwarp below see full warps
  const int64_t row = div_nonneg(run, runs_per_row);
  const int64_t run_in_row = run - row * runs_per_row;
  const int64_t run_offset = run_in_row * spans_per_run * backward_ring_span<T>();
  const int64_t b = div_nonneg(row, p.channels), c = row - b * p.channels;
  const int64_t n = p.length;
  // Where the run's walk starts: kShifted, from the 16-byte boundary before the row.
  const int64_t run_start =
      kShifted ? run_offset - row_shift16(static_cast<const T*>(p.x) + b * p.x_stride[0] + c * p.x_stride[1])
               : run_offset;
  const int64_t spans_left = (n - run_start + backward_ring_span<T>() - 1) / backward_ring_span<T>();
  const int spans = spans_left < spans_per_run ? int(spans_left) : spans_per_run;  // this run's, the row's last may be short
  const T* x = static_cast<const T*>(p.x) + b * p.x_stride[0] + c * p.x_stride[1];
  const T* dy = static_cast<const T*>(p.dy) + b * p.dy_stride[0] + c * p.dy_stride[1];
  T* dx = p.dx ? static_cast<T*>(p.dx) + b * p.dx_stride[0] + c * p.dx_stride[1] : nullptr;
  uint4* const x_ring = window_ring_shared() + (threadIdx.x / 32) * 2 * kRingVectorsPerWarp;
  uint4* const dy_ring = x_ring + kRingVectorsPerWarp;

  // The run's before-halo: x's kHaloVectors vectors before it, at ring positions -kHaloVectors .. -1.
  if (lane >= 32 - kHaloVectors) {
    const int64_t t = run_start - int64_t(32 - lane) * kVec;  // kShifted: never across the row's start
    cp_async16(x_ring + ((lane - 32) & kMask), t >= 0 ? x + t : x, t >= 0 ? 16 : 0);
  }
#pragma unroll
  for (int s = 0; s < kRingAhead; ++s) {
    ring_copy_span<T, kHaloVectors, kShifted>(x_ring, dy_ring, x, dy, run_start, s, spans, n, lane);
    cp_async_commit();
  }

  const T* weight = static_cast<const T*>(p.weight) + c * p.w_stride[0];
  float w[kWidth];
#pragma unroll
  for (int k = 0; k < kWidth; ++k) w[k] = to_float(weight[k * p.w_stride[1]]);
  const float bias = p.bias ? to_float(static_cast<const T*>(p.bias)[c * p.bias_stride]) : 0.0f;

  float dw[kWidth + 1] = {};  // slot kWidth: the bias gradient
#pragma unroll 1
  for (int s = 0; s < spans; ++s) {
    cp_async_wait<kRingAhead - 2>();  // this thread's copies of spans s and s + 1 have landed
    __syncwarp();                     // ... and every lane's
    const int first = (s * kRingVectors * 32 + lane) & kMask;  // ring position of this lane's vector 0
    uint4 x_before0[kHaloVectors];  // vector 0's before-halo, in the previous span's slot
#pragma unroll
    for (int h = 1; h <= kHaloVectors; ++h) x_before0[h - 1] = x_ring[(first - h) & kMask];
    __syncwarp();  // every lane is done with the previous span's slot before it is refilled
    ring_copy_span<T, kHaloVectors, kShifted>(x_ring, dy_ring, x, dy, run_start, s + kRingAhead, spans, n, lane);
    cp_async_commit();

    // kSilu: g of this lane's vectors, and of the K-1 steps after each.
    constexpr int kAfter = kWidth - 1;
    float g_own[kRingVectors][kVec];
    float g_after[kRingVectors][kAfter];
    if constexpr (kSilu) {
#pragma unroll
      for (int e = 0; e < kRingVectors; ++e) {
        const int i = first + e * 32;
        float xw[kHalo + kVec];
        decode_x_window<T>(x_ring, x_before0, e, i, xw);
        decode16<T>(dy_ring[i], g_own[e]);
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          float u = bias;
#pragma unroll
          for (int k = 0; k < kWidth; ++k) u = fmaf(w[k], xw[kHalo + j - (kWidth - 1 - k)], u);
          g_own[e][j] *= silu_derivative<T>(u);
        }
      }
      // The steps after lane 31's last vector: the next span's first (in the ring: spans s and
      // s + 1 have landed), lane h < K-1 taking step h, element by element.
      float g_next_span = 0.0f;
      if (lane < kAfter) {
        constexpr int kElemMask = kRingVectorsPerWarp * kVec - 1;
        const T* x_elems = reinterpret_cast<const T*>(x_ring);
        const int at = (s + 1) * kRingVectors * 32 * kVec + lane;
        float u = bias;
#pragma unroll
        for (int k = 0; k < kWidth; ++k) u = fmaf(w[k], to_float(x_elems[(at - (kWidth - 1 - k)) & kElemMask]), u);
        g_next_span = to_float(reinterpret_cast<const T*>(dy_ring)[at & kElemMask]) * silu_derivative<T>(u);
      }
      // Step h after lane l's vector e lies in the vector d = 1 + h / kVec after it (d = 2 only for
      // fp32 from K6): lane l + d's vector e, or past lane 31 the next e's of lane l + d - 32, or
      // past the span the next span's step (l + d - 32) kVec + h % kVec.
#pragma unroll
      for (int h = 0; h < kAfter; ++h) {
        const int d = 1 + h / kVec, src = (lane + d) & 31;
        float from_src[kRingVectors];
#pragma unroll
        for (int e = 0; e < kRingVectors; ++e)
          from_src[e] = __uint_as_float(__shfl_sync(0xffffffffu, __float_as_uint(g_own[e][h % kVec]), src));
        const int next_span_step = ((lane + d - 32) * kVec + h % kVec) & 31;
        const float next_span = __uint_as_float(__shfl_sync(0xffffffffu, __float_as_uint(g_next_span), next_span_step));
        const bool wraps = lane + d >= 32;
#pragma unroll
        for (int e = 0; e < kRingVectors; ++e)
          g_after[e][h] = !wraps ? from_src[e] : e + 1 < kRingVectors ? from_src[e + 1] : next_span;
      }
    }

#pragma unroll
    for (int e = 0; e < kRingVectors; ++e) {
      const int i = first + e * 32;
      const int64_t t = run_start + (int64_t(s) * kRingVectors * 32 + e * 32 + lane) * kVec;
      float xw[kHalo + kVec];
      decode_x_window<T>(x_ring, x_before0, e, i, xw);
      float g[kVec + kHalo];  // g[t + i]: dy through the activation, zero past the row's end
      if constexpr (!kSilu) {
#pragma unroll
        for (int h = 1; h <= kHaloVectors; ++h) decode16<T>(dy_ring[(i + h) & kMask], g + h * kVec);
        decode16<T>(dy_ring[i], g);
      } else {
#pragma unroll
        for (int j = 0; j < kVec; ++j) g[j] = g_own[e][j];
#pragma unroll
        for (int h = 0; h < kAfter; ++h) g[kVec + h] = g_after[e][h];
      }
      if (dx) {
        float out[kVec];
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          float acc = 0.0f;
#pragma unroll
          for (int k = 0; k < kWidth; ++k) acc = fmaf(w[k], g[j + (kWidth - 1 - k)], acc);
          out[j] = acc;
        }
        store_span_vector<T, kShifted>(dx, t, n, out);
      }
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
#pragma unroll
        for (int k = 0; k < kWidth; ++k) dw[k] = fmaf(g[j], xw[kHalo + j - (kWidth - 1 - k)], dw[k]);
        dw[kWidth] += g[j];
      }
    }
  }
  cp_async_wait<0>();  // no copy outlives the block's shared memory
  if (partials) {
    float* run_partials = partials + ((c * p.batch + b) * runs_per_row + run_in_row) * (kWidth + 1);
#pragma unroll
    for (int k = 0; k <= kWidth; ++k) {
      const float v = warp_sum(dw[k]);
      if (lane == 0) run_partials[k] = v;
    }
  }
}

}  // namespace
}  // namespace causalconv::detail
