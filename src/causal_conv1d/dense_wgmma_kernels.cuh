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
// is read in place). Each tap reads its shifted rows through L2. A channel-first source with
// aligned rows instead takes dense_wgmma_conv_rows (below), which transposes one window per
// 64-channel chunk in shared memory and reads every tap from it.
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

// Carves the ring out of `smem` (sm90::aligned_dynamic_shared()); thread 0 initialises its
// barriers and prefetches the two tensor maps, then the block synchronises.
template <typename Tr>
__device__ __forceinline__ Ring start_ring(uint8_t* smem, uint32_t empty_arrivals, const CUtensorMap* map_a,
                                           const CUtensorMap* map_b) {
  Ring r;
  r.stages = smem;
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
  // fp32 dense_wgmma_conv_rows only: the source rows it loads itself, and channels per group.
  const void* src;
  int64_t src_stride[3];
  int32_t in_g;
  // dense_wgmma_conv_rows, forward: 1 = the o-tile 0 CTAs also store each window's own 256 steps
  // through keep_map, the channel-last copy of x the weight gradient reads (its pre-pass's layout).
  int32_t keep_x;
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

// Zeroes a warpgroup's wgmma accumulators; the fence keeps the compiler from moving the zeroes
// past the first asynchronous MMA that reads them.
template <int N>
__device__ __forceinline__ void clear_accumulators(float (&acc)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] = 0.0f;
  sm90::fence_registers(acc);
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

// Transposes four words across the lanes of each quad (lanes 4i .. 4i + 3): lane q's w[e] becomes
// lane e's w[q]. Two exchanges, of the low then the high index bit; every lane of the warp calls it.
__device__ __forceinline__ void transpose_quad(uint32_t (&w)[4], int q) {
#pragma unroll
  for (int bit = 1; bit <= 2; bit *= 2) {
    const bool upper = q & bit;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      // Slots base and base + bit differ in `bit`: the lane keeps the one whose bit matches its
      // own and swaps the other with lane q ^ bit's.
      const int base = bit == 1 ? 2 * k : k;
      const uint32_t got = __shfl_xor_sync(0xffffffffu, upper ? w[base] : w[base + bit], bit);
      if (upper)
        w[base] = got;
      else
        w[base + bit] = got;
    }
  }
}

// A consumer warpgroup's 64 x 256 accumulators (rows cw*64.. of tile c) + bias, activation,
// stored into y. Accumulator 4j + 2h + e holds row 16*warp + lane/4 + 8h, column 8j + 2*(lane%4) + e.
// 16-bit y with 16-byte aligned rows: a quad's four pairs of steps 8j .. 8j + 7 go to one lane
// (transpose_quad), one 16-byte store each (session 27: two-step stores wrote every 32-byte
// sector in two halves, twice the L2 write requests; ncu).
template <typename T>
__device__ __forceinline__ void store_conv_tile(const WgParams& p, const TileCoords& c, const float (&acc)[128],
                                                int cw) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32, q = lane % 4;
  const int32_t t0 = c.tt * kBN + 2 * q;
  // The same for every row of the call, so every lane of a warp takes the same branch (shuffles).
  const bool rows16 = sizeof(T) == 2 && p.y_stride[2] == 1 && reinterpret_cast<uintptr_t>(p.y) % 16 == 0 &&
                      p.y_stride[1] % 8 == 0 && p.y_stride[0] % 8 == 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int32_t o = c.m * kBM + cw * 64 + warp * 16 + lane / 4 + 8 * h;
    const bool live = o < p.out_g;
    const int64_t oc = int64_t(c.g) * p.out_g + o;
    const float bias = live && p.bias ? to_float(static_cast<const T*>(p.bias)[oc * p.bias_stride]) : 0.0f;
    T* row = static_cast<T*>(p.y) + c.b * p.y_stride[0] + oc * p.y_stride[1];
    auto value = [&](int j, int e) {
      const float v = acc[4 * j + 2 * h + e] + bias;
      return p.silu ? silu<T>(v) : v;
    };
    if (rows16) {
#pragma unroll
      for (int a = 0; a < kBN / 32; ++a) {
        uint32_t w[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) w[e] = pack2<std::is_same_v<T, __half>>(value(4 * a + e, 0), value(4 * a + e, 1));
        transpose_quad(w, q);  // w[e]: steps 2e, 2e + 1 of group 4a + q
        const int32_t t = c.tt * kBN + 8 * (4 * a + q);
        if (!live || t >= p.length) continue;
        if (t + 8 <= p.length) {
          *reinterpret_cast<uint4*>(row + t) = make_uint4(w[0], w[1], w[2], w[3]);
        } else {  // rows with a pitch past L
          auto* bits = reinterpret_cast<uint16_t*>(row + t);
#pragma unroll
          for (int e = 0; e < 8; ++e)
            if (t + e < p.length) bits[e] = uint16_t(w[e / 2] >> (16 * (e % 2)));
        }
      }
      continue;
    }
    if (!live) continue;
    const bool paired = p.y_stride[2] == 1 && reinterpret_cast<uintptr_t>(row) % (2 * sizeof(T)) == 0;  // t0 is even
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      const int32_t t = t0 + 8 * j;
      if (t >= p.length) continue;
      store_two_steps<T>(row + t * p.y_stride[2], p.y_stride[2], value(j, 0), value(j, 1), t + 1 < p.length, paired);
    }
  }
}

// One reduction stage's MMAs into a consumer warpgroup's 64 x 256 accumulators: A at `a` (the
// warpgroup's 64 rows), B at `b`, both K-major over kBK reduction values; fp32 (kSplit): the lo
// copies kATileBytes / b_lo bytes further, three products per step. Committed as one group.
template <typename Mma, bool kSplit>
__device__ __forceinline__ void conv_stage_mma(float (&acc)[128], uint32_t a, uint32_t b, uint32_t b_lo) {
  sm90::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kBK / 16; ++kk) {
    const uint64_t da = sm90::smem_descriptor(a + kk * 32, 16, 1024);
    const uint64_t db = sm90::smem_descriptor(b + kk * 32, 16, 1024);
    sm90::wgmma_m64n256k16<Mma>(acc, da, db, 1);
    if constexpr (kSplit) {
      const uint64_t da_lo = sm90::smem_descriptor(a + kATileBytes + kk * 32, 16, 1024);
      const uint64_t db_lo = sm90::smem_descriptor(b + b_lo + kk * 32, 16, 1024);
      sm90::wgmma_m64n256k16<Mma>(acc, da, db_lo, 1);
      sm90::wgmma_m64n256k16<Mma>(acc, da_lo, db, 1);
    }
  }
  sm90::wgmma_commit();
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 1)
    dense_wgmma_conv(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap src_map,
                     const WgParams p) {
#ifdef CAUSALCONV_SM90A
  using Tr = WgTraits<T>;
  using Mma = typename Tr::Mma;
  // One empty arrival per consumer warp.
  const Ring ring = start_ring<Tr>(sm90::aligned_dynamic_shared(), kConsumerWarps, &w_map, &src_map);
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
  const int lane = threadIdx.x % 32;
  int64_t it = 0;
  for (int64_t tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
    const TileCoords c = tile_coords(p, tile);
    float acc[128];
    clear_accumulators(acc);
    for (int32_t s = 0; s < stages_per_tile; ++s, ++it) {
      const int slot = int(it % Tr::kStages);
      sm90::mbarrier_wait(&full[slot], uint32_t(it / Tr::kStages) & 1);
      const uint32_t st = sm90::smem_u32(stages + slot * Tr::kStageBytes);
      conv_stage_mma<Mma, Tr::kSplit>(acc, st + cw * 64 * 128, st + Tr::kCopies * kATileBytes, kBTileBytes);
      sm90::wgmma_wait<1>();  // the previous stage's MMAs are done: its slot can be refilled
      if (s > 0 && lane == 0) sm90::mbarrier_arrive(&empty[int((it - 1) % Tr::kStages)]);
    }
    sm90::wgmma_wait<0>();
    sm90::fence_registers(acc);
    if (lane == 0) sm90::mbarrier_arrive(&empty[int((it - 1) % Tr::kStages)]);

    store_conv_tile<T>(p, c, acc, cw);
  }
#endif
}

// ---- the convolution from channel-first rows ------------------------------------------
//
// The same implicit GEMM, with the source read where it lies: (B, C, L) rows, time innermost,
// 16-byte aligned. No pre-pass: per (tile, 64-channel chunk) three warps of the producer
// warpgroup build a channel-last window of kWinSteps steps x 64 channels in shared memory
// (the window starts at the tile's first step plus shift_base, rounded down to 8), and every
// tap's B operand is that window read from row off0 + k*d: a descriptor start inside the
// window (any row: the swizzle follows absolute addresses). So x crosses HBM and L2 once per
// chunk instead of once per tap, and no channel-last copy is written to HBM.
//  * 16-bit: lane 0 of the first builder warp copies the window as kWinBoxes TMA boxes {64
//    steps, 64 channels} (time innermost: each box starts on a whole 16 bytes) into a raw
//    buffer; the three warps transpose it (ldmatrix.trans + stmatrix: 32 channels x 8 steps per pair,
//    both sides conflict-free under the 128-byte swizzle).
//  * fp32 source rows (TS = float: x in fp32, or the fp32 gradient through silu for a 16-bit
//    dx): the three warps load the rows themselves (a lane: two channels x 8 steps, four
//    16-byte loads) and store channel pairs into the window (a warp writes one whole 128-byte
//    row per store): fp32 (T = float) split into bf16 hi and lo windows, three products per
//    reduction step as dense_wgmma_conv; a 16-bit T rounded to it.
// The weights (A) keep their own ring, one stage per (chunk, tap), filled by the producer thread.
// Requires off0 + (K-1)d + 256 <= kWinSteps, off0 = shift_base - floor8(shift_base).
constexpr int kWinBoxes = 5;
constexpr int kWinSteps = kWinBoxes * 64;                      // 320
constexpr uint32_t kRawBoxBytes = 64 * kBK * 2;                // 8 KiB: 64 channels x 64 steps (16-bit)
constexpr uint32_t kWinBytes = kWinSteps * kBK * 2;            // 40 KiB per 16-bit copy, either orientation
constexpr int kTransposeWarps = 3;                             // warps 1-3 of the producer warpgroup

// Shared memory of dense_wgmma_conv_rows<T, TS>: the weight ring, the raw TMA window (16-bit
// sources), the channel-last windows (fp32: hi and lo), then the mbarriers. 16-bit: weights
// 4 x 16 KiB, one raw slot, three windows (224 KiB). The windows are what the consumers wait for:
// a window slot frees only when its chunk's MMAs are done, so a third slot gives the builders a
// whole chunk more to build the next one; one raw slot is enough because a builder warp issues
// the next chunk's boxes as soon as the last ones are transposed. (Measured on the H200, session
// 5: this layout 0.324 ms on the bf16 seed forward; two windows + two raw slots 0.337; two
// windows, one raw slot and 6 weight stages 0.350; docs/performance.md.)
template <typename T, typename TS = T>
struct RowTraits {
  static constexpr bool kSplit = std::is_same_v<T, float>;
  using Mma = std::conditional_t<kSplit, __nv_bfloat16, T>;
  static constexpr int kCopies = kSplit ? 2 : 1;
  static constexpr int kAStages = kSplit ? 2 : 4;
  static constexpr uint32_t kAStageBytes = kCopies * kATileBytes;
  static constexpr int kRawSlots = std::is_same_v<TS, float> ? 0 : 1;  // fp32 rows: the builders load them
  static constexpr uint32_t kWindowBytes = kCopies * kWinBytes;       // per window slot
  static constexpr int kWindows = kSplit ? 2 : 3;                     // channel-last windows
  static constexpr int kBarriers = 2 * kAStages + 2 * kRawSlots + 2 * kWindows;
  static constexpr size_t kSmemBytes = size_t(kAStages) * kAStageBytes + size_t(kRawSlots) * kWinBytes +
                                       size_t(kWindows) * kWindowBytes + 1024 + kBarriers * sizeof(uint64_t);
  static_assert(kSmemBytes <= 227 * 1024, "fits the opt-in shared memory of an SM");
};

// The window's first step for tile step t0 (a multiple of 256): t0 + shift_base rounded down to 8.
__device__ __forceinline__ int32_t window_start(int32_t t0, int32_t shift_base) {
  const int32_t s = t0 + shift_base;
  return s >= 0 ? s & ~7 : -((-s + 7) & ~7);
}

// The window row tap 0 reads (off0, in [0, 8)): the same for every tile, as tiles start at
// multiples of 256.
__device__ __forceinline__ int32_t window_offset(int32_t shift_base) {
  return shift_base - window_start(0, shift_base);
}

// Transposes the first 8 * octs steps x 64 channels of raw TMA boxes (rows = channels, 64 steps
// per 8 KiB box, 128-byte swizzle) at `src` into step rows of 64 channels at `dst` (the same
// swizzle): the operand windows of dense_wgmma_conv_rows. Warps 1..kTransposeWarps of the producer
// warpgroup; a job is 8 steps (group sg) x 32 channels, four 8x8 matrices (channel groups cg),
// ldmatrix.trans + stmatrix, conflict-free on both sides. A warp loads kBatch jobs before storing
// them: one job at a time would leave a shared-memory round trip per job exposed, and the window
// is on the critical path of every chunk.
__device__ __forceinline__ void transpose_raw_window(uint32_t src, uint32_t dst, int octs, int warp, int lane) {
  constexpr int kBatch = 4;
  const int jobs = 2 * octs;
  const int i = lane / 8, j = lane % 8;  // matrix i, its row j
  for (int first = warp - 1; first < jobs; first += kTransposeWarps * kBatch) {
    uint32_t r[kBatch][4];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int job = first + b * kTransposeWarps, sg = job / 2, cg = (job % 2) * 4 + i;
      // raw: box sg/8, row = channel 8cg + j, chunk (sg % 8) at its swizzled place.
      if (job < jobs)
        sm90::ldmatrix_x4_trans(r[b], src + (sg / 8) * kRawBoxBytes + (8 * cg + j) * 128 + (((sg % 8) ^ j) << 4));
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int job = first + b * kTransposeWarps, sg = job / 2, cg = (job % 2) * 4 + i;
      // window: row = step 8sg + j (phase j), chunk cg at its swizzled place.
      if (job < jobs) sm90::stmatrix_x4(dst + (8 * sg + j) * 128 + ((cg ^ j) << 4), r[b]);
    }
  }
}

// Eight fp32 steps t .. t+7 of a source row (zero outside [0, length) and for a dead row):
// two 16-byte loads when all are inside (t is a multiple of 8, rows 16-byte aligned).
__device__ __forceinline__ void load_eight_steps(const float* row, int32_t t, int32_t length, bool live,
                                                 float (&v)[8]) {
  if (live && t >= 0 && t + 8 <= length) {
    const float4 a = *reinterpret_cast<const float4*>(row + t);
    const float4 b = *reinterpret_cast<const float4*>(row + t + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    return;
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) v[e] = live && t + e >= 0 && t + e < length ? row[t + e] : 0.0f;
}

template <typename T, typename TS = T>
__global__ void __launch_bounds__(kThreads, 1)
    dense_wgmma_conv_rows(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap src_map,
                          const __grid_constant__ CUtensorMap keep_map, const WgParams p) {
#ifdef CAUSALCONV_SM90A
  using Tr = RowTraits<T, TS>;
  // fp32 source rows: loaded by the window builders (no TMA boxes); else 16-bit rows of T by TMA.
  constexpr bool kLoadRows = std::is_same_v<TS, float>;
  static_assert(kLoadRows || std::is_same_v<TS, T>, "16-bit sources are T's own type");
  using Mma = typename Tr::Mma;
  uint8_t* const a_stages = sm90::aligned_dynamic_shared();
  uint8_t* const raw = a_stages + Tr::kAStages * Tr::kAStageBytes;  // kRawSlots x (boxes of channel rows)
  uint8_t* const win = raw + Tr::kRawSlots * kWinBytes;              // kWindows x (copies of step rows)
  uint64_t* const a_full = reinterpret_cast<uint64_t*>(win + Tr::kWindows * Tr::kWindowBytes);
  uint64_t* const a_empty = a_full + Tr::kAStages;
  uint64_t* const raw_full = a_empty + Tr::kAStages;
  uint64_t* const raw_empty = raw_full + Tr::kRawSlots;
  uint64_t* const win_full = raw_empty + Tr::kRawSlots;
  uint64_t* const win_empty = win_full + Tr::kWindows;
  if (threadIdx.x == 0) {
    sm90::tma_prefetch_descriptor(&w_map);
    if constexpr (!kLoadRows) sm90::tma_prefetch_descriptor(&src_map);
    for (int s = 0; s < Tr::kAStages; ++s) {
      sm90::mbarrier_init(&a_full[s], 1);
      sm90::mbarrier_init(&a_empty[s], kConsumerWarps);
    }
    for (int s = 0; s < Tr::kRawSlots; ++s) {
      sm90::mbarrier_init(&raw_full[s], 1);
      sm90::mbarrier_init(&raw_empty[s], kTransposeWarps);
    }
    for (int s = 0; s < Tr::kWindows; ++s) {
      sm90::mbarrier_init(&win_full[s], kTransposeWarps);
      // keep_x: one more arrival, the window's store having read it
      sm90::mbarrier_init(&win_empty[s], kConsumerWarps + (p.keep_x ? 1 : 0));
    }
    sm90::mbarrier_init_fence();
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  if (warpgroup == 0 && warp == 0) {  // producer: one thread issues the weights' copies
    if (lane != 0) return;
    int64_t it_a = 0;
    for (int64_t tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
      const TileCoords c = tile_coords(p, tile);
      for (int32_t cc = 0; cc < p.c_chunks; ++cc) {
        for (int32_t k = 0; k < p.width; ++k, ++it_a) {
          const int slot = int(it_a % Tr::kAStages);
          const uint32_t a_round = uint32_t(it_a / Tr::kAStages);
          if (a_round > 0) sm90::mbarrier_wait(&a_empty[slot], (a_round - 1) & 1);
          sm90::mbarrier_arrive_expect_tx(&a_full[slot], Tr::kAStageBytes);
          for (int copy = 0; copy < Tr::kCopies; ++copy)
            sm90::tma_load_2d(a_stages + slot * Tr::kAStageBytes + copy * kATileBytes, &w_map, &a_full[slot],
                              cc * kBK, (c.g * p.width + k) * p.o_pad + c.m * kBM + copy * p.w_lo_rows);
        }
      }
    }
    return;
  }

  if (warpgroup == 0) {  // window builders: warps 1-3
    // The window's steps the taps read, in groups of 8 (off0 + (K-1)d + 256 rounded up), and the
    // TMA boxes holding them: at K = 4, d = 1, 33 of the 40 groups, in 5 boxes (the last box's
    // other steps are copied, not transposed). Against all 40 (H200, session 22): fp32 seed forward
    // 0.826 -> 0.768 ms, bf16 0.305 -> 0.299. (A full barrier per box, transposing each box as it
    // lands, was no faster: 0.771 / 0.303.)
    const int32_t octs = (window_offset(p.shift_base) + (p.width - 1) * p.dilation + kBN + 7) / 8;
    [[maybe_unused]] const int boxes = (octs + 7) / 8;  // (16-bit sources)
    // keep_x: lane 0 of warp 1 stores a window once all three warps have built it, and releases it
    // (its extra win_empty arrival) when the store has read it, one chunk later: the wait then
    // overlaps the next chunk's raw copies. `kept` is the window so owed; -1: none.
    const bool keeper = p.keep_x && warp == 1 && lane == 0;
    int kept = -1;
    auto release_kept = [&] {
      if (kept < 0) return;
      sm90::bulk_wait_group_read<0>();
      sm90::mbarrier_arrive(&win_empty[kept]);
      kept = -1;
    };
    int64_t it_w = 0;
    for (int64_t tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
      const TileCoords c = tile_coords(p, tile);
      const int32_t w0 = window_start(c.tt * kBN, p.shift_base);
      for (int32_t cc = 0; cc < p.c_chunks; ++cc, ++it_w) {
        const int s = int(it_w % Tr::kWindows);
        const uint32_t round = uint32_t(it_w / Tr::kWindows);
        [[maybe_unused]] int raw_slot = 0;
        if constexpr (!kLoadRows) {
          // 16-bit: lane 0 of warp 1 copies this chunk's boxes into a raw slot once the three warps
          // have transposed its last use, before waiting for a free window below: the copy runs
          // while the consumers still read the windows built before it.
          const int rs = int(it_w % Tr::kRawSlots);
          const uint32_t raw_round = uint32_t(it_w / Tr::kRawSlots);
          if (warp == 1 && lane == 0) {
            if (raw_round > 0) sm90::mbarrier_wait(&raw_empty[rs], (raw_round - 1) & 1);
            sm90::mbarrier_arrive_expect_tx(&raw_full[rs], uint32_t(boxes) * kRawBoxBytes);
            for (int box = 0; box < boxes; ++box)
              sm90::tma_load_4d(raw + rs * kWinBytes + box * kRawBoxBytes, &src_map, &raw_full[rs], w0 + 64 * box,
                                cc * kBK, c.g, c.b);
          }
          if (keeper) release_kept();
          sm90::mbarrier_wait(&raw_full[rs], raw_round & 1);
          raw_slot = rs;
        } else {
          if (keeper) release_kept();
        }
        if (round > 0) sm90::mbarrier_wait(&win_empty[s], (round - 1) & 1);
        const uint32_t dst = sm90::smem_u32(win + s * Tr::kWindowBytes);
        if constexpr (!kLoadRows) {
          transpose_raw_window(sm90::smem_u32(raw + raw_slot * kWinBytes), dst, octs, warp, lane);
        } else {
          // Lane: channels 2*lane, 2*lane + 1 of the chunk; job: 8 steps.
          const int32_t s0 = cc * kBK + 2 * lane;
          const float* row0 = static_cast<const float*>(p.src) + c.b * p.src_stride[0] +
                              (int64_t(c.g) * p.in_g + s0) * p.src_stride[1];
          uint8_t* const hi = win + s * Tr::kWindowBytes;
          // kBatch jobs' loads in flight before their stores: the window must be ready within
          // the previous chunk's MMAs, and each load is a trip to L2 or HBM.
          constexpr int kBatch = 4, kStride = kTransposeWarps * kBatch;
          for (int first = warp - 1; first < octs; first += kStride) {
            float v[kBatch][2][8];
#pragma unroll
            for (int b = 0; b < kBatch; ++b) {
              const int oct = first + b * kTransposeWarps;
              const bool in_window = oct < octs;
              load_eight_steps(row0, w0 + 8 * oct, p.length, in_window && s0 < p.in_g, v[b][0]);
              load_eight_steps(row0 + p.src_stride[1], w0 + 8 * oct, p.length, in_window && s0 + 1 < p.in_g, v[b][1]);
            }
#pragma unroll
            for (int b = 0; b < kBatch; ++b) {
              const int oct = first + b * kTransposeWarps;
              if (oct >= octs) break;
#pragma unroll
              for (int e = 0; e < 8; ++e) {
                const int r = 8 * oct + e;
                const uint32_t at = uint32_t(r) * 128 + ((uint32_t(lane / 4) ^ uint32_t(r % 8)) << 4) + (lane % 4) * 4;
                const float v0 = v[b][0][e], v1 = v[b][1][e];
                if constexpr (Tr::kSplit) {  // bf16 hi and lo windows
                  const float h0 = bf16_hi(v0), h1 = bf16_hi(v1);
                  *reinterpret_cast<uint32_t*>(hi + at) = pack2<false>(h0, h1);
                  *reinterpret_cast<uint32_t*>(hi + kWinBytes + at) = pack2<false>(v0 - h0, v1 - h1);
                } else {
                  *reinterpret_cast<uint32_t*>(hi + at) = pack2<std::is_same_v<T, __half>>(v0, v1);
                }
              }
            }
          }
          (void)dst;
        }
        sm90::fence_proxy_async_shared();  // the window's bytes, before the consumers' wgmma reads them
        __syncwarp();
        if (lane == 0) {
          if constexpr (!kLoadRows) sm90::mbarrier_arrive(&raw_empty[raw_slot]);
          sm90::mbarrier_arrive(&win_full[s]);
        }
        if (keeper) {
          if (c.m == 0) {
            // The tile's own steps t0 .. t0 + 255 are window rows r0 = t0 - w0 on (a multiple of
            // 8, so the tile keeps TMA's swizzle phase); TMA clips the store at L and the group.
            sm90::mbarrier_wait(&win_full[s], round & 1);
            const uint8_t* own = win + s * Tr::kWindowBytes + (c.tt * kBN - w0) * 128;
            for (int copy = 0; copy < Tr::kCopies; ++copy)
              sm90::tma_store_4d(&keep_map, own + copy * kWinBytes, cc * kBK, c.g, c.tt * kBN, c.b + copy * p.batch);
            sm90::bulk_commit_group();
          }
          kept = s;
        }
      }
    }
    if (keeper) sm90::bulk_wait_group<0>();  // the stores' writes, before the CTA exits
    return;
  }

  // Consumers: warpgroup 1 takes rows 0-63 of the tile, warpgroup 2 rows 64-127.
  const int cw = warpgroup - 1;
  const int32_t off0 = window_offset(p.shift_base);
  int64_t it_a = 0, it_w = 0;
  for (int64_t tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
    const TileCoords c = tile_coords(p, tile);
    float acc[128];
    clear_accumulators(acc);
    int prev_slot = -1, prev_win = -1;  // the stage (and, after a chunk's last tap, the window) to release
    for (int32_t cc = 0; cc < p.c_chunks; ++cc, ++it_w) {
      const int ws = int(it_w % Tr::kWindows);
      sm90::mbarrier_wait(&win_full[ws], uint32_t(it_w / Tr::kWindows) & 1);
      const uint32_t window = sm90::smem_u32(win + ws * Tr::kWindowBytes);
      for (int32_t k = 0; k < p.width; ++k, ++it_a) {
        const int slot = int(it_a % Tr::kAStages);
        sm90::mbarrier_wait(&a_full[slot], uint32_t(it_a / Tr::kAStages) & 1);
        conv_stage_mma<Mma, Tr::kSplit>(acc, sm90::smem_u32(a_stages + slot * Tr::kAStageBytes) + cw * 64 * 128,
                                        window + uint32_t(off0 + k * p.dilation) * 128, kWinBytes);
        sm90::wgmma_wait<1>();  // the previous stage's MMAs are done: release what they read
        if (prev_slot >= 0 && lane == 0) {
          sm90::mbarrier_arrive(&a_empty[prev_slot]);
          if (prev_win >= 0) sm90::mbarrier_arrive(&win_empty[prev_win]);
        }
        prev_slot = slot;
        prev_win = k + 1 == p.width ? ws : -1;
      }
    }
    sm90::wgmma_wait<0>();
    sm90::fence_registers(acc);
    if (prev_slot >= 0 && lane == 0) {
      sm90::mbarrier_arrive(&a_empty[prev_slot]);
      sm90::mbarrier_arrive(&win_empty[prev_win]);
    }
    store_conv_tile<T>(p, c, acc, cw);
  }
#endif
}

// ---- weight gradients ----------------------------------------------------------------
//
//   dW[g*D + o, s, k] = sum_{b, t} G[b, g*D + o, t] * X[b, g*S + s, t - (K-1-k) d],   dbias[o] = sum G[b, o, t]
//
// A GEMM over B x L per (group, 128 outputs, kChunks x 64 sources, kTaps taps; kTaps x kChunks
// <= 4): M = o, N = s per tap, reduction = time in units of 64 steps of one batch row. Per unit:
//   A: G[b][o][t0, +64), 128 x 64, K-major (time is G's innermost axis; t0 is a multiple of 64):
//      16-bit, a TMA box of G's rows (in place, or staged by stage_rows); fp32, two TMA boxes of
//      32 fp32 steps (in place, or staged as fp32 rows), which the consumers read into registers
//      and split into bf16 hi and lo A fragments themselves (wgmma with A from registers), so the
//      stage holds G's bytes once and no warp stands between TMA and the MMAs. (Before session 27
//      producer warps split G into hi and lo tiles in the stage from global loads: their loads'
//      latency paced the kernel, 755 us on the fp32 seed where the MMAs need ~520.)
//   B_k: x rows t0 - (K-1-k)d + [0, 64) of the channel-last x staged for the forward, 64 sources
//        per TMA box: N-major (tap shifts land on the outer time axis, any value); a tap's
//        kChunks boxes lie one after another, the N-major groups of one m64n(64 kChunks)k16.
//        (One window of 64 + (kTaps-1)d rows per unit for all taps, a quarter of the bytes at
//        K = 4, was no faster on the H200 in sessions 6 and 15 and was removed.)
// Two shapes are launched (dw_launches): 4 taps of one 64-source chunk (kChunks 1, N = 64), or
// (groups of more than 192 sources, dense_wgmma.cu) one tap of 4 chunks (N = 256): per m64n256k16 10 KB
// of shared-memory operands for 128 cycles of tensor work, against 4 KB per 32 at N = 64, which
// alone is the SM's 128 bytes per cycle (A is read once per tap there, B once per consumer).
// The two consumer warpgroups keep one accumulator set per tap (kTaps x 32 kChunks fp32). CTAs of
// one part sum a fixed contiguous range of units and write fp32 partials in dense_generic.cu's
// layout (parts x (C_out*S*K, then C_out)); its ordered reduction makes the result bitwise
// reproducible. In the CTAs of the first source chunk and tap chunk the consumers also sum G's
// rows (dbias) on the tensor cores: one m64n8k16 per k-step against a tile of ones. (Two producer
// warps summing the staged rows instead cost the bf16 seed's fwd+bwd 70 us on the H200, session 24:
// as readers of the ring they gated every stage's refill; reading G from global memory beside the
// ring cost 59 us more, the added L2 traffic of an L2-bound kernel.)
// The tap count is a template parameter: with a run-time bound on the accumulator sets in use,
// ptxas cannot tell which registers the asynchronous wgmmas own and fences every one of them
// (warning C7519). A width-K call launches full 4-tap chunks and, if K % 4, one launch of the
// last chunk (dw_launches).
// (A variant that read 16-bit x from its own rows and transposed it in shared memory, as
// dense_wgmma_conv_rows does, was slower on the H200 in sessions 5 and 6 and was removed.)
constexpr int kDwSteps = 64;
constexpr int kDwTaps = 4;                          // TMA boxes of x per stage (taps x chunks)
constexpr int kDwWideChunks = 4;                    // 64-source chunks of a source-wide CTA
constexpr uint32_t kDwBBytes = kDwSteps * kBK * 2;  // 8 KiB: one box of x rows

// CTAs the weight-gradient grid aims for (the time units are split into parts to reach it): four
// waves of one CTA per SM on an H100/H200. Side by side on the seed case (H200, session 6),
// 128 / 264 / 528 CTAs gave bf16 fwd+bwd 1.158 / 1.184 / 1.152 ms, fp32 3.005 / 2.983 / 3.014 ms;
// more parts also shorten each fp32 accumulation chain (fp32 dweight rel L2 1.4e-5 at 528, 2.8e-5
// at 264; at 128 it failed the 5e-5 bound).
constexpr int64_t kDwTargetCtas = 528;

template <typename T>
using DwTraits = RingTraits<T, kATileBytes + kDwTaps * kDwBBytes>;

// The weight gradient's shared memory: the ring with its barriers, then (1024 bytes past the
// stages) the ones tile, 8 rows of 64 16-bit ones: dbias's B operand. The ring's own 1024 bytes of
// slack cover the stages' alignment; the ones need 1024 more past the barriers' 1024.
template <typename T>
constexpr size_t kDwSmemBytes = DwTraits<T>::kSmemBytes + 2048;

struct DwParams {
  float* partials;
  int64_t part_elems;  // C_out*S*K + C_out
  int64_t units;       // batch * t_units
  int32_t batch, groups, out_g, in_g, width, dilation;
  int32_t o_tiles, c_chunks, t_units, parts;  // c_chunks: CTAs along the sources (kChunks x 64 each)
  int32_t q_base, q_count;  // this launch's tap chunks: q_base .. q_base + q_count - 1
  int32_t sum_bias;         // 1: the CTAs of channel chunk 0 and tap chunk 0 also sum dbias
};

// The launches of a width-`width` weight gradient: {taps per CTA, first tap chunk, chunks}.
// 64-source CTAs: full 4-tap chunks, then one launch of the last K % 4 taps (chunk q's taps
// start at 4q); source-wide CTAs: one tap each (chunk q is tap q).
struct DwLaunch {
  int taps, q_base, q_count;
};
inline int dw_launches(int width, bool source_wide, DwLaunch (&out)[2]) {
  if (source_wide) {
    out[0] = {1, 0, width};
    return 1;
  }
  int n = 0;
  if (width / kDwTaps > 0) out[n++] = {kDwTaps, 0, width / kDwTaps};
  if (width % kDwTaps > 0) out[n++] = {width % kDwTaps, width / kDwTaps, 1};
  return n;
}

// CTAs along the sources (64 or kDwWideChunks x 64 each) and along the taps, of the launches above.
inline int64_t dw_source_groups(int64_t sources, bool source_wide) {
  const int64_t per_cta = int64_t(source_wide ? kDwWideChunks : 1) * kBK;
  return (sources + per_cta - 1) / per_cta;
}
inline int64_t dw_tap_groups(int64_t width, bool source_wide) {
  return source_wide ? width : (width + kDwTaps - 1) / kDwTaps;
}

// fp32 A from the stage's raw G tile (two TMA boxes of 128 rows x 32 fp32 steps, 128-byte
// swizzle: box s / 32, row r at 128 r, 16-byte chunk (s % 32) / 4 at its place ^ (r % 8)) into
// k16 slice kk's A fragments of consumer warp `warp` of warpgroup cw (rows cw 64 + 16 warp + lane/4
// and 8 below, steps 16 kk + 2 (lane % 4) and 8 on, in pairs): the bf16 hi halves and the lo
// remainders, and (kBias) the eight values' sums into the lane's two rows (row_sum[0] and [2],
// where an m64n8 accumulator holds rows lane/4 and 8 below). The swizzle spreads the eight rows
// a warp's 8-byte load reads over all 32 banks: two wavefronts, the minimum.
template <bool kBias>
__device__ __forceinline__ void split_a_fragment(const uint8_t* a_tile, int cw, int warp, int lane, int kk,
                                                 uint32_t (&hi)[4], uint32_t (&lo)[4], float (&row_sum)[4]) {
  const int r = cw * 64 + warp * 16 + lane / 4, q = lane % 4;
  const int chunk = 4 * (kk % 2) + q / 2, word = 2 * (q % 2);
  const uint8_t* box = a_tile + (kk / 2) * kATileBytes;
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // fragment register i: row r + 8 (i & 1), steps + 8 (i >> 1)
    const int row = r + 8 * (i & 1), c = chunk + 2 * (i >> 1);
    const float2 v = *reinterpret_cast<const float2*>(box + row * 128 + ((c ^ (row % 8)) << 4) + word * 4);
    const float h0 = bf16_hi(v.x), h1 = bf16_hi(v.y);
    hi[i] = pack2<false>(h0, h1);
    lo[i] = pack2<false>(v.x - h0, v.y - h1);
    if constexpr (kBias) row_sum[2 * (i & 1)] += v.x + v.y;
  }
}

template <typename T, int kTaps, int kChunks>
__global__ void __launch_bounds__(kThreads, 1)
    dense_wgmma_weight_grad(const __grid_constant__ CUtensorMap g_map, const __grid_constant__ CUtensorMap x_map,
                            const DwParams p) {
#ifdef CAUSALCONV_SM90A
  using Tr = DwTraits<T>;
  using Mma = typename Tr::Mma;
  uint8_t* const smem = sm90::aligned_dynamic_shared();
  int32_t rest = blockIdx.x;
  constexpr int kQTaps = kChunks == 1 ? kDwTaps : 1;  // dw_launches: tap chunk q's first tap is q kQTaps
  const int32_t q = p.q_base + rest % p.q_count;
  rest /= p.q_count;
  const int32_t c = rest % p.c_chunks;
  rest /= p.c_chunks;
  const int32_t m = rest % p.o_tiles, g = rest / p.o_tiles;
  const int32_t part = blockIdx.y;
  static_assert(kTaps >= 1 && (kChunks == 1 || kChunks == kDwWideChunks) && kTaps * kChunks <= kDwTaps,
                "up to 4 boxes of x per stage; N = 64 or 256 per wgmma");
  const bool bias_tile = p.sum_bias && c == 0 && q == 0;
  const int64_t u0 = part * p.units / p.parts, u1 = (part + 1) * p.units / p.parts;

  const int warpgroup = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  // 16-bit: the ones tile (dbias's B), visible to wgmma before start_ring's barrier. fp32 sums its
  // A values as it splits them.
  uint8_t* const ones = smem + Tr::kStages * Tr::kStageBytes + 1024;
  if (!Tr::kSplit && bias_tile && threadIdx.x < 128) {
    const Mma one = from_float<Mma>(1.0f);
    const uint16_t bits = reinterpret_cast<const uint16_t&>(one);
    reinterpret_cast<uint32_t*>(ones)[threadIdx.x * 2] = bits * 0x10001u;
    reinterpret_cast<uint32_t*>(ones)[threadIdx.x * 2 + 1] = bits * 0x10001u;
    sm90::fence_proxy_async_shared();
  }
  const Ring ring = start_ring<Tr>(smem, kConsumerWarps, &g_map, &x_map);
  uint8_t* const stages = ring.stages;
  uint64_t* const full = ring.full;
  uint64_t* const empty = ring.empty;

  if (warpgroup == 0) {
    if (threadIdx.x != 0) return;
    // The producer: unit u's copies into its free stage. G's tile: 16-bit, one box of 64 steps;
    // fp32, copy i the box of steps t0 + 32 i. x: the rows of the CTA's taps (fp32: bf16 hi, then
    // lo, as batch rows b and B + b of the kept copy).
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t it = u - u0;
      const int slot = int(it % Tr::kStages);
      const uint32_t round = uint32_t(it / Tr::kStages);
      if (round > 0) sm90::mbarrier_wait(&empty[slot], (round - 1) & 1);
      constexpr uint32_t kBytes = Tr::kCopies * (kATileBytes + kTaps * kChunks * kDwBBytes);
      uint8_t* st = stages + slot * Tr::kStageBytes;
      const int32_t b = int32_t(u / p.t_units), t0 = int32_t(u % p.t_units) * kDwSteps;
      sm90::mbarrier_arrive_expect_tx(&full[slot], kBytes);
      for (int copy = 0; copy < Tr::kCopies; ++copy) {
        sm90::tma_load_4d(st + copy * kATileBytes, &g_map, &full[slot], t0 + copy * (kDwSteps / 2), m * kBM, g, b);
        for (int j = 0; j < kTaps; ++j)
          for (int i = 0; i < kChunks; ++i) {
            const int32_t k = q * kQTaps + j;
            sm90::tma_load_4d(st + Tr::kCopies * kATileBytes + (copy * kDwTaps + j * kChunks + i) * kDwBBytes,
                              &x_map, &full[slot], (c * kChunks + i) * kBK, g, t0 - (p.width - 1 - k) * p.dilation,
                              b + copy * p.batch);
          }
      }
    }
    return;
  }

  const int cw = warpgroup - 1;
  float acc[kTaps][32 * kChunks];
#pragma unroll
  for (int j = 0; j < kTaps; ++j) clear_accumulators(acc[j]);
  float bias_acc[4];  // dbias: G's row sums (16-bit: m64n8, every column the same; fp32: [0], [2])
  clear_accumulators(bias_acc);
  const uint32_t ones_u32 = sm90::smem_u32(ones);
  // One k16 slice's MMAs of tap j: A's descriptor or fragment against the tap's x rows (b: the hi
  // copy's, b + kDwTaps kDwBBytes the lo copy's).
  auto mma = [&](auto& d, const auto& a, uint32_t b, int j, int kk) {
    const uint64_t db = sm90::smem_descriptor(b + j * kChunks * kDwBBytes + kk * 2048, kDwBBytes, 1024);
    if constexpr (std::is_same_v<std::decay_t<decltype(a)>, uint64_t>) {
      if constexpr (kChunks == 1)
        sm90::wgmma_m64n64k16_bt<Mma>(d, a, db, 1);
      else
        sm90::wgmma_m64n256k16_bt<Mma>(d, a, db, 1);
    } else {
      if constexpr (kChunks == 1)
        sm90::wgmma_m64n64k16_rs_bt<Mma>(d, a, db, 1);
      else
        sm90::wgmma_m64n256k16_rs_bt<Mma>(d, a, db, 1);
    }
  };
  // The loop is compiled twice, with and without dbias: a run-time condition around a wgmma
  // makes ptxas fence the accumulators of every wgmma in the loop (warning C7519).
  auto consume = [&](auto with_bias) {
    constexpr bool kBias = decltype(with_bias)::value;
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t it = u - u0;
      const int slot = int(it % Tr::kStages);
      sm90::mbarrier_wait(&full[slot], uint32_t(it / Tr::kStages) & 1);
      const uint32_t st = sm90::smem_u32(stages + slot * Tr::kStageBytes);
      const uint32_t b_hi = st + Tr::kCopies * kATileBytes;
      if constexpr (Tr::kSplit) {
        // One set of fragments, rewritten once the MMAs that read it are done (wgmma_wait<0>):
        // the other consumer warpgroup's MMAs keep the tensor cores busy meanwhile.
        uint32_t hi[4], lo[4];
#pragma unroll
        for (int kk = 0; kk < kDwSteps / 16; ++kk) {
          split_a_fragment<kBias>(stages + slot * Tr::kStageBytes, cw, warp, lane, kk, hi, lo, bias_acc);
          sm90::wgmma_fence();
#pragma unroll
          for (int j = 0; j < kTaps; ++j) {
            mma(acc[j], hi, b_hi, j, kk);
            mma(acc[j], hi, b_hi + kDwTaps * kDwBBytes, j, kk);  // the lo copy's x
            mma(acc[j], lo, b_hi, j, kk);
          }
          sm90::wgmma_commit();
          sm90::wgmma_wait<0>();
        }
        if (lane == 0) sm90::mbarrier_arrive(&empty[slot]);
      } else {
        const uint32_t a_hi = st + cw * 64 * 128;
        sm90::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kDwSteps / 16; ++kk) {
          const uint64_t da = sm90::smem_descriptor(a_hi + kk * 32, 16, 1024);
#pragma unroll
          for (int j = 0; j < kTaps; ++j) mma(acc[j], da, b_hi, j, kk);
          if constexpr (kBias)
            sm90::wgmma_m64n8k16<Mma>(bias_acc, da, sm90::smem_descriptor(ones_u32 + kk * 32, 16, 1024), 1);
        }
        sm90::wgmma_commit();
        sm90::wgmma_wait<1>();
        if (it > 0 && lane == 0) sm90::mbarrier_arrive(&empty[int((it - 1) % Tr::kStages)]);
      }
    }
    sm90::wgmma_wait<0>();
#pragma unroll
    for (int j = 0; j < kTaps; ++j) sm90::fence_registers(acc[j]);
    if constexpr (kBias) sm90::fence_registers(bias_acc);
  };
  if (bias_tile)
    consume(std::true_type{});
  else
    consume(std::false_type{});
  if (!Tr::kSplit && u1 > u0 && lane == 0) sm90::mbarrier_arrive(&empty[int((u1 - u0 - 1) % Tr::kStages)]);
  if (Tr::kSplit && bias_tile) {  // fp32: the row sums of the lane's quad, in a fixed order
    for (int h = 0; h < 3; h += 2) {
      bias_acc[h] += __shfl_xor_sync(0xffffffffu, bias_acc[h], 1);
      bias_acc[h] += __shfl_xor_sync(0xffffffffu, bias_acc[h], 2);
    }
  }

  // Accumulator 4i + 2h + e of tap j: output row 16*warp + lane/4 + 8h, source 8i + 2*(lane%4) + e
  // of the CTA's kChunks x 64. The partials are tap-major, (k, C_out, S) with the sources
  // innermost (dense_weight_grad_reduce maps them back), so a lane's two sources are one 8-byte
  // store and a warp's store fills whole 32-byte sectors: in (C_out, S, K) order each 4-byte
  // value took a sector of its own, 8x the L2 write transactions.
  float* out = p.partials + part * p.part_elems;
  if (bias_tile && lane % 4 == 0)  // column 0: accumulators 0 (row lane/4) and 2 (row lane/4 + 8)
    for (int h = 0; h < 2; ++h) {
      const int32_t o = m * kBM + cw * 64 + warp * 16 + lane / 4 + 8 * h;
      if (o < p.out_g) out[int64_t(p.groups) * p.out_g * p.in_g * p.width + int64_t(g) * p.out_g + o] = bias_acc[2 * h];
    }
#pragma unroll
  for (int j = 0; j < kTaps; ++j) {
    const int32_t k = q * kQTaps + j;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int32_t o = m * kBM + cw * 64 + warp * 16 + lane / 4 + 8 * h;
      if (o >= p.out_g) continue;
      float* row = out + ((int64_t(k) * p.groups + g) * p.out_g + o) * p.in_g;
#pragma unroll
      for (int i = 0; i < 8 * kChunks; ++i) {
        const int32_t s = c * kChunks * kBK + 8 * i + 2 * (lane % 4);
        const float v0 = acc[j][4 * i + 2 * h], v1 = acc[j][4 * i + 2 * h + 1];
        if (s + 1 < p.in_g && reinterpret_cast<uintptr_t>(row + s) % 8 == 0) {
          *reinterpret_cast<float2*>(row + s) = make_float2(v0, v1);
        } else {
          if (s < p.in_g) row[s] = v0;
          if (s + 1 < p.in_g) row[s + 1] = v1;
        }
      }
    }
  }
#endif
}

}  // namespace
}  // namespace causalconv::detail
