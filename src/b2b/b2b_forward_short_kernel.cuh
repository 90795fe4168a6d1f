// Fused b2b_causal_conv1d forward for short filters (Kp <= 4, Km <= 8) on rows of
// 16-byte vectors: byte-bound, no shared memory, no barriers. The warp's walk, halos and
// windows: b2b_short_span.cuh. Per step, each lane computes p and z over its own vector
// once, takes the x tails and the 7 z values before it from the lanes before, and stores
// out = gate * (mixer(z) + skip * z); the next step's loads are in flight meanwhile. (The
// session-6 kernel recomputed z over the 7 steps before every vector, ~2x its projection
// FMAs, and was issue-bound at 84 instructions per output.) Times before 0 load zero, so p
// and z are zero there as the causal padding asks; steps past the row end load zero and
// are never stored.
#pragma once

#include "b2b/b2b_short_span.cuh"

namespace causalconv::detail {

template <typename T>
__global__ void __launch_bounds__(kB2BShortThreads)
    b2b_forward_short_kernel(B2BForwardParams p, int64_t spans_per_row, int64_t spans) {
  using S = B2BShortShape<T>;
  const int lane = threadIdx.x % 32;
  const int64_t span = int64_t(blockIdx.x) * (kB2BShortThreads / 32) + threadIdx.x / 32;
  if (span >= spans) return;  // whole warps: the shuffles below see full warps
  const B2BShortSpan w = b2b_short_span_of<T>(span, spans_per_row, p.dim, p.length);
  const int64_t n = p.length;
  const T* x0 = static_cast<const T*>(p.x) + w.b * p.x_stride[0] + 3 * w.c * p.x_stride[1];
  const T* x1 = x0 + p.x_stride[1];
  const T* x2 = x1 + p.x_stride[1];
  T* out = static_cast<T*>(p.out) + w.b * p.out_stride[0] + w.c * p.out_stride[1];
  const int steps = w.steps;

  // Step s's vectors of the three rows (s = -1: the priming step, where only the lanes
  // whose tails reach step 0 load; time before 0 is zero).
  uint4 next[3];
  auto load_step = [&](int s) {
    const int64_t t = w.start + s * S::kStep + int64_t(lane) * S::kVec;  // a multiple of kVec
    const bool wanted = t >= 0 && (s >= 0 || lane >= 32 - S::kPrimingLanes);
    next[0] = wanted ? load_span_vector(x0, t, n) : make_uint4(0, 0, 0, 0);
    next[1] = wanted ? load_span_vector(x1, t, n) : make_uint4(0, 0, 0, 0);
    next[2] = wanted ? load_span_vector(x2, t, n) : make_uint4(0, 0, 0, 0);
  };
  load_step(-1);
  const B2BShortFilters f = b2b_short_filters<T>(p, w.c);

  uint32_t x_carry[3][4] = {};                // lane 0: words of lane 31's vectors at the previous step
  float z_carry[S::kZVectors][S::kVec] = {};  // lanes below s: z of lane 32 - s + lane at the previous step

#pragma unroll 1
  for (int s = -1; s < steps; ++s) {
    const uint4 raw[3] = {next[0], next[1], next[2]};
    if (s + 1 < steps) load_step(s + 1);

    float win[3][S::kXHalo + S::kVec], p1[S::kVec], p2[S::kVec], z[S::kZ + S::kVec], h[S::kVec];
    b2b_short_x_windows<T>(raw, x_carry, lane, win);
    b2b_short_projection<T>(f.proj[1], win[1], p1);
    b2b_short_projection<T>(f.proj[2], win[2], p2);
    b2b_short_mixer<T>(f, p1, p2, z_carry, lane, z, h);
    if (s < 0) continue;  // priming: the carries are set

    float gate[S::kVec], y[S::kVec];
    b2b_short_projection<T>(f.proj[0], win[0], gate);
#pragma unroll
    for (int i = 0; i < S::kVec; ++i) y[i] = gate[i] * h[i];
    const int64_t t = w.start + s * S::kStep + int64_t(lane) * S::kVec;
    store_span_vector(out, t, n, y);
  }
}

}  // namespace causalconv::detail
