// What the short-filter b2b kernels (Kp <= 4, Km <= 8, rows of 16-byte vectors) share: a
// warp owns channel c of batch b and a span of kB2BShortSteps * 32 consecutive 16-byte
// vectors of time, which it walks in steps of 32 vectors; at each step lane l takes vector
// l of the step, so every copy and store instruction of the warp covers 512 contiguous
// bytes; the steps reach the warp through its ring in shared memory (B2BShortRing), a few
// steps ahead. Filters are padded with leading zero taps to the widths the kernel is
// compiled for (B2BShortWidths: (3, 7) or (4, 8)). The steps of time
// just before a lane's vector (x tails for the projections, z for the mixer) come by a
// shuffle from the lanes holding them, and lane 0's from what the last lanes held at the
// previous step (kept in carries); the steps just after (the backward's anti-causal halos)
// likewise from the lanes after, and the last lanes' from the next step. A warp starts with
// a priming step over the 32 vectors before its span, which sets the carries.
// Forward: b2b_forward_short_kernel.cuh; backward: b2b_backward_short_kernel.cuh.
#pragma once

#include "b2b/b2b_kernels.h"
#include "common/async_copy.cuh"
#include "common/cuda_math.cuh"
#include "common/vector_access.cuh"

namespace causalconv::detail {

constexpr int kB2BShortMaxProj = 4;   // widest projection the short kernels take
constexpr int kB2BShortMaxMixer = 8;  // widest mixer
constexpr int kB2BShortThreads = 128;

// The padded filter widths a short kernel is compiled for. (3, 7), the Evo 2 / StripedHyena 2
// shape, serves every narrower pair too, without the zero taps' FMAs (a quarter of the
// projections', an eighth of the mixer's) and registers that padding it to (4, 8) costs.
template <int kProj, int kMixer>
struct B2BShortWidths {
  static constexpr int kP = kProj, kM = kMixer;
};
using B2BShortNarrow = B2BShortWidths<3, 7>;
using B2BShortWide = B2BShortWidths<kB2BShortMaxProj, kB2BShortMaxMixer>;

// Calls f(B2BShortNarrow{}) or f(B2BShortWide{}): the narrowest instantiation that holds
// proj_width x mixer_width (<= kB2BShortMaxProj x kB2BShortMaxMixer).
template <typename F>
inline void with_b2b_short_widths(int64_t proj_width, int64_t mixer_width, F&& f) {
  if (proj_width <= B2BShortNarrow::kP && mixer_width <= B2BShortNarrow::kM)
    f(B2BShortNarrow{});
  else
    f(B2BShortWide{});
}

// Steps of 32 vectors per warp: the priming step costs 1 / kB2BShortSteps of the arithmetic.
// 16 beat 8 (bf16 B4 D4096 L8192 Km7 forward 0.314 -> 0.299 ms; B1 0.089 both) and 4 (0.360)
// on the H200.
constexpr int kB2BShortSteps = 16;

// A warp's steps reach it through a ring of kB2BShortStages steps in shared memory, filled by
// cp.async: the next kB2BShortStages - 1 steps are in flight, holding no registers, while one
// is computed. (With one step in flight in registers the backward waited on memory half its
// cycles: 8 warps per SM, each a step of ~680 instructions ahead of its loads. The ring took
// it from 220 to 159 us at bf16 B1 D4096 L8192 Km7, the forward from 84 to 73; 3 and 6
// stages measured the same as 4.)
constexpr int kB2BShortStages = 4;

// A warp's ring: step s (from -1, the priming step) in stage (s + 1) % kB2BShortStages, lane
// l's vector of row j at [j][l]. Each lane reads only what it copied itself. kExtra 1: rows
// realigned from their 16-byte grid, where lane l reads units l and l + 1, the unit after the step
// at [j][32].
template <int kRows, int kExtra = 0>
struct B2BShortRing {
  uint4 v[kB2BShortStages][kRows][32 + kExtra];
};

// The lane's vector at time t (a multiple of the vector width) of a row into its ring slot:
// elements [t, min(t + kVec, n)), zeros past the row end, before time 0 or when !wanted. In
// an interior step (whole vectors for every lane) the copy needs no guards.
template <typename T, bool kInterior>
__device__ __forceinline__ void b2b_short_copy(uint4* dst, const T* row, int64_t t, int64_t n, bool wanted) {
  if constexpr (kInterior) {
    cp_async16(dst, row + t, 16);
  } else {
    constexpr int kVec = Vec16<T>::kElems;
    const int64_t valid = !wanted || t < 0 ? 0 : (n - t < kVec ? n - t : kVec);
    cp_async16(dst, valid > 0 ? row + t : row, valid > 0 ? int(valid * int64_t(sizeof(T))) : 0);
  }
}

template <typename T>
constexpr int64_t b2b_short_span() {
  return int64_t(32) * kB2BShortSteps * Vec16<T>::kElems;
}

// A realigned row (off the 16-byte grid) is walked vec - 1 time steps past its end, to its grid's
// last unit. With kB2BShortLastSpanTakesRealignedTail those steps are walked by the row's last span
// (one step of 32 vectors more than kB2BShortSteps at most, b2b_short_span_of) instead of a span of
// their own: at L8191 that span holds 6 time steps (one step of its walk), a third of the warps do
// almost nothing, and the blocks (4 consecutive spans) ran at ~2/3 of their warps (ncu on the H200,
// session 33: achieved occupancy 18.5 % of a theoretical 31 %, bf16 Km7 forward 179 us against 73
// aligned). On since session 34, with kB2BShortInteriorToRowEnd (H100, side by side, bf16 B1 D4096
// L8191 Kp3 Km7): forward 0.181 -> 0.113 ms; the realigned short backward with both 0.33 ms against
// the chunked kernel's 0.38.
constexpr bool kB2BShortLastSpanTakesRealignedTail = true;

// The spans (warps) of a row of n steps, spans of `span` steps, vectors of `vec`.
inline int64_t b2b_short_spans_per_row(int64_t n, int64_t span, int64_t vec, bool realigned,
                                       bool last_span_takes_tail = kB2BShortLastSpanTakesRealignedTail) {
  const int64_t walk = n + (realigned && n > 0 && !last_span_takes_tail ? vec - 1 : 0);
  return (walk + span - 1) / span;
}

// The sizes of a lane's windows for storage type T and padded widths W.
template <typename T, typename W>
struct B2BShortShape {
  static constexpr int kVec = Vec16<T>::kElems;
  static constexpr int kP = W::kP, kM = W::kM;
  static constexpr int kXHalo = kP - 1;                                 // x steps before a vector
  static constexpr int kXFirstWord = (kVec - kXHalo) * int(sizeof(T)) / 4;  // words of the vector before holding them
  static constexpr int kZHalo = kM - 1;                                 // z steps before a vector
  static constexpr int kZVectors = (kZHalo + kVec - 1) / kVec;          // vectors holding them (1, or 2 at fp32)
  static constexpr int kZ = kZVectors * kVec;                           // z window offset of the vector's first step
  static constexpr int64_t kStep = 32 * kVec;                           // time steps per warp step
  // Priming step: the lanes whose vectors' tails reach step 0 (x tails of the z tails' lanes).
  static constexpr int kPrimingLanes = kZVectors + 1;
};

// A span that reaches past its row's end (odd L: every row's last span, the realigned tail's reach
// included) ran all its steps on the guarded path, and the realigned rows' guarded store writes by
// element: at bf16 L8191 half of every row. With kB2BShortInteriorToRowEnd the interior steps run
// to the row's end (b2b_short_interior_end) and a guarded realigned store whose unit lies inside the
// row is one 16-byte store. Written in session 33; on since session 34 (above).
constexpr bool kB2BShortInteriorToRowEnd = true;

// Warp `span` of the grid: its row (b, c), the first time step of its span and its steps of
// 32 vectors up to `length` (fewer than kB2BShortSteps at a row's end; the row's last span walks
// to `length` whatever it takes: one step more for a realigned tail, b2b_short_spans_per_row).
struct B2BShortSpan {
  int64_t b, c, start;
  int steps;
};
template <typename T>
__device__ __forceinline__ B2BShortSpan b2b_short_span_of(int64_t span, int64_t spans_per_row, int64_t dim,
                                                          int64_t length) {
  const int64_t row = div_nonneg(span, spans_per_row);
  const int64_t b = div_nonneg(row, dim);
  const int64_t start = (span - row * spans_per_row) * b2b_short_span<T>();
  constexpr int64_t kStep = 32 * Vec16<T>::kElems;
  const int64_t steps_to_end = (length - start + kStep - 1) / kStep;
  const bool last = span - row * spans_per_row == spans_per_row - 1;
  return {b, row - b * dim, start, steps_to_end < kB2BShortSteps || last ? int(steps_to_end) : kB2BShortSteps};
}

// The end of the span's interior steps (the guard-free copy of the walk's body): a step s is
// interior when the copies issued there, of step s + kB2BShortStages - 1 and `reach` values past
// it, lie inside the row of n steps, and so does its store; none when no step is. Without
// kB2BShortInteriorToRowEnd only a span that lies wholly inside its row has interior steps.
template <typename T>
__device__ __forceinline__ int b2b_short_interior_end(const B2BShortSpan& w, int64_t n, int reach, int none) {
  constexpr int64_t kStep = 32 * Vec16<T>::kElems;
  if (kB2BShortInteriorToRowEnd) {
    const int64_t inside = (n - reach - w.start) / kStep;  // whole steps inside the row with their reach
    return inside >= kB2BShortStages ? int((inside < w.steps ? inside : w.steps) - kB2BShortStages + 1) : none;
  }
  return w.start + int64_t(w.steps) * kStep + reach <= n ? w.steps - kB2BShortStages + 1 : none;
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

// The value of the lane a positions after this one in time, for a lane of the previous step
// (`prev`): lane + a of that step, or for the last a lanes, lane + a - 32 of this step (`cur`).
// One shuffle: a source lane below a serves only the last lanes, so it sends `cur`.
template <typename V>
__device__ __forceinline__ V b2b_short_value_after(V prev, V cur, int a, int lane) {
  return __shfl_sync(0xffffffffu, lane < a ? cur : prev, (lane + a) & 31);
}

// kRealigned (rows off the 16-byte grid, `lead` values past the boundary before them): the lane's
// raw unit at grid offset t of the row's 16-byte grid into stage_row[lane], and lane 0's the unit
// after the step's last into stage_row[32] (B2BShortRing's kExtra); zeros when !wanted.
template <typename T, bool kInterior>
__device__ __forceinline__ void b2b_short_copy_realigned(uint4* stage_row, const T* row, int lead, int64_t t,
                                                         int64_t n, bool wanted, int lane) {
  constexpr int64_t kStep = 32 * Vec16<T>::kElems;
  if (kInterior || wanted)
    cp_async_raw_unit(&stage_row[lane], row - lead, t, lead, n, kInterior);
  else
    cp_async16(&stage_row[lane], row - lead, 0);
  if (lane == 0) cp_async_raw_unit(&stage_row[32], row - lead, t + kStep, lead, n, kInterior);
}

// The lane's vector of a realigned row: units lane and lane + 1 of its stage (after a warp barrier:
// the second is another lane's copy), at the row's lead.
template <typename T>
__device__ __forceinline__ uint4 b2b_short_realigned_vector(const uint4* stage_row, int lead, int lane) {
  return unit_at_byte(stage_row[lane], stage_row[lane + 1], lead * int(sizeof(T)));
}

// kRealigned: a row of outputs stored by its own 16-byte grid. The grid unit at t (steps t - lead ..)
// is the lane before's last `lead` values and this lane's first kVec - lead (lane 0: lane 31's of the
// previous step, in `carry`, which this call replaces). store: false only updates the carry (a
// priming step's lanes are another span's). By element unless kInterior (the whole unit in the row)
// or, with kB2BShortInteriorToRowEnd, the unit found inside the row.
template <typename T, bool kInterior>
__device__ __forceinline__ void b2b_short_store_realigned(T* row, int lead, int64_t t, int64_t n,
                                                          const float (&values)[Vec16<T>::kElems],
                                                          uint32_t (&carry)[4], int lane, bool store) {
  constexpr int kVec = Vec16<T>::kElems;
  uint4 own = encode16<T>(values), before;
#pragma unroll
  for (int i = 0; i < 4; ++i)
    vec16_word(before, i) = b2b_short_value_before(vec16_word(own, i), carry[i], 1, lane);
  if (!kInterior && !store) return;
  const uint4 unit = lead == 0 ? own : unit_at_byte(before, own, (kVec - lead) * int(sizeof(T)));
  const int64_t first = t - lead;
  if (kInterior || (kB2BShortInteriorToRowEnd && first >= 0 && first + kVec <= n)) {
    store_raw16(row + first, unit);
  } else {
    const T* const unit_values = reinterpret_cast<const T*>(&unit);
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      if (first + i >= 0 && first + i < n) row[first + i] = unit_values[i];
  }
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

// Channel c's filters padded to W: the projections of rows 3c, 3c+1, 3c+2, and the mixer
// with skip added to its last tap (z[t]'s): h = mixer(z) + skip * z in one sum, and the
// backward's dz likewise.
template <typename W>
struct B2BShortFilters {
  float proj[3][W::kP], mixer[W::kM];
};
template <typename T, typename W, typename Params>
__device__ __forceinline__ B2BShortFilters<W> b2b_short_filters(const Params& p, int64_t c) {
  B2BShortFilters<W> f;
  const T* wp = static_cast<const T*>(p.weight_proj);
#pragma unroll
  for (int j = 0; j < 3; ++j)
    b2b_short_taps<T, W::kP>(wp + (3 * c + j) * p.wp_stride[0], p.wp_stride[1], int(p.proj_width), f.proj[j]);
  b2b_short_taps<T, W::kM>(static_cast<const T*>(p.weight_mixer) + c * p.wm_stride[0], p.wm_stride[1],
                           int(p.mixer_width), f.mixer);
  f.mixer[W::kM - 1] += to_float(static_cast<const T*>(p.skip_bias)[c * p.skip_stride]);
  return f;
}

// The three x rows of a lane's vector as windows win[j][i] = row 3c+j at time t - kXHalo + i,
// the tails before t from the lane before (x_carry: lane 0's, from lane 31 of the previous step).
template <typename T, typename W>
__device__ __forceinline__ void b2b_short_x_windows(const uint4 (&raw)[3], uint32_t (&x_carry)[3][4], int lane,
                                                    float (&win)[3][B2BShortShape<T, W>::kXHalo + Vec16<T>::kElems]) {
  using S = B2BShortShape<T, W>;
#pragma unroll
  for (int j = 0; j < 3; ++j) {
    uint4 own = raw[j], before = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int i = S::kXFirstWord; i < 4; ++i)
      vec16_word(before, i) = b2b_short_value_before(vec16_word(own, i), x_carry[j][i], 1, lane);
    float prev[S::kVec];
    decode16<T>(before, prev);
#pragma unroll
    for (int i = 0; i < S::kXHalo; ++i) win[j][i] = prev[S::kVec - S::kXHalo + i];
    decode16<T>(own, win[j] + S::kXHalo);
  }
}

// Projection j over the lane's vector: p[i] = row 3c+j's projection at t + i.
template <typename T, int kP>
__device__ __forceinline__ void b2b_short_projection(const float (&w)[kP], const float* win,
                                                     float (&p)[Vec16<T>::kElems]) {
#pragma unroll
  for (int i = 0; i < Vec16<T>::kElems; ++i) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < kP; ++k) s = fmaf(w[k], win[i + k], s);
    p[i] = s;
  }
}

// z = x1 * v over the lane's vector into z[kZ + i], the kZHalo steps before it into
// z[kZ - kZHalo ..kZ) from the lanes before (z_carry); then h = mixer(z) + skip * z (skip
// folded into the mixer's last tap).
template <typename T, typename W, typename S = B2BShortShape<T, W>>
__device__ __forceinline__ void b2b_short_mixer(const B2BShortFilters<W>& f, const float (&p1)[S::kVec],
                                                const float (&p2)[S::kVec], float (&z_carry)[S::kZVectors][S::kVec],
                                                int lane, float (&z)[S::kZ + S::kVec], float (&h)[S::kVec]) {
#pragma unroll
  for (int i = 0; i < S::kVec; ++i) z[S::kZ + i] = p1[i] * p2[i];
#pragma unroll
  for (int sv = 1; sv <= S::kZVectors; ++sv)
#pragma unroll
    for (int i = 0; i < S::kVec; ++i)
      if ((S::kZVectors - sv) * S::kVec + i >= S::kZ - S::kZHalo)  // only the steps the mixer reaches
        z[(S::kZVectors - sv) * S::kVec + i] = b2b_short_value_before(z[S::kZ + i], z_carry[sv - 1][i], sv, lane);
#pragma unroll
  for (int i = 0; i < S::kVec; ++i) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < S::kM; ++k) s = fmaf(f.mixer[k], z[S::kZ - S::kZHalo + i + k], s);  // z at t + i - (kM-1-k)
    h[i] = s;
  }
}

}  // namespace causalconv::detail
