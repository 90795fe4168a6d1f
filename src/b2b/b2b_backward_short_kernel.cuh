// Fused b2b_causal_conv1d backward for short filters (Kp <= 4, Km <= 8) on rows of 16-byte
// vectors: no barriers. The warp's walk, ring, halos and windows: b2b_short_span.cuh. With
// g = dout, for the lane's vector at time t (see b2b_backward_kernel.cuh for the whole
// derivation):
//   stage A (this step's vectors): p0, p1, p2, z and h as the forward, then dh = g * p0 and
//     dp0 = g * h; the tap sums dwm[k] += dh[t] z[t - (Km-1-k)] (dskip's sum, dh[t] z[t],
//     is the last tap's);
//   stage B (the previous step's vectors, one step behind, because it looks ahead in time):
//     dz = skip * dh + sum_k wm[k] dh[t + Km-1-k] over the vector and the Kp - 1 steps after
//     it (dh up to kP + kM - 2 steps ahead: from the lanes after, the last lanes' from this
//     step's stage A), dp1 = dz * v, dp2 = dz * x1, then dx_j = sum_k wp_j[k] dp_j[t + Kp-1-k] and
//     the tap sums dwp_j[k] += x_j[t] dp_j[t + Kp-1-k].
// So the warp runs stage A over a priming step (the carries), its steps, and a draining step
// (whose first lanes' stage A feeds the last step's look-ahead). The tap sums of the warp's
// span go to one fp32 partial per (row, span), which b2b_weight_grad_reduce sums in a fixed
// order. Times past the row end load zero (g = 0 there, so dh and every dp are zero and
// the sums need no mask) and are never stored.
#pragma once

#include "b2b/b2b_short_span.cuh"

namespace causalconv::detail {

// kRealigned: rows off the 16-byte grid (odd L), as the forward's kRealigned
// (b2b_forward_short_kernel.cuh): x's and dout's rows taken from units l and l + 1 of their grids
// (the priming and draining steps over one more lane each), each dx row stored by its own grid from
// this lane's values and the lane before's. Lane 0 takes lane 31's of the previous step: stage B
// runs over the priming step too (its look-ahead is step 0's stage A), for that carry alone. The
// walk runs kVec - 1 steps past the row's end (the dx grids' last units; spans_per_row counts it).
template <typename T, typename W, bool kRealigned = false>
__global__ void __launch_bounds__(kB2BShortThreads)
    b2b_backward_short_kernel(B2BBackwardParams p, int64_t spans_per_row, int64_t spans, float* partials) {
  using S = B2BShortShape<T, W>;
  constexpr int kVec = S::kVec, kP = S::kP, kM = S::kM;
  constexpr int kDpAhead = kP - 1;                                   // dp steps after a vector (dx)
  constexpr int kDhAhead = kDpAhead + kM - 1;                        // dh steps after it (dz over the dp range)
  constexpr int kDrainLanes = (kDhAhead + kVec - 1) / kVec;          // lanes of the next step they reach
  constexpr int kD = kVec + kDpAhead;                                // the dz / dp range of a vector
  const int lane = threadIdx.x % 32;
  const int64_t span = int64_t(blockIdx.x) * (kB2BShortThreads / 32) + threadIdx.x / 32;
  if (span >= spans) return;  // whole warps: the shuffles below see full warps
  const int64_t n = p.length;
  const B2BShortSpan w = b2b_short_span_of<T>(span, spans_per_row, p.dim, n + (kRealigned ? kVec - 1 : 0));
  const T* x0 = static_cast<const T*>(p.x) + w.b * p.x_stride[0] + 3 * w.c * p.x_stride[1];
  const T* g = static_cast<const T*>(p.dout) + w.b * p.dout_stride[0] + w.c * p.dout_stride[1];
  T* dx0 = static_cast<T*>(p.dx) + w.b * p.dx_stride[0] + 3 * w.c * p.dx_stride[1];
  const int steps = w.steps;
  auto lead_of = [](const T* row) { return kRealigned ? int(row_shift16(row)) : 0; };
  // Leads of the rows read (x0, x1, x2, dout) and written (dx0, dx1, dx2).
  const int in_lead[4] = {lead_of(x0), lead_of(x0 + p.x_stride[1]), lead_of(x0 + 2 * p.x_stride[1]), lead_of(g)};
  const int dx_lead[3] = {lead_of(dx0), lead_of(dx0 + p.dx_stride[1]), lead_of(dx0 + 2 * p.dx_stride[1])};
  constexpr int kPrimingLanes = S::kPrimingLanes + (kRealigned ? 1 : 0);
  constexpr int kDrainCopyLanes = kDrainLanes + (kRealigned ? 1 : 0);

  // Step s's vectors of the three x rows and dout into the warp's ring, as one group of
  // copies: every lane for 0 <= s < steps; the priming step (s = -1) the last lanes, the
  // draining step (s = steps) the first; zero before time 0. Past the draining step the group
  // is empty (the wait below counts groups).
  using Ring = B2BShortRing<4, kRealigned ? 1 : 0>;
  __shared__ Ring rings[kB2BShortThreads / 32];
  Ring& ring = rings[threadIdx.x / 32];
  auto issue_step = [&](int s, auto interior) {
    constexpr bool kInterior = decltype(interior)::value;
    if (kInterior || s <= steps) {
      const int64_t t = w.start + s * S::kStep + int64_t(lane) * kVec;
      const bool wanted = s < 0 ? lane >= 32 - kPrimingLanes : (s < steps || lane < kDrainCopyLanes);
      auto& stage = ring.v[(s + 1) % kB2BShortStages];
      if constexpr (kRealigned) {  // dout too at the priming step: its outputs feed the dx carry
#pragma unroll
        for (int j = 0; j < 4; ++j)
          b2b_short_copy_realigned<T, kInterior>(stage[j], j < 3 ? x0 + j * p.x_stride[1] : g, in_lead[j], t, n,
                                                 wanted, lane);
      } else {
#pragma unroll
        for (int j = 0; j < 3; ++j)
          b2b_short_copy<T, kInterior>(&stage[j][lane], x0 + j * p.x_stride[1], t, n, wanted);
        b2b_short_copy<T, kInterior>(&stage[3][lane], g, t, n, wanted && s >= 0);
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int s = -1; s < kB2BShortStages - 2; ++s) issue_step(s, std::false_type{});
  const B2BShortFilters<W> f = b2b_short_filters<T, W>(p, w.c);

  uint32_t x_carry[3][4] = {};                // lane 0: words of lane 31's vectors at the previous step
  float z_carry[S::kZVectors][S::kVec] = {};  // lanes below s: z of lane 32 - s + lane at the previous step
  // Stage A's results of the previous step, for its stage B.
  float prev_dh[kVec] = {}, prev_dp0[kVec] = {}, prev_p1[kVec] = {}, prev_p2[kVec] = {};
  uint4 prev_x[3] = {};
  float dwp[3][kP] = {}, dwm[kM] = {};  // this lane's tap sums over the span
  uint32_t dx_carry[3][4] = {};         // kRealigned, lane 0: lane 31's dx at the previous stage B

  // Step s of the walk. `interior` (compile time) holds for the steps from 1 (2 at a realigned
  // row's start) before b2b_short_interior_end (at most steps - kStages + 1): there every lane
  // copies a later step's whole vectors, runs both stages and stores whole vectors, so that copy of
  // the body has no guards.
  auto walk_step = [&](int s, auto interior) {
    constexpr bool kInterior = decltype(interior)::value;
    if constexpr (kRealigned) __syncwarp();  // every lane's reads of the stage refilled next
    issue_step(s + kB2BShortStages - 1, interior);  // into the stage step s - 1 left
    cp_async_wait<kB2BShortStages - 1>();   // step s has landed
    if constexpr (kRealigned) __syncwarp();  // ... every lane's copies of it
    const auto& stage = ring.v[(s + 1) % kB2BShortStages];
    uint4 in[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if constexpr (kRealigned)
        in[j] = b2b_short_realigned_vector<T>(stage[j], in_lead[j], lane);
      else
        in[j] = stage[j][lane];
    }
    const uint4 raw[3] = {in[0], in[1], in[2]}, raw_g = in[3];

    // Stage A over this step's vectors.
    float win[3][S::kXHalo + kVec], p0[kVec], p1[kVec], p2[kVec], z[S::kZ + kVec], h[kVec], gv[kVec];
    b2b_short_x_windows<T, W>(raw, x_carry, lane, win);
    b2b_short_projection<T, kP>(f.proj[0], win[0], p0);
    b2b_short_projection<T, kP>(f.proj[1], win[1], p1);
    b2b_short_projection<T, kP>(f.proj[2], win[2], p2);
    b2b_short_mixer<T, W>(f, p1, p2, z_carry, lane, z, h);
    decode16<T>(raw_g, gv);
    float dh[kVec], dp0[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      dh[i] = gv[i] * p0[i];
      dp0[i] = gv[i] * h[i];
    }
    if (kInterior || (s >= 0 && s < steps)) {  // the priming and draining steps' vectors belong to other spans
#pragma unroll
      for (int i = 0; i < kVec; ++i)
#pragma unroll
        for (int k = 0; k < kM; ++k) dwm[k] = fmaf(dh[i], z[S::kZ - S::kZHalo + i + k], dwm[k]);
    }

    // Stage B over the previous step's vectors: r[i] = the value at t + i, i >= kVec from the
    // lanes after (this step's for the last lanes).
    // kRealigned: also over the priming step's vectors (s = 0), for the dx carry alone.
    if (kInterior || s >= (kRealigned ? 0 : 1)) {
      const bool own_vectors = !kRealigned || kInterior || s >= 1;  // not the priming step's
      float dhw[kVec + kDhAhead], p1w[kD], p2w[kD], dp0w[kD];
#pragma unroll
      for (int i = 0; i < kVec + kDhAhead; ++i)
        dhw[i] = i < kVec ? prev_dh[i] : b2b_short_value_after(prev_dh[i % kVec], dh[i % kVec], i / kVec, lane);
#pragma unroll
      for (int i = 0; i < kD; ++i) {
        p1w[i] = i < kVec ? prev_p1[i] : b2b_short_value_after(prev_p1[i % kVec], p1[i % kVec], i / kVec, lane);
        p2w[i] = i < kVec ? prev_p2[i] : b2b_short_value_after(prev_p2[i % kVec], p2[i % kVec], i / kVec, lane);
        dp0w[i] = i < kVec ? prev_dp0[i] : b2b_short_value_after(prev_dp0[i % kVec], dp0[i % kVec], i / kVec, lane);
      }
      float dz[kD];
#pragma unroll
      for (int u = 0; u < kD; ++u) {
        float sum = 0.0f;  // skip * dh[u] is in the last tap
#pragma unroll
        for (int k = 0; k < kM; ++k) sum = fmaf(f.mixer[k], dhw[u + kM - 1 - k], sum);
        dz[u] = sum;
      }
      const int64_t t = w.start + (s - 1) * S::kStep + int64_t(lane) * kVec;
#pragma unroll
      for (int j = 0; j < 3; ++j) {  // one dp row at a time: dp0 = g * h, dp1 = dz * v, dp2 = dz * x1
        float dp[kD], xo[kVec], dxv[kVec];
#pragma unroll
        for (int u = 0; u < kD; ++u) dp[u] = j == 0 ? dp0w[u] : dz[u] * (j == 1 ? p2w[u] : p1w[u]);
        decode16<T>(prev_x[j], xo);
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          float o = 0.0f;
#pragma unroll
          for (int k = 0; k < kP; ++k) {
            o = fmaf(f.proj[j][k], dp[i + kP - 1 - k], o);
            if (own_vectors) dwp[j][k] = fmaf(xo[i], dp[i + kP - 1 - k], dwp[j][k]);
          }
          dxv[i] = o;
        }
        T* const dx_row = dx0 + j * p.dx_stride[1];
        if constexpr (kRealigned) {
          b2b_short_store_realigned<T, kInterior>(dx_row, dx_lead[j], t, n, dxv, dx_carry[j], lane, own_vectors);
        } else if constexpr (kInterior) {
          store_vec16(dx_row + t, dxv);
        } else {
          store_span_vector(dx_row, t, n, dxv);
        }
      }
    }

#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      prev_dh[i] = dh[i];
      prev_dp0[i] = dp0[i];
      prev_p1[i] = p1[i];
      prev_p2[i] = p2[i];
    }
#pragma unroll
    for (int j = 0; j < 3; ++j) prev_x[j] = raw[j];
  };
  // kRealigned: the copies reach a unit past their step, and a row's first dx unit (stage B at s = 1)
  // starts before step 0.
  const int interior_begin = kRealigned && w.start == 0 ? 2 : 1;
  const int interior_end = b2b_short_interior_end<T>(w, n, kRealigned ? kVec : 0, 1);  // interior: [begin, end)
  int s = -1;
#pragma unroll 1
  for (; s < interior_begin; ++s) walk_step(s, std::false_type{});
#pragma unroll 1
  for (; s < interior_end; ++s) walk_step(s, std::true_type{});
#pragma unroll 1
  for (; s <= steps; ++s) walk_step(s, std::false_type{});

  // The span's tap sums: a fixed shuffle tree per slot, lane 0 writes the partial, in the
  // slots of the general kernel's layout (real taps only): dwp rows, dwm, dskip.
  const int kp = int(p.proj_width), km = int(p.mixer_width);
  const int slots = 3 * kp + km + 1;
  float* part = partials + ((w.c * p.batch + w.b) * spans_per_row + (w.start / b2b_short_span<T>())) * slots;
#pragma unroll
  for (int j = 0; j < 3; ++j)
#pragma unroll
    for (int k = 0; k < kP; ++k) {
      const float sum = warp_sum(dwp[j][k]);
      if (lane == 0 && k >= kP - kp) part[j * kp + k - (kP - kp)] = sum;
    }
#pragma unroll
  for (int k = 0; k < kM; ++k) {
    const float sum = warp_sum(dwm[k]);
    if (lane == 0 && k >= kM - km) part[3 * kp + k - (kM - km)] = sum;
    if (lane == 0 && k == kM - 1) part[3 * kp + km] = sum;  // dskip
  }
}

}  // namespace causalconv::detail
