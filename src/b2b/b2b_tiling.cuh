// How the fused b2b kernels cut the work, and the row staging they share.
//
// A block owns one (batch b, channel c) pair and walks time tiles of kOutputs
// steps, strided by gridDim.y. Rows are staged in shared memory as fp32 with a
// causal halo before the tile and (backward) a look-ahead halo after it.
#pragma once

#include <algorithm>
#include <cstdint>

namespace causalconv::detail {

template <int kThreadsPerTile, int kOutputsPerThread>
struct B2BTileShape {
  static constexpr int kThreads = kThreadsPerTile;
  static constexpr int kPerThread = kOutputsPerThread;  // outputs per thread, interleaved by kThreads
  static constexpr int kOutputs = kThreadsPerTile * kOutputsPerThread;
};

// Forward: 2048-step tiles, 16 outputs per thread, up to 4 tiles per block (the
// depthwise forward's shape: amortises the per-block prologue). Backward keeps
// about five fp32 rows per tile in shared memory, so it takes 1024-step tiles,
// which keeps the block under the 48 KiB default even at Kp = 32, Km = 256.
using B2BForwardTile = B2BTileShape<128, 16>;
constexpr int64_t kB2BForwardTilesPerBlock = 4;
using B2BBackwardTile = B2BTileShape<128, 8>;
constexpr int64_t kB2BBackwardTilesPerBlock = 2;
// The chunked backward (Kp <= 4, any Km) also takes 1024-step tiles, but as chunks
// of 4 consecutive steps (2 per thread), and walks up to 4 tiles per block: its
// weight-gradient sums stay in registers (or, for wide mixers, in per-thread shared
// slots) until the block ends. Mixers up to 16 taps get unrolled tap loops.
using B2BBackwardChunkTile = B2BTileShape<128, 8>;
constexpr int64_t kB2BBackwardChunkTilesPerBlock = 4;
constexpr int kB2BChunkProjTaps = 4;         // Kp <= 4, zero-padded to 4 taps
constexpr int kB2BChunkMaxMixerWidth = 256;  // Km <= 256 (the envelope)
constexpr int kB2BChunkDwmSegments = 8;      // wide mixers: the tile's steps in 8 runs for dwm
constexpr int64_t kB2BMaxGridX = 2147483647;
constexpr int64_t kB2BMaxGridY = 65535;

struct B2BTiling {
  int64_t tiles;        // tiles per row: ceil(L / kOutputs)
  int64_t tile_blocks;  // grid.y: blocks along a row, each walking tiles strided by it
};

inline B2BTiling make_b2b_tiling(int64_t length, int64_t tile_outputs, int64_t tiles_per_block) {
  B2BTiling t{};
  t.tiles = (length + tile_outputs - 1) / tile_outputs;
  t.tile_blocks = std::min((t.tiles + tiles_per_block - 1) / tiles_per_block, kB2BMaxGridY);
  return t;
}

// Shared-memory floats of the kernels, for widths kp (projection) and km (mixer).
inline int64_t b2b_forward_smem_floats(int64_t kp, int64_t km) {
  const int64_t hp = kp - 1, hm = km - 1, t = B2BForwardTile::kOutputs;
  return 3 * kp + km            // weights
         + (hp + t)             // x row 3c
         + 2 * (hm + hp + t)    // x rows 3c+1, 3c+2
         + (hm + t);            // z
}

inline int64_t b2b_backward_slots(int64_t kp, int64_t km) { return 3 * kp + km + 1; }  // dwp, dwm, dskip

inline int64_t b2b_backward_smem_floats(int64_t kp, int64_t km) {
  const int64_t hp = kp - 1, hm = km - 1, t = B2BBackwardTile::kOutputs, slots = b2b_backward_slots(kp, km);
  return 3 * kp + km                                  // weights
         + 3 * (t + 2 * hp + hm)                      // x rows 3c, 3c+1, 3c+2
         + 2 * (t + hp + hm)                          // dout (then dh), z
         + 3 * (t + hp)                               // p1 (then dp1), p2 (then dp2), dp0
         + (B2BBackwardTile::kThreads / 32) * slots   // per-warp partials
         + slots;                                     // the block's running sums
}

// Shared-memory rows of the chunked backward for a mixer zero-padded in front to
// `mixer_taps` (a multiple of 4; the projection to 4 taps): every halo is a whole
// number of 4-step chunks, so each row starts at a 16-byte boundary with time j0 at an
// index that is a multiple of 4 (chunks read as float4, conflict-free). Hp = 3 and
// Hm = mixer_taps - 1 are the padded filters' halos; Ap = 4 and Am = mixer_taps round
// them up to chunks. `wide`: dwm sums live in shared memory ([segments][mixer_taps]).
struct B2BChunkLayout {
  int am;  // Am: the mixer halo in whole chunks
  int x0_len, x12_len, g_len, z_len, dp_len;
  int x0, x1, x2, g, staged_floats, dh, z, dp, red, dwm, w, floats;
  static constexpr int kAp = 4, kHp = 3, kT = B2BBackwardChunkTile::kOutputs;
  static constexpr int kRegSlots = 3 * 4 + 1 + 16;  // per-warp sums: dwp, dskip (+ dwm when not wide)

  constexpr B2BChunkLayout(int mixer_taps, bool wide)
      : am(mixer_taps),
        x0_len(kAp + kT + kAp + mixer_taps),     // x[3c] over [j0 - Ap, j0 + T + Ap + Am)
        x12_len(mixer_taps + kAp + kT + kAp),    // x[3c+1], x[3c+2] over [j0 - Am - Ap, j0 + T + Ap)
        g_len(kT + kAp + mixer_taps),            // dout and dh over [j0, j0 + T + Ap + Am)
        z_len(mixer_taps + kT + kAp),            // z over [j0 - Am, j0 + T + Ap)
        dp_len(kT + kAp),                        // dp0, dp1, dp2 over [j0, j0 + T + Ap)
        x0(0), x1(x0_len), x2(x1 + x12_len), g(x2 + x12_len),  // staged back to back
        staged_floats(g + g_len), dh(staged_floats), z(dh + g_len), dp(z + z_len), red(dp + 3 * dp_len),
        dwm(red + (B2BBackwardChunkTile::kThreads / 32) * kRegSlots),
        w(dwm + (wide ? kB2BChunkDwmSegments * mixer_taps : 0)),  // [3][4] then [mixer_taps]
        floats(w + 3 * 4 + mixer_taps) {}
};
static_assert(B2BChunkLayout(8, false).z_len == B2BChunkLayout(8, false).g_len, "pass 1 walks z and dh together");

}  // namespace causalconv::detail

// The device part also compiles as host C++ under tests/cpp/cuda_emulation.h, which
// runs the kernels on the CPU (one OS thread per CUDA thread) to check their indexing.
#if defined(__CUDACC__) || defined(CAUSALCONV_CUDA_EMULATION)
#include "common/cuda_math.cuh"

namespace causalconv::detail {

#ifndef CAUSALCONV_CUDA_EMULATION
// The block's dynamic shared memory, as floats.
__device__ __forceinline__ float* b2b_shared_floats() {
  extern __shared__ float b2b_smem[];
  return b2b_smem;
}
#endif

// dst[i] = fp32(row[j0 - before + i]) for i in [0, before + kOutputs + after), zero
// where the time index is outside [0, n). row points at time 0 and has unit stride;
// j0 < n. The tile body is loaded with a fixed, unrolled count per thread so all of
// a thread's loads are in flight at once; a full tile takes no bounds checks.
template <typename Shape, typename T>
__device__ __forceinline__ void b2b_stage_row(float* dst, const T* row, int64_t j0, int64_t n, int before,
                                              int after) {
  const T* r = row + j0;
  const int64_t remaining = n - j0;  // > 0
  float body[Shape::kPerThread];
  if (remaining >= Shape::kOutputs) {
#pragma unroll
    for (int e = 0; e < Shape::kPerThread; ++e) body[e] = to_float(r[threadIdx.x + e * Shape::kThreads]);
  } else {
    const int valid = int(remaining);
#pragma unroll
    for (int e = 0; e < Shape::kPerThread; ++e) {
      const int i = threadIdx.x + e * Shape::kThreads;
      body[e] = i < valid ? to_float(r[i]) : 0.0f;
    }
  }
  for (int i = threadIdx.x; i < before; i += Shape::kThreads) {  // causal halo: zero before t = 0
    const int back = before - i;
    dst[i] = back <= j0 ? to_float(r[-back]) : 0.0f;
  }
  for (int i = threadIdx.x; i < after; i += Shape::kThreads) {  // look-ahead halo: zero from t = n
    const int ahead = Shape::kOutputs + i;
    dst[before + ahead] = ahead < remaining ? to_float(r[ahead]) : 0.0f;
  }
#pragma unroll
  for (int e = 0; e < Shape::kPerThread; ++e) dst[before + threadIdx.x + e * Shape::kThreads] = body[e];
}

// Writes a thread's interleaved outputs v[e] (tile positions threadIdx.x + e * kThreads)
// to row[j0 + position], skipping positions at or beyond n.
template <typename Shape, typename T>
__device__ __forceinline__ void b2b_store_tile(T* row, int64_t j0, int64_t n, const float (&v)[Shape::kPerThread]) {
  T* r = row + j0;
  const int64_t remaining = n - j0;
  if (remaining >= Shape::kOutputs) {
#pragma unroll
    for (int e = 0; e < Shape::kPerThread; ++e) r[threadIdx.x + e * Shape::kThreads] = from_float<T>(v[e]);
  } else {
    const int valid = int(remaining);
#pragma unroll
    for (int e = 0; e < Shape::kPerThread; ++e) {
      const int i = threadIdx.x + e * Shape::kThreads;
      if (i < valid) r[i] = from_float<T>(v[e]);
    }
  }
}

}  // namespace causalconv::detail
#endif

namespace causalconv::detail {

// The tensor-core forward (b2b_forward_tc_kernel.cuh) takes fp16/bf16 with Km >= this:
// narrower mixers stay on the CUDA-core kernel (Km = 7 is Evo 2's short mixer). Kp <= 32.
constexpr int64_t kB2BTcMinMixerWidth = 9;

// Projection widths Kp <= 32 need at most 3 Toeplitz blocks (b2b_forward_tc_kernel.cuh).
constexpr int kB2BTcMaxProjBlocks = 3;

// The tensor-core backward walks up to this many 2048-step tiles per block (one partial
// of the weight gradients per block).
constexpr int64_t kB2BTcBackwardTilesPerBlock = 4;

}  // namespace causalconv::detail
