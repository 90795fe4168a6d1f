// Fused b2b_causal_conv1d forward for short filters (Kp <= 4, Km <= 8) on rows of
// 16-byte vectors: byte-bound, no barriers. The warp's walk, ring, halos and windows:
// b2b_short_span.cuh. Per step, each lane computes p and z over its own vector once, takes
// the x tails and the Km - 1 z values before it from the lanes before, and stores
// out = gate * (mixer(z) + skip * z); the copies of the next steps are in flight meanwhile. (The
// session-6 kernel recomputed z over the 7 steps before every vector, ~2x its projection
// FMAs, and was issue-bound at 84 instructions per output.) Times before 0 load zero, so p
// and z are zero there as the causal padding asks; steps past the row end load zero and
// are never stored.
#pragma once

#include "b2b/b2b_short_span.cuh"

namespace causalconv::detail {

// kRealigned: rows off the 16-byte grid (odd L; each x row and the output row at its own lead,
// the values past the boundary before it). Lane l copies unit l of each x row's grid, lane 0 the
// unit after the step too, and each lane takes its vector from units l and l + 1 (after a warp
// barrier: they are other lanes' copies). The output row is stored by its own grid: unit l from
// this lane's outputs and the lane before's (lane 0: lane 31's at the previous step, so the
// priming step computes outputs too, over one more lane). The walk runs kVec - 1 steps past the
// row's end (its last grid unit).
//
// At most 96 registers, i.e. 5 or more blocks of 4 warps per SM: unbounded, ptxas gives the
// (4, 8) instantiation up to 114 (4 blocks), and the (3, 7) one 96 where it takes 80 here.
template <typename T, typename W, bool kRealigned = false>
__global__ void __launch_bounds__(kB2BShortThreads, 5)
    b2b_forward_short_kernel(B2BForwardParams p, int64_t spans_per_row, int64_t spans) {
  using S = B2BShortShape<T, W>;
  const int lane = threadIdx.x % 32;
  const int64_t span = int64_t(blockIdx.x) * (kB2BShortThreads / 32) + threadIdx.x / 32;
  if (span >= spans) return;  // whole warps: the shuffles below see full warps
  const int64_t n = p.length;
  const B2BShortSpan w = b2b_short_span_of<T>(span, spans_per_row, p.dim, n + (kRealigned ? S::kVec - 1 : 0));
  const T* x0 = static_cast<const T*>(p.x) + w.b * p.x_stride[0] + 3 * w.c * p.x_stride[1];
  const T* x1 = x0 + p.x_stride[1];
  const T* x2 = x1 + p.x_stride[1];
  T* out = static_cast<T*>(p.out) + w.b * p.out_stride[0] + w.c * p.out_stride[1];
  const int steps = w.steps;
  auto lead_of = [](const T* row) { return kRealigned ? int(row_shift16(row)) : 0; };
  const int lead0 = lead_of(x0), lead1 = lead_of(x1), lead2 = lead_of(x2), lead_out = lead_of(out);
  constexpr int kPrimingLanes = S::kPrimingLanes + (kRealigned ? 1 : 0);

  // Step s's vectors of the three rows into the warp's ring, as one group of copies (s = -1:
  // the priming step, where only the lanes whose tails reach step 0 copy; time before 0 is
  // zero). Past the last step the group is empty (the wait below counts groups).
  using Ring = B2BShortRing<3, kRealigned ? 1 : 0>;
  __shared__ Ring rings[kB2BShortThreads / 32];
  Ring& ring = rings[threadIdx.x / 32];
  auto issue_step = [&](int s, auto interior) {
    constexpr bool kInterior = decltype(interior)::value;
    if (kInterior || s < steps) {
      const int64_t t = w.start + s * S::kStep + int64_t(lane) * S::kVec;  // a multiple of kVec
      const bool wanted = s >= 0 || lane >= 32 - kPrimingLanes;
      auto& stage = ring.v[(s + 1) % kB2BShortStages];
      if constexpr (kRealigned) {
        b2b_short_copy_realigned<T, kInterior>(stage[0], x0, lead0, t, n, wanted, lane);
        b2b_short_copy_realigned<T, kInterior>(stage[1], x1, lead1, t, n, wanted, lane);
        b2b_short_copy_realigned<T, kInterior>(stage[2], x2, lead2, t, n, wanted, lane);
      } else {
        b2b_short_copy<T, kInterior>(&stage[0][lane], x0, t, n, wanted);
        b2b_short_copy<T, kInterior>(&stage[1][lane], x1, t, n, wanted);
        b2b_short_copy<T, kInterior>(&stage[2][lane], x2, t, n, wanted);
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int s = -1; s < kB2BShortStages - 2; ++s) issue_step(s, std::false_type{});
  const B2BShortFilters<W> f = b2b_short_filters<T, W>(p, w.c);

  uint32_t x_carry[3][4] = {};                // lane 0: words of lane 31's vectors at the previous step
  float z_carry[S::kZVectors][S::kVec] = {};  // lanes below s: z of lane 32 - s + lane at the previous step
  uint32_t y_carry[4] = {};                   // kRealigned, lane 0: lane 31's outputs at the previous step

  // Step s of the walk. `interior` (compile time) holds for the steps before b2b_short_interior_end
  // (at most steps - kStages + 1): every lane copies a later step's whole vectors and stores a
  // whole vector, so that copy of the body has no guards.
  auto walk_step = [&](int s, auto interior) {
    constexpr bool kInterior = decltype(interior)::value;
    if constexpr (kRealigned) __syncwarp();  // every lane's reads of the stage refilled next
    issue_step(s + kB2BShortStages - 1, interior);  // into the stage step s - 1 left
    cp_async_wait<kB2BShortStages - 1>();   // step s has landed
    if constexpr (kRealigned) __syncwarp();  // ... every lane's copies of it
    const auto& stage = ring.v[(s + 1) % kB2BShortStages];
    uint4 raw[3];
#pragma unroll
    for (int j = 0; j < 3; ++j) {
      if constexpr (kRealigned) {
        raw[j] = b2b_short_realigned_vector<T>(stage[j], j == 0 ? lead0 : j == 1 ? lead1 : lead2, lane);
      } else {
        raw[j] = stage[j][lane];
      }
    }

    float win[3][S::kXHalo + S::kVec], p1[S::kVec], p2[S::kVec], z[S::kZ + S::kVec], h[S::kVec];
    b2b_short_x_windows<T, W>(raw, x_carry, lane, win);
    b2b_short_projection<T, W::kP>(f.proj[1], win[1], p1);
    b2b_short_projection<T, W::kP>(f.proj[2], win[2], p2);
    b2b_short_mixer<T, W>(f, p1, p2, z_carry, lane, z, h);
    if (!kRealigned && !kInterior && s < 0) return;  // priming: the carries are set

    float gate[S::kVec], y[S::kVec];
    b2b_short_projection<T, W::kP>(f.proj[0], win[0], gate);
#pragma unroll
    for (int i = 0; i < S::kVec; ++i) y[i] = gate[i] * h[i];
    const int64_t t = w.start + s * S::kStep + int64_t(lane) * S::kVec;
    if constexpr (kRealigned) {  // (priming: only the carry)
      b2b_short_store_realigned<T, kInterior>(out, lead_out, t, n, y, y_carry, lane, kInterior || s >= 0);
    } else if constexpr (kInterior) {
      store_vec16(out + t, y);
    } else {
      store_span_vector(out, t, n, y);
    }
  };
  // kRealigned: the copies reach a unit past their step, and the row's first output unit starts
  // before step 0.
  const int interior_end = b2b_short_interior_end<T>(w, n, kRealigned ? S::kVec : 0, 0);  // interior: [0, end)
  int s = -1;
  walk_step(s++, std::false_type{});  // priming
  if (kRealigned && w.start == 0) walk_step(s++, std::false_type{});
#pragma unroll 1
  for (; s < interior_end; ++s) walk_step(s, std::true_type{});
#pragma unroll 1
  for (; s < steps; ++s) walk_step(s, std::false_type{});
}

}  // namespace causalconv::detail
