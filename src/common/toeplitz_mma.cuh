// A depthwise causal filter on the tensor cores: the blocked Toeplitz form.
//
// Math. One channel, filter w[0..K-1], correlation y[t] = sum_k w[k] u[t-(K-1-k)],
// i.e. y[t] = sum_s wr[s] u[t-s] with the lag-ordered filter wr[s] = w[K-1-s]
// (zero outside [0, K)). Cut time into chunks of 16 steps: output chunk j holds
// y[16j + r], input chunk m holds u[16m + c] (r, c in [0, 16)). Then
//     y_chunk[j] = sum_{i=0}^{nb-1} T_i · u_chunk[j-i],   T_i[r][c] = wr[16i + r - c],
// with nb = floor((K+14)/16) + 1 Toeplitz blocks (block i reaches lags 16i-15 .. 16i+15).
// Chunks before t = 0 are zero (the causal padding). Several chunks of the same
// channel form the GEMM's N dimension: for 8 consecutive output chunks J..J+7,
//     D[16 x 8] += T_i[16 x 16] · B_i[16 x 8],   B_i[c][n] = u[16(J+n-i) + c],
// one mma.sync.m16n8k16 (fp32 accumulators) per block i and 8 output chunks.
// For 16-bit storage types the operands are the stored values themselves, so the only
// rounding is the fp32 accumulation (as on the CUDA cores).
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16" with .f16/.bf16;
// g = lane / 4, q = lane % 4; each .b32 register holds two 16-bit values, the lower
// column/row index in the low half):
//   A (16x16, row-major): reg0 = (row g,   cols 2q, 2q+1)   reg1 = (row g+8, cols 2q, 2q+1)
//                         reg2 = (row g,   cols 2q+8, 2q+9) reg3 = (row g+8, cols 2q+8, 2q+9)
//   B (16x8, "col"):      reg0 = (rows 2q, 2q+1,   col g)   reg1 = (rows 2q+8, 2q+9, col g)
//   C/D (16x8, fp32):     c0, c1 = (row g, cols 2q, 2q+1)   c2, c3 = (row g+8, cols 2q, 2q+1)
// ldmatrix.m8n8.x4 (non-transposed): lanes 8i..8i+7 give the 16-byte row addresses of
// matrix i; register i of lane l receives matrix i's row l/4, elements 2(l%4), 2(l%4)+1.
// A B column is one input chunk (16 contiguous values = two 16-byte rows of ldmatrix),
// so matrix 0/1 = chunks J-i..J-i+7, values 0-7 / 8-15 give reg0/reg1 of B exactly.
// (The same conventions as the dense tensor-core kernel, verified on the H200.)
//
// Shared-memory input tile: chunk m (local index) occupies two 16-byte units; unit
// (m, h) sits at unit 2m + (h ^ ((m >> 2) & 1)). ldmatrix serves 8 rows per phase;
// for any 8 consecutive chunks this swizzle puts their rows in 8 distinct bank groups
// (without it, rows 32 bytes apart collide two-way), whatever the shift i.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__) || defined(CAUSALCONV_CUDA_EMULATION)
#include "common/async_copy.cuh"
#include "common/cuda_math.cuh"
#include "common/vector_access.cuh"
#include "common/warp_mma.cuh"

namespace causalconv::detail {

// Block shape of the Toeplitz kernels: 4 warps, each making 32 output chunks (four
// m16n8 tiles of 8 chunks) of a 2048-step tile.
struct ToeplitzTile {
  static constexpr int kChunk = 16;  // steps per chunk: the MMA's M and K
  static constexpr int kThreads = 128;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kChunks = 128;  // output chunks per tile
  static constexpr int kOutputs = kChunks * kChunk;
  static constexpr int kWarpChunks = kChunks / kWarps;  // 32
  static constexpr int kWarpTiles = kWarpChunks / 8;   // m16n8 accumulator tiles per warp: 4
};

// Number of Toeplitz blocks T_0..T_{nb-1} of a width-K filter.
__host__ __device__ constexpr int toeplitz_blocks(int width) { return (width + 14) / 16 + 1; }

// The block-count template argument the 16-step Toeplitz kernels take for width K (3, 5, 9 or 17:
// up to K 32, 64, 128, 256).
__host__ __device__ constexpr int toeplitz_max_blocks(int64_t width) {
  const int blocks = toeplitz_blocks(int(width));
  return blocks <= 3 ? 3 : blocks <= 5 ? 5 : blocks <= 9 ? 9 : 17;
}

// Calls f(std::integral_constant<int, toeplitz_max_blocks(width)>{}).
template <typename F>
void with_toeplitz_max_blocks(int64_t width, F&& f) {
  switch (toeplitz_max_blocks(width)) {
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 9: f(std::integral_constant<int, 9>{}); break;
    default: f(std::integral_constant<int, 17>{}); break;
  }
}

// Byte offset of 16-byte unit h (0: values 0-7, 1: values 8-15) of local chunk m.
__device__ __forceinline__ int toeplitz_unit_offset(int m, int h) { return 16 * (2 * m + (h ^ ((m >> 2) & 1))); }

template <typename T>
__device__ __forceinline__ uint32_t bits16(T v) {
  static_assert(sizeof(T) == 2, "16-bit MMA operands");
  uint16_t bits;
  memcpy(&bits, &v, 2);
  return bits;
}

// Two 16-bit values as one MMA operand register (the first in the low half).
template <typename T>
__device__ __forceinline__ uint32_t pack_pair(T lo, T hi) {
  return bits16(lo) | (bits16(hi) << 16);
}

// The Toeplitz A fragments of this lane for blocks i < blocks (zero beyond). wr_s
// holds the lag-ordered filter with 16 zeros before it: wr_s[16 + s] = wr[s] for
// s in [-16, 16 * kMaxBlocks), zero outside [0, K).
template <int kMaxBlocks, typename T>
__device__ __forceinline__ void toeplitz_a_fragments(uint32_t (&a)[kMaxBlocks][4], const T* wr_s, int blocks,
                                                     int lane) {
  const int g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int i = 0; i < kMaxBlocks; ++i) {
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
      const int row = g + 8 * (reg & 1), col = 2 * q + 8 * (reg >> 1);
      const int s = 16 * i + row - col;  // lag of (row, col); (row, col + 1) has lag s - 1
      a[i][reg] = i < blocks ? pack_pair(wr_s[16 + s], wr_s[15 + s]) : 0u;
    }
  }
}

// Staging of a 16-bit input row into the swizzled tile: units of 8 values (16 bytes),
// unit u of a tile covering steps first_step + 8u .. + 7; kMaxBlocks - 1 halo chunks. (The
// staging helpers below also take fp32 rows: 4 values a unit.)
template <int kMaxBlocks>
struct ToeplitzStage {
  static constexpr int kUnits = 2 * (ToeplitzTile::kChunks + kMaxBlocks - 1);
  static constexpr int kPerThread = (kUnits + ToeplitzTile::kThreads - 1) / ToeplitzTile::kThreads;
  static constexpr int kInBytes = 16 * kUnits;
};

// Values of T in one 16-byte unit (8 of a 16-bit type, 4 fp32).
template <typename T>
__host__ __device__ constexpr int toeplitz_unit_values() {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "16-bit or fp32 rows");
  return 16 / int(sizeof(T));
}

// Rows off the 16-byte boundary (odd L in a contiguous tensor). Staged by element they ran 2.4x
// slower than aligned rows (bf16 L8191 K9 110 us against 41). With this flag the depthwise
// row-walking Toeplitz kernels walk such a row from the 16-byte boundary before it, `lead` values
// early, when every row they read and write lies the same distance past a boundary
// (toeplitz_shared_lead), so the walk's units are 16-byte units of all of them. Walked step s is row
// step s - lead: the walked row is the row behind `lead` zeros, whose causal convolution is the
// row's own shifted by lead. Staging: 16-byte copies, the first unit loaded and masked by its thread
// (it holds the previous row's tail); stores skip the first `lead` outputs. Measured on the H200
// (session 30, bf16 B1 C4096 L8191 forward): K9 110.3 -> 54.2 us, K33 110.9 -> 59.4, K128
// 120.9 -> 71.1, K256 146.0 -> 93.1; fwd+bwd K33 288 -> 207, K128 349 -> 291. false: by element.
constexpr bool kToeplitzShiftedRows = true;

// Steps a row-walking Toeplitz kernel walks for rows of `length` values of elem_bytes bytes: up to a
// unit's values minus one more where rows may be walked from the boundary before them. The backward
// tiles all of them: a spare last tile wherever the lead pushes the row past a tile boundary (bf16
// L8191: leads 2-7, 7 rows in 8), a whole tile's MMAs for at most 7 outputs. The depthwise Toeplitz
// forwards tile only the row's own length, and the block that walked the last tile computes the
// walk's few steps past it (its tail) by depthwise_walk_tail, 16 threads an output. Why: against the
// spare tile on the H100 (session 34, side by side, B1 D4096 L8191) bf16 K128 73.0 -> 64.2 us, K256
// 94.8 -> 85.3; fp32 K128 272.2 -> 210.7 (session 30's direct loop for those outputs, one thread's
// serial chain of K dependent loads, lost: K128 97 us).
__host__ __device__ constexpr int64_t toeplitz_walk_length(int64_t length, bool rows_aligned, int elem_bytes) {
  return length + (kToeplitzShiftedRows && !rows_aligned ? 16 / elem_bytes - 1 : 0);
}

// Calls f(std::bool_constant<shifted>), the kernels' kShiftedRows: true only where some row is off
// the 16-byte boundary, so that aligned rows keep the unshifted kernels' code (the shifted ones
// hold the lead and the walk's pointers in registers too).
template <typename F>
void with_row_walk(bool rows_aligned, F&& f) {
  if constexpr (kToeplitzShiftedRows) {
    if (!rows_aligned) {
      f(std::true_type{});
      return;
    }
  }
  f(std::false_type{});
}

// The lead of rows a and b (and c unless null): their values of T past the 16-byte boundary before
// them when they all share it, else 0 (the rows are then staged and stored by element).
template <typename T>
__device__ __forceinline__ int toeplitz_shared_lead(const void* a, const void* b, const void* c = nullptr) {
  const uintptr_t offset = reinterpret_cast<uintptr_t>(a) & 15;
  const bool shared = (reinterpret_cast<uintptr_t>(b) & 15) == offset &&
                      (c == nullptr || (reinterpret_cast<uintptr_t>(c) & 15) == offset);
  return shared ? int(offset / sizeof(T)) : 0;
}

// v[e] = row[first_step + V u .. + V - 1] for u = threadIdx.x + e * kThreads < units (V values of T
// a unit), as raw values, zero outside [0, n). A unit wholly inside the row and 16-byte aligned is
// one 16-byte load; others (the causal padding, the row's end, unaligned rows) go by element.
template <int kPerThread, typename T>
__device__ __forceinline__ void toeplitz_load_units(uint4 (&v)[kPerThread], const T* row, int64_t first_step,
                                                    int units, int64_t n) {
  constexpr int kValues = toeplitz_unit_values<T>();
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const int u = int(threadIdx.x) + e * ToeplitzTile::kThreads;
    if (u >= units) continue;
    const int64_t t = first_step + kValues * int64_t(u);
    if (t >= 0 && t + kValues <= n && (reinterpret_cast<uintptr_t>(row + t) & 15) == 0) {
      v[e] = *reinterpret_cast<const uint4*>(row + t);
    } else {
      T vals[kValues];
#pragma unroll
      for (int j = 0; j < kValues; ++j) vals[j] = (t + j >= 0 && t + j < n) ? row[t + j] : from_float<T>(0.0f);
      if constexpr (kValues == 8) {
        v[e] = make_uint4(pack_pair(vals[0], vals[1]), pack_pair(vals[2], vals[3]), pack_pair(vals[4], vals[5]),
                          pack_pair(vals[6], vals[7]));
      } else {
        memcpy(&v[e], vals, 16);
      }
    }
  }
}

// Unit u of v (toeplitz_load_units) to byte unit_offset(u) of in_s.
template <int kPerThread, typename UnitOffset>
__device__ __forceinline__ void toeplitz_store_units(unsigned char* in_s, const uint4 (&v)[kPerThread], int units,
                                                     UnitOffset unit_offset) {
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const int u = int(threadIdx.x) + e * ToeplitzTile::kThreads;
    if (u < units) *reinterpret_cast<uint4*>(in_s + unit_offset(u)) = v[e];
  }
}

// row[j0 + i] = out_s[i] for lead <= j0 + i < n, i < kOutputs: 16-byte stores where aligned. Unit u
// (V = toeplitz_unit_values<T>() outputs from j0 + V u) sits at element out_offset(u) of out_s.
// lead: of a walk from the boundary before the row (kToeplitzShiftedRows), whose first steps are
// not the row's.
template <typename T, typename OutOffset>
__device__ __forceinline__ void toeplitz_store_outputs(T* row, const T* out_s, int64_t j0, int64_t n,
                                                       OutOffset out_offset, int lead = 0) {
  constexpr int kValues = toeplitz_unit_values<T>(), kUnits = ToeplitzTile::kOutputs / kValues;
#pragma unroll
  for (int e = 0; e < kUnits / ToeplitzTile::kThreads; ++e) {
    const int u = int(threadIdx.x) + e * ToeplitzTile::kThreads;
    const int64_t t = j0 + kValues * int64_t(u);
    const int64_t valid = n - t;
    const T* const src = out_s + out_offset(u);
    if (lead > 0 && t < lead) {  // the walk's first unit (t = 0): its first `lead` steps are not the row's
      for (int j = lead; j < kValues && j < valid; ++j) row[t + j] = src[j];
    } else if (valid >= kValues && (reinterpret_cast<uintptr_t>(row + t) & 15) == 0) {
      *reinterpret_cast<uint4*>(row + t) = *reinterpret_cast<const uint4*>(src);
    } else {
      for (int j = 0; j < kValues && j < valid; ++j) row[t + j] = src[j];
    }
  }
}

// The same from a contiguous output tile.
template <typename T>
__device__ __forceinline__ void toeplitz_store_outputs(T* row, const T* out_s, int64_t j0, int64_t n, int lead = 0) {
  toeplitz_store_outputs(row, out_s, j0, n, [](int u) { return toeplitz_unit_values<T>() * u; }, lead);
}

// Asynchronous staging (cp.async, 16 bytes per unit, L1 bypassed) by the block's
// ToeplitzTile::kThreads threads: unit u of the tile, at byte unit_offset(u) of in_s, holds steps
// first_step + V u .. + V - 1 of a 16-byte aligned row (V = toeplitz_unit_values<T>()), zero
// outside [lead, n). first_step is a multiple of V, so a unit is wholly before the row or starts
// inside it; the row's last unit is zero-filled past n by the copy itself (src-size < 16). With a
// lead (a walk from the boundary before the row, kToeplitzShiftedRows), the unit at step 0 holds the
// previous row's tail: its thread loads and masks it (cp.async zero-fills only a tail), stored
// before the block's barrier. The rest completes at cp_async_wait.
template <typename T, typename UnitOffset>
__device__ __forceinline__ void toeplitz_stage_units_async(unsigned char* in_s, const T* row, int64_t first_step,
                                                           int units, int64_t n, UnitOffset unit_offset,
                                                           int lead = 0) {
  constexpr int kValues = toeplitz_unit_values<T>();
  if (first_step >= lead && first_step + kValues * int64_t(units) <= n) {  // all inside the row: no bounds per unit
    const T* const src = row + first_step;
    for (int u = int(threadIdx.x); u < units; u += ToeplitzTile::kThreads)
      cp_async16(in_s + unit_offset(u), src + kValues * u, 16);
    return;
  }
  for (int u = int(threadIdx.x); u < units; u += ToeplitzTile::kThreads) {
    const int64_t t = first_step + kValues * int64_t(u);
    if (lead > 0 && t == 0) {
      const int end = n < kValues ? int(n) : kValues;
      *reinterpret_cast<uint4*>(in_s + unit_offset(u)) =
          masked_unit(row, lead * int(sizeof(T)), end * int(sizeof(T)));
      continue;
    }
    const int64_t valid = t < 0 ? 0 : n - t;
    const int bytes = valid >= kValues ? 16 : valid > 0 ? int(sizeof(T) * valid) : 0;
    cp_async16(in_s + unit_offset(u), bytes > 0 ? row + t : row, bytes);
  }
}

// Stages units of row into in_s at byte unit_offset(u): cp.async on 16-byte aligned rows (zero
// before `lead`, as toeplitz_stage_units_async), else synchronously (the element path of unaligned
// rows), up to kMaxUnits units.
template <int kMaxUnits, typename T, typename UnitOffset>
__device__ __forceinline__ void toeplitz_stage_units(unsigned char* in_s, const T* row, bool aligned,
                                                     int64_t first_step, int units, int64_t n,
                                                     UnitOffset unit_offset, int lead = 0) {
  if (aligned) {
    toeplitz_stage_units_async(in_s, row, first_step, units, n, unit_offset, lead);
  } else {
    uint4 v[(kMaxUnits + ToeplitzTile::kThreads - 1) / ToeplitzTile::kThreads];
    toeplitz_load_units(v, row, first_step, units, n);
    toeplitz_store_units(in_s, v, units, unit_offset);
  }
}

// toeplitz_stage_units into the swizzled tile of 16-step chunks of a 16-bit row.
template <int kMaxUnits, typename T>
__device__ __forceinline__ void toeplitz_stage(unsigned char* in_s, const T* row, bool aligned, int64_t first_step,
                                               int units, int64_t n, int lead = 0) {
  toeplitz_stage_units<kMaxUnits>(
      in_s, row, aligned, first_step, units, n, [](int u) { return toeplitz_unit_offset(u >> 1, u & 1); }, lead);
}

// Output pairs straight from the accumulators of toeplitz_mma_tiles. Lane (g, q) of an
// m16n8 tile holds chunks 2q, 2q+1 at steps g, g+8; one shuffle with lane g^1 gives each
// lane two pairs of adjacent steps of one chunk: chunk 2q + (g & 1), steps s0, s0+1 and
// s0+8, s0+9 with s0 = g & ~1. v: the lane's four values of the tile (acc[e] rounded to
// the storage type); pair: the two pairs, the lower step in the low half.
template <typename T>
__device__ __forceinline__ void toeplitz_output_pairs(uint32_t (&pair)[2], const T (&v)[4], int lane) {
  const int g = lane >> 2;
  const bool odd = g & 1;
  const uint32_t send = odd ? pack_pair(v[0], v[2]) : pack_pair(v[1], v[3]);
  const uint32_t got = __shfl_sync(0xffffffffu, send, lane ^ 4);
  if (odd) {  // chunk 2q+1: partner's steps g-1, g+7 below own g, g+8
    pair[0] = (got & 0xffffu) | (bits16(v[1]) << 16);
    pair[1] = (got >> 16) | (bits16(v[3]) << 16);
  } else {  // chunk 2q: own steps g, g+8 below partner's g+1, g+9
    pair[0] = bits16(v[0]) | (got << 16);
    pair[1] = bits16(v[2]) | (got & 0xffff0000u);
  }
}

// The lag-ordered filter in shared memory: wr_s[16 + s] = w[K-1-s] for lag s in [0, K),
// zero elsewhere in [-16, 16 * (kMaxBlocks + 1)) (the transposed blocks reach one lag
// further than toeplitz_a_fragments). w: the channel's taps, w_stride: between taps.
template <int kMaxBlocks>
__host__ __device__ constexpr int toeplitz_lag_filter_size() { return 16 * (kMaxBlocks + 2); }

template <int kMaxBlocks, typename T>
__device__ __forceinline__ void toeplitz_lag_filter(T* wr_s, const T* w, int64_t w_stride, int width) {
  for (int i = int(threadIdx.x); i < toeplitz_lag_filter_size<kMaxBlocks>(); i += ToeplitzTile::kThreads) {
    const int s = i - 16;
    wr_s[i] = (s >= 0 && s < width) ? w[int64_t(width - 1 - s) * w_stride] : from_float<T>(0.0f);
  }
}

// Stores one lane's outputs of an m16n8 tile (toeplitz_output_pairs) to row: chunk
// `chunk` (tile-local) at steps s0, s0+1 and s0+8, s0+9 after j0, those in [lead, n). fast: the tile
// lies in [lead, n) and the row is 4-byte aligned.
template <typename T>
__device__ __forceinline__ void toeplitz_store_pairs(T* row, int64_t j0, int chunk, int s0, const uint32_t (&pair)[2],
                                                     bool fast, int64_t n, int lead = 0) {
  const int64_t t = j0 + 16 * chunk + s0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t th = t + 8 * h;
    if (fast) {
      *reinterpret_cast<uint32_t*>(row + th) = pair[h];
    } else {
      const uint16_t lo = uint16_t(pair[h] & 0xffffu), hi = uint16_t(pair[h] >> 16);
      if (th < n && !(lead > 0 && th < lead)) memcpy(row + th, &lo, 2);
      if (th + 1 < n && !(lead > 0 && th + 1 < lead)) memcpy(row + th + 1, &hi, 2);
    }
  }
}

#ifndef CAUSALCONV_CUDA_EMULATION
// The block's dynamic shared memory (16-byte aligned).
__device__ __forceinline__ unsigned char* toeplitz_shared() {
  extern __shared__ uint4 toeplitz_smem[];
  return reinterpret_cast<unsigned char*>(toeplitz_smem);
}

// ldmatrix_x4 / ldmatrix_x4_trans (common/warp_mma.cuh) at the row pointer of this lane.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row_address) {
  ldmatrix_x4(r, uint32_t(__cvta_generic_to_shared(row_address)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_address) {
  ldmatrix_x4_trans(r, uint32_t(__cvta_generic_to_shared(row_address)));
}
// stmatrix_x4_trans (common/warp_mma.cuh; sm_90) at the row pointer of this lane.
__device__ __forceinline__ void stmatrix_x4_trans(void* row_address, const uint32_t (&r)[4]) {
  stmatrix_x4_trans(uint32_t(__cvta_generic_to_shared(row_address)), r);
}
#endif  // otherwise tests/cpp/mma_emulation.h provides these

// kTiles (even) m16n8 accumulator tiles of consecutive output chunks: acc[p] covers
// output chunks 8p .. 8p + 7 (counted from this call's first), and output chunk j reads
// input chunks in_chunk0 + j - i (local, i < blocks) of the staged tile in_s.
// acc[p][e] is y at output chunk 8p + 2q + (e & 1), step g + 8 (e >> 1) (g, q: of the lane).
template <bool kHalf, int kMaxBlocks, int kTiles>
__device__ __forceinline__ void toeplitz_mma_tiles(float (&acc)[kTiles][4], const uint32_t (&a)[kMaxBlocks][4],
                                                   const unsigned char* in_s, int blocks, int in_chunk0, int lane) {
  static_assert(kTiles % 2 == 0, "ldmatrix.x4 feeds two tiles");
#pragma unroll
  for (int p = 0; p < kTiles; ++p)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[p][e] = 0.0f;
  // ldmatrix rows: matrix lane/8 = (tile pair member (lane/8)/2, half (lane/8)%2), row lane%8.
  const int mat = lane >> 3, h = mat & 1;
  const int first = in_chunk0 + (mat >> 1) * 8 + (lane & 7);
#pragma unroll
  for (int i = 0; i < kMaxBlocks; ++i) {
    if (i >= blocks) break;  // uniform over the block
#pragma unroll
    for (int pair = 0; pair < kTiles / 2; ++pair) {
      const int m = first + 16 * pair - i;
      uint32_t r[4];
      ldmatrix_x4(r, in_s + toeplitz_unit_offset(m, h));
      mma_m16n8k16<kHalf>(acc[2 * pair], a[i], r[0], r[1]);
      mma_m16n8k16<kHalf>(acc[2 * pair + 1], a[i], r[2], r[3]);
    }
  }
}

// The A fragments of blocks i < blocks in shared memory, one 16-byte entry per (block,
// lane): frag_s[32 i + lane] holds what toeplitz_a_fragments puts in a[i] (kTransposed
// false) or the fragments of the transposed blocks U_i[r][c] = wr[16i + c - r]
// (kTransposed true), which serve the look-ahead band of the backward:
//     dx_chunk[j] = sum_i U_i · g_chunk[j + i]   for dx[t] = sum_s wr[s] g[t + s].
// wr_s: toeplitz_lag_filter.
template <bool kTransposed, typename T>
__device__ __forceinline__ void toeplitz_fragments_to_shared(uint4* frag_s, const T* wr_s, int blocks) {
  for (int e = int(threadIdx.x); e < 32 * blocks; e += ToeplitzTile::kThreads) {
    const int i = e >> 5, g = (e & 31) >> 2, q = e & 3;
    uint32_t r[4];
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
      const int row = g + 8 * (reg & 1), col = 2 * q + 8 * (reg >> 1);
      r[reg] = kTransposed ? pack_pair(wr_s[16 + 16 * i + col - row], wr_s[17 + 16 * i + col - row])
                           : pack_pair(wr_s[16 + 16 * i + row - col], wr_s[15 + 16 * i + row - col]);
    }
    frag_s[e] = make_uint4(r[0], r[1], r[2], r[3]);
  }
}

// As toeplitz_mma_tiles, with block i's A fragment read from frag_s (one 16-byte load
// per block and lane) and, when kAhead, output chunk j reading input chunk
// in_chunk0 + j + i (the look-ahead band) instead of in_chunk0 + j - i.
template <bool kHalf, bool kAhead, int kTiles>
__device__ __forceinline__ void toeplitz_mma_tiles_shared(float (&acc)[kTiles][4], const uint4* frag_s,
                                                          const unsigned char* in_s, int blocks, int in_chunk0,
                                                          int lane) {
  static_assert(kTiles % 2 == 0, "ldmatrix.x4 feeds two tiles");
#pragma unroll
  for (int p = 0; p < kTiles; ++p)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[p][e] = 0.0f;
  const int mat = lane >> 3, h = mat & 1;
  const int first = in_chunk0 + (mat >> 1) * 8 + (lane & 7);
#pragma unroll 1
  for (int i = 0; i < blocks; ++i) {
    const uint4 f = frag_s[32 * i + lane];
    const uint32_t a[4] = {f.x, f.y, f.z, f.w};
#pragma unroll
    for (int pair = 0; pair < kTiles / 2; ++pair) {
      const int m = first + 16 * pair + (kAhead ? i : -i);
      uint32_t r[4];
      ldmatrix_x4(r, in_s + toeplitz_unit_offset(m, h));
      mma_m16n8k16<kHalf>(acc[2 * pair], a, r[0], r[1]);
      mma_m16n8k16<kHalf>(acc[2 * pair + 1], a, r[2], r[3]);
    }
  }
}

// Weight gradients as lag-block x time products (the dweight form of the tensor-core
// backward): over 16 chunks of time, lag block a (lags 16a - 15 .. 16a + 15) gets
//     D_a[c][c'] += sum_{j < 16} g[16(jg + j) + c] u[16(jg - a + j) + c'],
// a 16x16 product with time as the K dimension, both operands by ldmatrix.trans from
// swizzled tiles: g_chunk is jg's local chunk in g_s, u_chunk (jg - a)'s in u_s.
// acc[h][e] is D_a[c][c'] at c = g + 8 (e >> 1), c' = 8h + 2q + (e & 1) (g, q: of the lane).
template <bool kHalf>
__device__ __forceinline__ void toeplitz_lag_block_mma(float (&acc)[2][4], const unsigned char* g_s, int g_chunk,
                                                       const unsigned char* u_s, int u_chunk, int lane) {
  const int mat = lane >> 3;
  uint32_t ga[4], ub[4];  // A[c][chunk] (g), B[chunk][c'] (u)
  ldmatrix_x4_trans(ga, g_s + toeplitz_unit_offset(g_chunk + (mat >> 1) * 8 + (lane & 7), mat & 1));
  ldmatrix_x4_trans(ub, u_s + toeplitz_unit_offset(u_chunk + (mat & 1) * 8 + (lane & 7), mat >> 1));
  mma_m16n8k16<kHalf>(acc[0], ga, ub[0], ub[1]);
  mma_m16n8k16<kHalf>(acc[1], ga, ub[2], ub[3]);
}

// D_a of toeplitz_lag_block_mma, row-major fp32: block_s[16 c + c'].
__device__ __forceinline__ void toeplitz_lag_block_store(float* block_s, const float (&acc)[2][4], int lane) {
  const int g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int e = 0; e < 4; ++e) block_s[16 * (g + 8 * (e >> 1)) + 8 * h + 2 * q + (e & 1)] = acc[h][e];
}

// sum_t g[t] u[t - s] for lag s >= 0 from the stored lag blocks D_0 .. D_{blocks-1}
// (lag_s[256 a + 16 c + c']): the 16 terms with 16a + c - c' = s, c in order (a fixed
// order, so the result is bitwise reproducible). The tap of a width-K filter is K-1-s.
__device__ __forceinline__ float toeplitz_lag_sum(const float* lag_s, int blocks, int s) {
  float sum = 0.0f;
  for (int cc = 0; cc < 16; ++cc) {
    const int d = s - cc, a = (d + 15) >> 4, c2 = 16 * a - d;  // a = ceil(d / 16), c2 in [0, 16)
    if (a < blocks) sum += lag_s[256 * a + 16 * cc + c2];
  }
  return sum;
}

// Byte offset of step `step` of local chunk m in a swizzled tile (for element access).
__device__ __forceinline__ int toeplitz_element_offset(int m, int step) {
  return toeplitz_unit_offset(m, step >> 3) + 2 * (step & 7);
}

}  // namespace causalconv::detail
#endif
