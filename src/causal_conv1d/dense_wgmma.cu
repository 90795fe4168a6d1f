// Dense/grouped causal conv forward on Hopper (sm_90a): TMA + wgmma, warp-specialised.
//
//   Y[b, g*D + o, t] = act(bias + sum_{k<K, s<S} W[g*D + o, s, k] * X[b, g*S + s, t - (K-1-k) d])
//
// An implicit GEMM per (batch, group): M = D output channels, N = time, reduction = K taps x S
// source channels. CTA tile 128 (o) x 256 (t), three warpgroups: a producer (one thread issues
// the TMA copies) and two consumers (64 rows each: m64n256k16 wgmma, 128 fp32 accumulators per
// thread). One reduction stage = one tap k x 64 source channels, both operands K-major:
//   A: prepared weights W'[g][k][o][s] (workspace), a 128 x 64 tile (TMA box {64, 128});
//   B: x channel-last, rows X[b][t][g][s] for t in [t0 - (K-1-k)d, +256), 64 channels each
//      (one TMA box {64, 1, 256, 1} of a 4-D map (S, G, L, B)). TMA fills zeros outside [0, L)
//      and past the group's channels: the causal padding costs nothing.
// Time must be an outer TMA dimension: a copy's innermost start coordinate has to be a whole
// 16 bytes, and tap shifts are arbitrary. So channel-first x goes through a pre-pass that writes
// a channel-last copy into the workspace (channel-last 16-bit x with aligned rows is read in
// place). Each tap reads its shifted rows through L2.
//
// fp32: both operands split into bf16 hi + lo, 3 products (hi*hi + hi*lo + lo*hi) into the same
// fp32 accumulators (as dense_tc.cu); the pre-pass writes both copies; a stage carries both.
//
// CTAs are persistent and walk the tiles; the producer runs ahead into the next tile while the
// consumers store the previous one. Stages: 4 x 48 KiB (16-bit), 2 x 96 KiB (fp32 split).
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "causal_conv1d/dense_kernels.h"
#include "causalconv/error.h"
#include "common/cuda_math.cuh"
#include "common/cuda_runtime.h"
#include "common/sm90_primitives.cuh"

namespace causalconv::detail {
namespace {

constexpr int kBM = 128;  // output channels per tile
constexpr int kBN = 256;  // time steps per tile
constexpr int kBK = 64;   // source channels per stage (one 128-byte swizzle row)
constexpr int kThreads = 384;
[[maybe_unused]] constexpr int kConsumerWarps = 8;
constexpr uint32_t kATileBytes = kBM * kBK * 2;          // 16 KiB
constexpr uint32_t kBTileBytes = kBN * kBK * 2;          // 32 KiB
constexpr int64_t kMaxCoordinate = int64_t(1) << 30;     // TMA coordinates are int32

template <typename T>
struct WgTraits {
  static constexpr bool kSplit = std::is_same_v<T, float>;
  using Mma = std::conditional_t<kSplit, __nv_bfloat16, T>;  // operand type of the MMA
  static constexpr int kCopies = kSplit ? 2 : 1;
  static constexpr int kStages = kSplit ? 2 : 4;
  static constexpr uint32_t kStageBytes = kCopies * (kATileBytes + kBTileBytes);
  // Stages 1024-byte aligned (the swizzle pattern's period), then the barriers.
  static constexpr size_t kSmemBytes = size_t(kStages) * kStageBytes + 1024 + 2 * kStages * sizeof(uint64_t);
};

struct WgParams {
  void* y;
  const void* bias;  // nullptr: none
  int64_t y_stride[3], bias_stride;
  int64_t tiles;
  int32_t batch, groups, out_g, length, width, dilation;
  int32_t c_chunks, o_tiles, t_tiles, o_pad;
  int32_t w_lo_rows;  // row offset of the lo copy in the weight map (fp32)
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
    dense_wgmma_forward(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map,
                        const WgParams p) {
#ifdef CAUSALCONV_SM90A
  using Tr = WgTraits<T>;
  using Mma = typename Tr::Mma;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* stages = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(stages + Tr::kStages * Tr::kStageBytes);
  uint64_t* empty = full + Tr::kStages;

  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    sm90::tma_prefetch_descriptor(&w_map);
    sm90::tma_prefetch_descriptor(&x_map);
    for (int s = 0; s < Tr::kStages; ++s) {
      sm90::mbarrier_init(&full[s], 1);                // the producer's expect_tx arrival
      sm90::mbarrier_init(&empty[s], kConsumerWarps);  // one arrival per consumer warp
    }
    sm90::mbarrier_init_fence();
  }
  __syncthreads();

  const int32_t stages_per_tile = p.width * p.c_chunks;
  if (warpgroup == 0) {
    if (threadIdx.x != 0) return;
    int64_t it = 0;  // stage counter across tiles: slot and phase
    for (int64_t tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
      const TileCoords c = tile_coords(p, tile);
      for (int32_t k = 0; k < p.width; ++k) {
        const int32_t w_row = (c.g * p.width + k) * p.o_pad + c.m * kBM;
        const int32_t t_first = c.tt * kBN - (p.width - 1 - k) * p.dilation;
        for (int32_t cc = 0; cc < p.c_chunks; ++cc, ++it) {
          const int slot = int(it % Tr::kStages);
          const uint32_t round = uint32_t(it / Tr::kStages);
          if (round > 0) sm90::mbarrier_wait(&empty[slot], (round - 1) & 1);
          uint8_t* st = stages + slot * Tr::kStageBytes;
          sm90::mbarrier_arrive_expect_tx(&full[slot], Tr::kStageBytes);
          for (int copy = 0; copy < Tr::kCopies; ++copy) {
            sm90::tma_load_2d(st + copy * kATileBytes, &w_map, &full[slot], cc * kBK, w_row + copy * p.w_lo_rows);
            sm90::tma_load_4d(st + Tr::kCopies * kATileBytes + copy * kBTileBytes, &x_map, &full[slot], cc * kBK, c.g,
                              t_first, c.b + copy * p.batch);
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

// ---- pre-passes ----------------------------------------------------------------------

// W'[copy][g][k][o < o_pad][s < s_pad] = W[g*D + o, s, k] (zero outside D x S); fp32: copy 0 = bf16 hi,
// copy 1 = bf16 lo.
template <typename T>
__global__ void __launch_bounds__(256)
    prepare_wgmma_weights(const T* w, int64_t ws0, int64_t ws1, int64_t ws2, int64_t out_g, int64_t in_g,
                          int64_t width, int64_t o_pad, int64_t s_pad, int64_t per_copy, uint16_t* out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < per_copy; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t s = i % s_pad;
    int64_t r = i / s_pad;
    const int64_t o = r % o_pad;
    r /= o_pad;
    const int64_t k = r % width, g = r / width;
    const bool live = o < out_g && s < in_g;
    if constexpr (std::is_same_v<T, float>) {
      const float v = live ? w[(g * out_g + o) * ws0 + s * ws1 + k * ws2] : 0.0f;
      const __nv_bfloat16 hi = __float2bfloat16_rn(v);
      out[i] = __bfloat16_as_ushort(hi);
      out[per_copy + i] = __bfloat16_as_ushort(__float2bfloat16_rn(v - __bfloat162float(hi)));
    } else {
      out[i] = live ? reinterpret_cast<const uint16_t*>(w)[(g * out_g + o) * ws0 + s * ws1 + k * ws2] : uint16_t(0);
    }
  }
}

// The 16-bit operand value(s) of x: the stored bits, or fp32's bf16 hi and lo.
template <typename T>
__device__ __forceinline__ void operand_bits(T v, uint16_t& hi, uint16_t& lo) {
  if constexpr (std::is_same_v<T, float>) {
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    hi = __bfloat16_as_ushort(h);
    lo = __bfloat16_as_ushort(__float2bfloat16_rn(v - __bfloat162float(h)));
  } else {
    hi = reinterpret_cast<const uint16_t&>(v);
    lo = 0;
  }
}

constexpr int kStageChannels = 64, kStageSteps = 64, kStageThreads = 256;

// Shared-memory column of step t in staged channel row `row`: 16-byte chunks XOR-swizzled by the
// row's group of 8, so that both the row-wise stores and the 8-rows-apart reads are conflict-free.
__device__ __forceinline__ int stage_column(int row, int t) { return (((t >> 3) ^ (row >> 3)) & 7) << 3 | (t & 7); }

struct StageArgs {
  const void* x;
  int64_t xs0, xs1, xs2;
  int32_t groups, in_g, s8, length;
  int64_t copy_elems;
  bool vector_rows;  // unit time stride and 16-byte aligned rows: 16-byte loads
  uint16_t* out;
};

// x (B, C, L), any strides -> out[copy * B + b][t][g][s < s8] (zero for s >= S): a channel-last copy
// whose group rows start on 16 bytes; fp32 writes bf16 hi (copy 0) and lo (copy 1). A block
// transposes 64 (padded) channels x 64 steps through shared memory: 16-byte loads along time
// (a warp covers whole 128-byte row pieces), then 8 lanes gather the 64 channels of one step
// and write them as 128 contiguous bytes.
template <typename T>
__global__ void __launch_bounds__(kStageThreads) stage_channel_last(StageArgs a) {
  constexpr bool kSplit = std::is_same_v<T, float>;
  constexpr int kVec = 16 / sizeof(T);  // elements per 16-byte load
  __shared__ alignas(16) uint16_t hi_s[kStageChannels][kStageSteps];
  __shared__ alignas(16) uint16_t lo_s[kSplit ? kStageChannels : 1][kStageSteps];
  const int32_t t0 = int32_t(blockIdx.x) * kStageSteps, ch0 = int32_t(blockIdx.y) * kStageChannels;
  const int64_t b = blockIdx.z;
  const int32_t row_elems = a.groups * a.s8;
  const T* x = static_cast<const T*>(a.x) + b * a.xs0;

  constexpr int kLoads = kStageChannels * kStageSteps / kVec / kStageThreads;
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    const int v = threadIdx.x + i * kStageThreads;
    const int cl = v / (kStageSteps / kVec), tl = v % (kStageSteps / kVec) * kVec;
    const int32_t ch = ch0 + cl, g = ch / a.s8, s = ch - g * a.s8, t = t0 + tl;
    const bool live = s < a.in_g && g < a.groups;
    const T* row = x + (int64_t(g) * a.in_g + s) * a.xs1;
    alignas(16) T vals[kVec];
    if (live && a.vector_rows && t + kVec <= a.length) {
      *reinterpret_cast<uint4*>(vals) = *reinterpret_cast<const uint4*>(row + t);
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) vals[e] = live && t + e < a.length ? row[int64_t(t + e) * a.xs2] : T(0.0f);
    }
    alignas(16) uint16_t hv[kVec], lv[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) operand_bits(vals[e], hv[e], lv[e]);
    // One vector store per row piece (its 8 or 4 steps share a swizzled chunk).
    using Piece = std::conditional_t<kSplit, uint2, uint4>;
    const int col = stage_column(cl, tl);
    *reinterpret_cast<Piece*>(&hi_s[cl][col]) = *reinterpret_cast<const Piece*>(hv);
    if constexpr (kSplit) *reinterpret_cast<Piece*>(&lo_s[cl][col]) = *reinterpret_cast<const Piece*>(lv);
  }
  __syncthreads();

  constexpr int kStores = kStageSteps * (kStageChannels / 8) / kStageThreads;
#pragma unroll
  for (int i = 0; i < kStores; ++i) {
    const int v = threadIdx.x + i * kStageThreads;
    const int cg = v % 8 * 8, tl = v / 8;  // 8 lanes: the 64 channels of one step
    const int32_t t = t0 + tl, ch = ch0 + cg;
    if (t >= a.length || ch >= row_elems) continue;
    alignas(16) uint16_t hv[8], lv[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int col = stage_column(cg + e, tl);
      hv[e] = hi_s[cg + e][col];
      if constexpr (kSplit) lv[e] = lo_s[cg + e][col];
    }
    const int64_t at = (b * a.length + t) * row_elems + ch;
    *reinterpret_cast<uint4*>(a.out + at) = *reinterpret_cast<const uint4*>(hv);
    if constexpr (kSplit) *reinterpret_cast<uint4*>(a.out + a.copy_elems + at) = *reinterpret_cast<const uint4*>(lv);
  }
}

// ---- host side -----------------------------------------------------------------------

// 16-bit channel-last x that TMA can read in place: unit channel stride, 16-byte aligned base,
// time and batch strides, and group rows starting on 16 bytes.
bool x_read_in_place(const DenseForwardParams& f) {
  const DenseGeometry& g = f.g;
  return g.dtype != DType::f32 && f.x_stride[1] == 1 && reinterpret_cast<uintptr_t>(f.x) % 16 == 0 &&
         f.x_stride[2] > 0 && f.x_stride[2] % 8 == 0 && f.x_stride[0] >= 0 && f.x_stride[0] % 8 == 0 &&
         (g.groups == 1 || g.in_per_group() % 8 == 0);
}

struct WgLayout {
  int64_t o_pad, s_pad, c_chunks, weight_elems;  // prepared weights; weight_elems per copy
  int64_t s8, x_copy_elems;                      // staged x: group rows of s8 values (0: read in place)
  size_t weight_bytes, bytes;
};

constexpr size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

WgLayout wg_layout(const DenseForwardParams& f) {
  const DenseGeometry& g = f.g;
  WgLayout l{};
  const int64_t S = g.in_per_group(), D = g.out_per_group();
  const int copies = g.dtype == DType::f32 ? 2 : 1;
  l.o_pad = (D + kBM - 1) / kBM * kBM;
  l.c_chunks = (S + kBK - 1) / kBK;
  l.s_pad = l.c_chunks * kBK;
  l.weight_elems = g.groups * g.width * l.o_pad * l.s_pad;
  l.weight_bytes = align_up(size_t(l.weight_elems) * 2 * copies, 256);
  if (!x_read_in_place(f)) {
    l.s8 = (S + 7) / 8 * 8;
    l.x_copy_elems = g.batch * g.length * g.groups * l.s8;
  }
  l.bytes = l.weight_bytes + size_t(l.x_copy_elems) * 2 * copies;
  return l;
}

bool device_is_sm90(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return major == 9 && minor == 0;
}

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// A tiled map over a 16-bit tensor (dims innermost first, strides in bytes for dims 1..rank-1),
// 128-byte swizzle, zero fill out of bounds.
CUtensorMap encode_tensor_map(const void* base, DType dtype, int rank, const uint64_t* dims, const uint64_t* strides,
                              const uint32_t* box, const char* what) {
  CUtensorMap map{};
  const uint32_t unit[4] = {1, 1, 1, 1};
  auto encode = tensor_map_encoder();
  const CUresult status =
      encode ? encode(&map, dtype == DType::f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                      cuuint32_t(rank), const_cast<void*>(base), dims, strides, box, unit,
                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
             : CUDA_ERROR_NOT_FOUND;
  if (status != CUDA_SUCCESS)
    throw Error(ErrorKind::runtime, std::string(what) + ": cuTensorMapEncodeTiled failed (CUresult " +
                                        std::to_string(int(status)) + ")");
  return map;
}

template <typename T>
void launch_wgmma_forward(const DenseForwardParams& f, cudaStream_t stream, const char* what) {
  using Tr = WgTraits<T>;
  const DenseGeometry& g = f.g;
  const WgLayout l = wg_layout(f);
  const int64_t S = g.in_per_group(), D = g.out_per_group();
  auto* weights = static_cast<uint16_t*>(f.workspace);
  const unsigned prep_blocks = unsigned(std::min<int64_t>((l.weight_elems + 255) / 256, 4096));
  prepare_wgmma_weights<T><<<prep_blocks, 256, 0, stream>>>(static_cast<const T*>(f.weight), f.w_stride[0],
                                                              f.w_stride[1], f.w_stride[2], D, S, g.width, l.o_pad,
                                                              l.s_pad, l.weight_elems, weights);
  check_launch(what);

  // x as a 4-D map (S, G, L, B) of channel-last rows: a box never crosses into the next group.
  const void* x_base = f.x;
  uint64_t x_dims[4] = {uint64_t(S), uint64_t(g.groups), uint64_t(g.length), uint64_t(g.batch)};
  uint64_t x_strides[3];
  if (l.x_copy_elems == 0) {
    x_strides[0] = uint64_t(g.groups > 1 ? S : f.x_stride[2]) * 2;  // a single group: any aligned value
    x_strides[1] = uint64_t(f.x_stride[2]) * 2;
    x_strides[2] = uint64_t(f.x_stride[0]) * 2;
  } else {
    auto* staged = reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(f.workspace) + l.weight_bytes);
    StageArgs a{f.x,          f.x_stride[0],   f.x_stride[1],     f.x_stride[2],  int32_t(g.groups),
                int32_t(S),   int32_t(l.s8),   int32_t(g.length), l.x_copy_elems, false,
                staged};
    constexpr int64_t kVec = 16 / sizeof(T);
    a.vector_rows = f.x_stride[2] == 1 && reinterpret_cast<uintptr_t>(f.x) % 16 == 0 && f.x_stride[1] % kVec == 0 &&
                    f.x_stride[0] % kVec == 0;
    const dim3 grid(unsigned((g.length + kStageSteps - 1) / kStageSteps),
                    unsigned((g.groups * l.s8 + kStageChannels - 1) / kStageChannels), unsigned(g.batch));
    stage_channel_last<T><<<grid, kStageThreads, 0, stream>>>(a);
    check_launch(what);
    x_base = staged;
    x_dims[0] = uint64_t(l.s8);
    x_dims[3] = uint64_t(g.batch * Tr::kCopies);  // fp32: the lo copies follow the hi copies
    x_strides[0] = uint64_t(l.s8) * 2;
    x_strides[1] = uint64_t(g.groups * l.s8) * 2;
    x_strides[2] = uint64_t(g.length * g.groups * l.s8) * 2;
  }
  const DType mma_dtype = Tr::kSplit ? DType::bf16 : g.dtype;
  const uint32_t x_box[4] = {kBK, 1, kBN, 1};
  const CUtensorMap x_map = encode_tensor_map(x_base, mma_dtype, 4, x_dims, x_strides, x_box, what);
  const uint64_t w_dims[2] = {uint64_t(l.s_pad), uint64_t(l.weight_elems / l.s_pad * Tr::kCopies)};
  const uint64_t w_strides[1] = {uint64_t(l.s_pad) * 2};
  const uint32_t w_box[2] = {kBK, kBM};
  const CUtensorMap w_map = encode_tensor_map(weights, mma_dtype, 2, w_dims, w_strides, w_box, what);

  WgParams p{};
  p.y = f.y;
  p.bias = f.bias;
  for (int d = 0; d < 3; ++d) p.y_stride[d] = f.y_stride[d];
  p.bias_stride = f.bias_stride;
  p.batch = int32_t(g.batch);
  p.groups = int32_t(g.groups);
  p.out_g = int32_t(D);
  p.length = int32_t(g.length);
  p.width = int32_t(g.width);
  p.dilation = int32_t(g.dilation);
  p.c_chunks = int32_t(l.c_chunks);
  p.o_tiles = int32_t(l.o_pad / kBM);
  p.t_tiles = int32_t((g.length + kBN - 1) / kBN);
  p.o_pad = int32_t(l.o_pad);
  p.w_lo_rows = int32_t(l.weight_elems / l.s_pad);
  p.silu = g.silu;
  p.tiles = int64_t(p.o_tiles) * p.t_tiles * g.batch * g.groups;

  int device = 0, sms = 0;
  check_cuda(cudaGetDevice(&device), what);
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), what);
  check_cuda(cudaFuncSetAttribute(dense_wgmma_forward<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(Tr::kSmemBytes)),
             what);
  const unsigned grid = unsigned(std::min<int64_t>(p.tiles, sms));
  dense_wgmma_forward<T><<<grid, kThreads, Tr::kSmemBytes, stream>>>(w_map, x_map, p);
  check_launch(what);
}

}  // namespace

bool dense_wgmma_forward_supported(const DenseForwardParams& f, int device) {
#ifndef CAUSALCONV_HAS_SM90A
  (void)f;
  (void)device;
  return false;
#else
  const DenseGeometry& g = f.g;
  const int64_t S = g.in_per_group(), D = g.out_per_group();
  if (S < 32 || D < 32 || g.batch * g.length == 0) return false;  // tiles mostly padding: dense_tc.cu
  if (g.length >= kMaxCoordinate || (g.width - 1) * g.dilation >= kMaxCoordinate) return false;
  const WgLayout l = wg_layout(f);
  if (l.weight_elems / l.s_pad * 2 >= kMaxCoordinate || 2 * g.batch >= kMaxCoordinate) return false;
  if (l.x_copy_elems && (g.batch > 65535 || g.groups * l.s8 + kStageChannels >= kMaxCoordinate))
    return false;  // the staging grid and its 32-bit channel index
  return tensor_map_encoder() != nullptr && device_is_sm90(device);
#endif
}

size_t dense_wgmma_forward_workspace_bytes(const DenseForwardParams& f) { return wg_layout(f).bytes; }

void launch_dense_wgmma_forward(const DenseForwardParams& f, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  constexpr const char* what = "causal_conv1d forward (dense, Hopper tensor cores)";
  switch (f.g.dtype) {
    case DType::f32: launch_wgmma_forward<float>(f, s, what); break;
    case DType::f16: launch_wgmma_forward<__half>(f, s, what); break;
    case DType::bf16: launch_wgmma_forward<__nv_bfloat16>(f, s, what); break;
    case DType::f64: break;  // rejected by validation
  }
}

}  // namespace causalconv::detail
