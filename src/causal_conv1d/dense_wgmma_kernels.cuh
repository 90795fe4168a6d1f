// The two Hopper (sm_90a) kernels of dense_wgmma.cu: the convolution and the weight gradients.
// Device code only (the pre-passes, tensor-map encoding and launchers stay in dense_wgmma.cu), so
// that tests/cpp/test_dense_wgmma_emulated.cpp can compile it as host C++ under
// tests/cpp/cuda_emulation.h, with common/sm90_primitives.cuh's emulated TMA, mbarriers and wgmma.
//
//   Y[b, g*D + o, t] = act(bias + sum_{k<K, s<S} W[g*D + o, s, k] * X[b, g*S + s, t - (K-1-k) d])
//
// Convolution: an implicit GEMM per (batch, group): M = D output channels, N = time, reduction =
// K taps x S source channels. CTA tile 128 (o) x 256 (t), three warpgroups: a producer (one
// thread issues the TMA copies) and two consumers (64 rows each: m64n256k16 wgmma, 128 fp32
// accumulators per thread). One reduction stage = one tap k x 64 source channels, both operands
// K-major:
//   A: prepared weights W'[g][k][o][s] (workspace), a 128 x 64 tile (TMA box {64, 128});
//   B: the source channel-last, rows X[b][t][g][s] for t in [t0 + shift(k), +256), 64 channels
//      each (one TMA box {64, 1, 256, 1} of a 4-D map (S, G, L, B)). TMA fills zeros outside
//      [0, L) and past the group's channels: the causal (and dx's look-ahead) padding is free.
// Time must be an outer TMA dimension: a copy's innermost start coordinate has to be a whole
// 16 bytes, and tap shifts are arbitrary. So a channel-first source goes through a pre-pass
// that writes a channel-last copy into the workspace (channel-last 16-bit x with aligned rows
// is read in place). Each tap reads its shifted rows through L2.
//
// fp32: both operands split into bf16 hi + lo, 3 products (hi*hi + hi*lo + lo*hi) into the same
// fp32 accumulators (as dense_tc.cu); the pre-pass writes both copies; a stage carries both.
//
// Convolution CTAs are persistent and walk the tiles; the producer runs ahead into the next
// tile while the consumers store the previous one. Stages: 4 x 48 KiB (16-bit), 2 x 96 KiB (fp32).
#pragma once

#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/cuda_math.cuh"
#include "common/sm90_primitives.cuh"

// Included by one translation unit each (dense_wgmma.cu, or an emulated test): the anonymous
// namespace keeps the kernels and helpers exactly as they were inside dense_wgmma.cu.
namespace causalconv::detail {
namespace {

constexpr int kBM = 128;  // output channels per tile
constexpr int kBN = 256;  // time steps per tile
constexpr int kBK = 64;   // source channels per stage (one 128-byte swizzle row)
constexpr int kThreads = 384;
[[maybe_unused]] constexpr int kConsumerWarps = 8;
constexpr uint32_t kATileBytes = kBM * kBK * 2;          // 16 KiB
constexpr uint32_t kBTileBytes = kBN * kBK * 2;          // 32 KiB

// The stage ring of a warp-specialised kernel whose stages hold kBytesPerCopy of 16-bit
// operands per copy (fp32: two copies, bf16 hi and lo): 192 KiB of stages either way, each
// 1024-byte aligned (the swizzle's period), then a `full` and an `empty` mbarrier per stage.
template <typename T, uint32_t kBytesPerCopy>
struct RingTraits {
  static constexpr bool kSplit = std::is_same_v<T, float>;
  using Mma = std::conditional_t<kSplit, __nv_bfloat16, T>;  // operand type of the MMA
  static constexpr int kCopies = kSplit ? 2 : 1;
  static constexpr int kStages = kSplit ? 2 : 4;
  static constexpr uint32_t kStageBytes = kCopies * kBytesPerCopy;
  static constexpr size_t kSmemBytes = size_t(kStages) * kStageBytes + 1024 + 2 * kStages * sizeof(uint64_t);
};

template <typename T>
using WgTraits = RingTraits<T, kATileBytes + kBTileBytes>;

struct Ring {
  uint8_t* stages;
  uint64_t* full;   // completed by the producer's TMA bytes
  uint64_t* empty;  // completed by the consumers' arrivals
};

// Carves the ring out of dynamic shared memory; thread 0 initialises its barriers and
// prefetches the two tensor maps, then the block synchronises.
template <typename Tr>
__device__ __forceinline__ Ring start_ring(uint8_t* smem_raw, uint32_t empty_arrivals, const CUtensorMap* map_a,
                                           const CUtensorMap* map_b) {
  Ring r;
  r.stages = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  r.full = reinterpret_cast<uint64_t*>(r.stages + Tr::kStages * Tr::kStageBytes);
  r.empty = r.full + Tr::kStages;
#ifdef CAUSALCONV_SM90A
  if (threadIdx.x == 0) {
    sm90::tma_prefetch_descriptor(map_a);
    sm90::tma_prefetch_descriptor(map_b);
    for (int s = 0; s < Tr::kStages; ++s) {
      sm90::mbarrier_init(&r.full[s], 1);
      sm90::mbarrier_init(&r.empty[s], empty_arrivals);
    }
    sm90::mbarrier_init_fence();
  }
  __syncthreads();
#endif
  return r;
}

struct WgParams {
  void* y;
  const void* bias;  // nullptr: none
  int64_t y_stride[3], bias_stride;
  int64_t tiles;
  int32_t batch, groups, out_g, length, width, dilation;
  int32_t c_chunks, o_tiles, t_tiles, o_pad;
  int32_t w_lo_rows;   // row offset of the lo copy in the weight map (fp32)
  int32_t shift_base;  // tap k reads source step t + shift_base + k*d
  bool silu;
};

struct TileCoords {
  int32_t m, tt, g, b;
};

[[maybe_unused]] __device__ __forceinline__ TileCoords tile_coords(const WgParams& p, int64_t tile) {
  TileCoords c;
  c.m = int32_t(tile % p.o_tiles);  // neighbouring CTAs share the x tiles through L2
  const int64_t rest = tile / p.o_tiles;
  c.tt = int32_t(rest % p.t_tiles);
  const int32_t bg = int32_t(rest / p.t_tiles);
  c.b = bg / p.groups;
  c.g = bg - c.b * p.groups;
  return c;
}

// Two neighbouring steps of one output row: one 4- or 8-byte store when the row allows.
template <typename T>
__device__ __forceinline__ void store_two_steps(T* dst, int64_t step_stride, float v0, float v1, bool both,
                                                bool paired) {
  if (paired && both) {
    if constexpr (std::is_same_v<T, float>)
      *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
    else if constexpr (std::is_same_v<T, __half>)
      *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(v0, v1);
    else
      *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(v0, v1);
    return;
  }
  dst[0] = from_float<T>(v0);
  if (both) dst[step_stride] = from_float<T>(v1);
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 1)
    dense_wgmma_conv(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap src_map,
                     const WgParams p) {
#ifdef CAUSALCONV_SM90A
  using Tr = WgTraits<T>;
  using Mma = typename Tr::Mma;
  uint8_t* const smem_raw = sm90::dynamic_shared();
  const Ring ring = start_ring<Tr>(smem_raw, kConsumerWarps, &w_map, &src_map);  // one arrival per consumer warp
  uint8_t* const stages = ring.stages;
  uint64_t* const full = ring.full;
  uint64_t* const empty = ring.empty;

  const int warpgroup = threadIdx.x / 128;

  const int32_t stages_per_tile = p.width * p.c_chunks;
  if (warpgroup == 0) {
    if (threadIdx.x != 0) return;
    int64_t it = 0;  // stage counter across tiles: slot and phase
    for (int64_t tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
      const TileCoords c = tile_coords(p, tile);
      for (int32_t k = 0; k < p.width; ++k) {
        const int32_t w_row = (c.g * p.width + k) * p.o_pad + c.m * kBM;
        const int32_t t_first = c.tt * kBN + p.shift_base + k * p.dilation;
        for (int32_t cc = 0; cc < p.c_chunks; ++cc, ++it) {
          const int slot = int(it % Tr::kStages);
          const uint32_t round = uint32_t(it / Tr::kStages);
          if (round > 0) sm90::mbarrier_wait(&empty[slot], (round - 1) & 1);
          uint8_t* st = stages + slot * Tr::kStageBytes;
          sm90::mbarrier_arrive_expect_tx(&full[slot], Tr::kStageBytes);
          for (int copy = 0; copy < Tr::kCopies; ++copy) {
            sm90::tma_load_2d(st + copy * kATileBytes, &w_map, &full[slot], cc * kBK, w_row + copy * p.w_lo_rows);
            sm90::tma_load_4d(st + Tr::kCopies * kATileBytes + copy * kBTileBytes, &src_map, &full[slot], cc * kBK,
                              c.g, t_first, c.b + copy * p.batch);
          }
        }
      }
    }
    return;
  }

  // Consumers: warpgroup 1 takes rows 0-63 of the tile, warpgroup 2 rows 64-127.
  const int cw = warpgroup - 1;
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
  int64_t it = 0;
  for (int64_t tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
    const TileCoords c = tile_coords(p, tile);
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
    sm90::fence_registers(acc);
    for (int32_t s = 0; s < stages_per_tile; ++s, ++it) {
      const int slot = int(it % Tr::kStages);
      sm90::mbarrier_wait(&full[slot], uint32_t(it / Tr::kStages) & 1);
      const uint32_t st = sm90::smem_u32(stages + slot * Tr::kStageBytes);
      const uint32_t a_hi = st + cw * 64 * 128, b_hi = st + Tr::kCopies * kATileBytes;
      sm90::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        const uint64_t da = sm90::smem_descriptor(a_hi + kk * 32, 16, 1024);
        const uint64_t db = sm90::smem_descriptor(b_hi + kk * 32, 16, 1024);
        sm90::wgmma_m64n256k16<Mma>(acc, da, db, 1);
        if constexpr (Tr::kSplit) {
          const uint64_t da_lo = sm90::smem_descriptor(a_hi + kATileBytes + kk * 32, 16, 1024);
          const uint64_t db_lo = sm90::smem_descriptor(b_hi + kBTileBytes + kk * 32, 16, 1024);
          sm90::wgmma_m64n256k16<Mma>(acc, da, db_lo, 1);
          sm90::wgmma_m64n256k16<Mma>(acc, da_lo, db, 1);
        }
      }
      sm90::wgmma_commit();
      sm90::wgmma_wait<1>();  // the previous stage's MMAs are done: its slot can be refilled
      if (s > 0 && lane == 0) sm90::mbarrier_arrive(&empty[int((it - 1) % Tr::kStages)]);
    }
    sm90::wgmma_wait<0>();
    sm90::fence_registers(acc);
    if (lane == 0) sm90::mbarrier_arrive(&empty[int((it - 1) % Tr::kStages)]);

    // Epilogue: accumulator 4j + 2h + e holds row 16*warp + lane/4 + 8h, column 8j + 2*(lane%4) + e.
    const int32_t t0 = c.tt * kBN + 2 * (lane % 4);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int32_t o = c.m * kBM + cw * 64 + warp * 16 + lane / 4 + 8 * h;
      if (o >= p.out_g) continue;
      const int64_t oc = int64_t(c.g) * p.out_g + o;
      const float bias = p.bias ? to_float(static_cast<const T*>(p.bias)[oc * p.bias_stride]) : 0.0f;
      T* row = static_cast<T*>(p.y) + c.b * p.y_stride[0] + oc * p.y_stride[1];
      const bool paired =
          p.y_stride[2] == 1 && reinterpret_cast<uintptr_t>(row) % (2 * sizeof(T)) == 0;  // t0 is even
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        const int32_t t = t0 + 8 * j;
        if (t >= p.length) continue;
        float v0 = acc[4 * j + 2 * h] + bias, v1 = acc[4 * j + 2 * h + 1] + bias;
        if (p.silu) {
          v0 = silu(v0);
          v1 = silu(v1);
        }
        store_two_steps<T>(row + t * p.y_stride[2], p.y_stride[2], v0, v1, t + 1 < p.length, paired);
      }
    }
  }
#endif
}

// ---- weight gradients ----------------------------------------------------------------
//
//   dW[g*D + o, s, k] = sum_{b, t} G[b, g*D + o, t] * X[b, g*S + s, t - (K-1-k) d],   dbias[o] = sum G[b, o, t]
//
// A GEMM over B x L per (group, 128 outputs, 64 sources, up to 4 taps): M = o, N = s per tap,
// reduction = time in units of 64 steps of one batch row. Per unit:
//   A: G[b][o][t0, +64), 128 x 64, K-major (time is G's innermost axis; t0 is a multiple of 64);
//   B_k: x rows t0 - (K-1-k)d + [0, 64) of the channel-last x staged for the forward, 64 sources
//        each: N-major (tap shifts land on the outer time axis, any value).
// The two consumer warpgroups keep one m64n64 accumulator set per tap (4 x 32 fp32). CTAs of
// one part sum a fixed contiguous range of units and write fp32 partials in dense_generic.cu's
// layout (parts x (C_out*S*K, then C_out)); its ordered reduction makes the result bitwise
// reproducible. In the CTAs of the first source chunk and tap chunk, two idle producer warps
// sum G's rows from the staged tiles (dbias).
constexpr int kDwSteps = 64;
constexpr int kDwTaps = 4;
constexpr uint32_t kDwBBytes = kDwSteps * kBK * 2;  // 8 KiB: one tap's x rows

template <typename T>
using DwTraits = RingTraits<T, kATileBytes + kDwTaps * kDwBBytes>;

struct DwParams {
  float* partials;
  int64_t part_elems;  // C_out*S*K + C_out
  int64_t units;       // batch * t_units
  int32_t batch, groups, out_g, in_g, width, dilation;
  int32_t o_tiles, c_chunks, k_chunks, t_units, parts;
};

// Sum of the 64 16-bit values of one 128-byte row of a staged tile (any order: the swizzle only
// permutes 16-byte chunks within the row).
template <typename Mma>
__device__ __forceinline__ float row_sum(const uint8_t* row) {
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    const uint4 v = reinterpret_cast<const uint4*>(row)[c];
    const Mma* e = reinterpret_cast<const Mma*>(&v);
#pragma unroll
    for (int i = 0; i < 8; ++i) sum += to_float(e[i]);
  }
  return sum;
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 1)
    dense_wgmma_weight_grad(const __grid_constant__ CUtensorMap g_map, const __grid_constant__ CUtensorMap x_map,
                            const DwParams p) {
#ifdef CAUSALCONV_SM90A
  using Tr = DwTraits<T>;
  using Mma = typename Tr::Mma;
  uint8_t* const smem_raw = sm90::dynamic_shared();
  int32_t rest = blockIdx.x;
  const int32_t q = rest % p.k_chunks;
  rest /= p.k_chunks;
  const int32_t c = rest % p.c_chunks;
  rest /= p.c_chunks;
  const int32_t m = rest % p.o_tiles, g = rest / p.o_tiles;
  const int32_t part = blockIdx.y;
  const int taps = min(kDwTaps, p.width - q * kDwTaps);
  const bool bias_tile = c == 0 && q == 0;
  const int64_t u0 = part * p.units / p.parts, u1 = (part + 1) * p.units / p.parts;

  const int warpgroup = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  // Arrivals per stage: the consumer warps, and the dbias warps in the tiles that sum dbias.
  const Ring ring = start_ring<Tr>(smem_raw, kConsumerWarps + (bias_tile ? 2 : 0), &g_map, &x_map);
  uint8_t* const stages = ring.stages;
  uint64_t* const full = ring.full;
  uint64_t* const empty = ring.empty;

  if (warpgroup == 0) {
    if (threadIdx.x == 0) {  // producer
      const uint32_t bytes = Tr::kCopies * (kATileBytes + taps * kDwBBytes);
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t it = u - u0;
        const int slot = int(it % Tr::kStages);
        const uint32_t round = uint32_t(it / Tr::kStages);
        if (round > 0) sm90::mbarrier_wait(&empty[slot], (round - 1) & 1);
        uint8_t* st = stages + slot * Tr::kStageBytes;
        const int32_t b = int32_t(u / p.t_units), t0 = int32_t(u % p.t_units) * kDwSteps;
        sm90::mbarrier_arrive_expect_tx(&full[slot], bytes);
        for (int copy = 0; copy < Tr::kCopies; ++copy) {
          sm90::tma_load_4d(st + copy * kATileBytes, &g_map, &full[slot], t0, m * kBM, g, b + copy * p.batch);
          for (int j = 0; j < taps; ++j) {
            const int32_t k = q * kDwTaps + j;
            sm90::tma_load_4d(st + Tr::kCopies * kATileBytes + (copy * kDwTaps + j) * kDwBBytes, &x_map, &full[slot],
                              c * kBK, g, t0 - (p.width - 1 - k) * p.dilation, b + copy * p.batch);
          }
        }
      }
    } else if (bias_tile && (warp == 1 || warp == 2)) {  // dbias: 64 threads x 2 rows of G
      const int r0 = (threadIdx.x - 32) * 2;
      float sums[2] = {0.0f, 0.0f};
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t it = u - u0;
        const int slot = int(it % Tr::kStages);
        sm90::mbarrier_wait(&full[slot], uint32_t(it / Tr::kStages) & 1);
        const uint8_t* st = stages + slot * Tr::kStageBytes;
        for (int copy = 0; copy < Tr::kCopies; ++copy)
          for (int h = 0; h < 2; ++h) sums[h] += row_sum<Mma>(st + copy * kATileBytes + (r0 + h) * 128);
        __syncwarp();
        if (lane == 0) sm90::mbarrier_arrive(&empty[slot]);
      }
      for (int h = 0; h < 2; ++h) {
        const int32_t o = m * kBM + r0 + h;
        if (o < p.out_g)
          p.partials[part * p.part_elems + int64_t(p.groups) * p.out_g * p.in_g * p.width + int64_t(g) * p.out_g + o] =
              sums[h];
      }
    }
    return;
  }

  const int cw = warpgroup - 1;
  float acc[kDwTaps][32];
#pragma unroll
  for (int j = 0; j < kDwTaps; ++j) {
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[j][i] = 0.0f;
    sm90::fence_registers(acc[j]);
  }
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t it = u - u0;
    const int slot = int(it % Tr::kStages);
    sm90::mbarrier_wait(&full[slot], uint32_t(it / Tr::kStages) & 1);
    const uint32_t st = sm90::smem_u32(stages + slot * Tr::kStageBytes);
    const uint32_t a_hi = st + cw * 64 * 128, b_hi = st + Tr::kCopies * kATileBytes;
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kDwSteps / 16; ++kk) {
      const uint64_t da = sm90::smem_descriptor(a_hi + kk * 32, 16, 1024);
#pragma unroll
      for (int j = 0; j < kDwTaps; ++j) {
        if (j >= taps) break;
        const uint64_t db = sm90::smem_descriptor(b_hi + j * kDwBBytes + kk * 2048, kDwBBytes, 1024);
        sm90::wgmma_m64n64k16_bt<Mma>(acc[j], da, db, 1);
        if constexpr (Tr::kSplit) {
          const uint64_t da_lo = sm90::smem_descriptor(a_hi + kATileBytes + kk * 32, 16, 1024);
          const uint64_t db_lo =
              sm90::smem_descriptor(b_hi + (kDwTaps + j) * kDwBBytes + kk * 2048, kDwBBytes, 1024);
          sm90::wgmma_m64n64k16_bt<Mma>(acc[j], da, db_lo, 1);
          sm90::wgmma_m64n64k16_bt<Mma>(acc[j], da_lo, db, 1);
        }
      }
    }
    sm90::wgmma_commit();
    sm90::wgmma_wait<1>();
    if (it > 0 && lane == 0) sm90::mbarrier_arrive(&empty[int((it - 1) % Tr::kStages)]);
  }
  sm90::wgmma_wait<0>();
#pragma unroll
  for (int j = 0; j < kDwTaps; ++j) sm90::fence_registers(acc[j]);
  if (u1 > u0 && lane == 0) sm90::mbarrier_arrive(&empty[int((u1 - u0 - 1) % Tr::kStages)]);

  // Accumulator 4i + 2h + e of tap j: output row 16*warp + lane/4 + 8h, source 8i + 2*(lane%4) + e.
  float* out = p.partials + part * p.part_elems;
#pragma unroll
  for (int j = 0; j < kDwTaps; ++j) {
    if (j >= taps) break;
    const int32_t k = q * kDwTaps + j;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int32_t o = m * kBM + cw * 64 + warp * 16 + lane / 4 + 8 * h;
      if (o >= p.out_g) continue;
      float* row = out + (int64_t(g) * p.out_g + o) * p.in_g * p.width + k;
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int32_t s = c * kBK + 8 * i + 2 * (lane % 4) + e;
          if (s < p.in_g) row[int64_t(s) * p.width] = acc[j][4 * i + 2 * h + e];
        }
    }
  }
#endif
}

}  // namespace
}  // namespace causalconv::detail
