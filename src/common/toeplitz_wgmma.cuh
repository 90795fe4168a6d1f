// Shared pieces of the warpgroup-MMA (sm_90a) Toeplitz kernels: 64-step chunks, staged rows
// of 128 bytes under the 128-byte swizzle (common/sm90_primitives.cuh), 1024-byte aligned
// shared memory.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/async_copy.cuh"
#include "common/sm90_primitives.cuh"
#include "common/vector_access.cuh"

namespace causalconv::detail {

struct WgmmaToeplitzTile {
  static constexpr int kChunk = 64;    // steps per chunk: the MMA's M and K per Toeplitz block
  static constexpr int kThreads = 128;  // one warpgroup
  static constexpr int kChunks = 64;   // output chunks per tile: the MMA's N
  static constexpr int kOutputs = kChunks * kChunk;
  static constexpr int kRowBytes = 2 * kChunk;  // one staged chunk: 128 bytes
};

// Number of Toeplitz blocks T_0..T_{nb-1} of a width-K filter at 64-step chunks.
__host__ __device__ constexpr int toeplitz64_blocks(int width) { return (width + 62) / 64 + 1; }

// Calls f(std::integral_constant<int, toeplitz64_blocks(width)>{}), 2 to 5 (K up to 256): the
// launchers' choice of a 64-step-chunk kernel's template argument.
template <typename F>
void with_toeplitz64_blocks(int64_t width, F&& f) {
  switch (toeplitz64_blocks(int(width))) {
    case 2: f(std::integral_constant<int, 2>{}); break;   // K <= 65
    case 3: f(std::integral_constant<int, 3>{}); break;   // K <= 129
    case 4: f(std::integral_constant<int, 4>{}); break;   // K <= 193
    default: f(std::integral_constant<int, 5>{}); break;  // K <= 256
  }
}

// Byte offset of the 16-byte unit k (values 8k .. 8k + 7) of row r in a 1024-byte aligned tile
// under the 128-byte swizzle.
__device__ __forceinline__ int swizzled_unit_offset(int r, int k) { return r * 128 + ((k ^ (r & 7)) << 4); }

// Output i (< kOutputs) of the tile whose unit u (steps 8u .. + 7) is unit u % 8 of swizzled row
// first_row + u / 8 of `tile` (as wgmma_toeplitz_store_tile reads it).
template <typename T>
__device__ __forceinline__ T& wgmma_toeplitz_output(unsigned char* tile, int first_row, int i) {
  return *reinterpret_cast<T*>(tile + swizzled_unit_offset(first_row + (i >> 6), (i >> 3) & 7) + 2 * (i & 7));
}

// row[j0 + i] = the output tile's step i, for lead <= j0 + i < n, i < kOutputs: unit u (steps
// 8u .. + 7) is unit u % 8 of swizzled row first_row + u / 8 of `tile` (1024-byte aligned); 16-byte
// stores (the row is 16-byte aligned). lead: of a walk from the boundary before the row
// (kToeplitzShiftedRows, common/toeplitz_mma.cuh), whose first steps are not the row's.
template <typename T>
__device__ __forceinline__ void wgmma_toeplitz_store_tile(T* row, const unsigned char* tile, int first_row,
                                                          int64_t j0, int64_t n, int lead = 0) {
  using Tile = WgmmaToeplitzTile;
  constexpr int kUnits = Tile::kOutputs / 8 / Tile::kThreads;  // per thread
  if (lead == 0 && j0 + Tile::kOutputs <= n) {
    // The whole tile: every load before the first store, so that their latencies overlap (one unit at
    // a time, each 16-byte store waited on its load: the b2b backward's profile, session 51).
    uint4 units[kUnits];
#pragma unroll
    for (int m = 0; m < kUnits; ++m) {
      const int u = int(threadIdx.x) + m * Tile::kThreads;
      units[m] = *reinterpret_cast<const uint4*>(tile + swizzled_unit_offset(first_row + (u >> 3), u & 7));
    }
#pragma unroll
    for (int m = 0; m < kUnits; ++m) store_raw16(row + j0 + 8 * (int(threadIdx.x) + m * Tile::kThreads), units[m]);
    return;
  }
#pragma unroll
  for (int m = 0; m < kUnits; ++m) {
    const int u = int(threadIdx.x) + m * Tile::kThreads;
    const int64_t t = j0 + 8 * int64_t(u);
    const unsigned char* src = tile + swizzled_unit_offset(first_row + (u >> 3), u & 7);
    if (lead > 0 && t < lead) {  // the walk's first unit (t = 0)
      for (int k = lead; k < 8 && t + k < n; ++k) row[t + k] = reinterpret_cast<const T*>(src)[k];
    } else if (t + 8 <= n) {
      store_raw16(row + t, *reinterpret_cast<const uint4*>(src));
    } else {
      for (int k = 0; k < 8 && t + k < n; ++k) row[t + k] = reinterpret_cast<const T*>(src)[k];
    }
  }
}

// Rows off the 16-byte grid (odd L: each row its own `lead` values past a boundary) are staged
// for the wgmma forms in two steps: raw units copied from each row's 16-byte grid
// (cp_async_raw_unit, common/async_copy.cuh), raw unit u at unit u's place, then realigned in place
// by wgmma_realign_rows, so the MMAs read the rows as the aligned forms stage them.

// Realigns kRows staged rows of kChunkRows swizzled chunk rows in place (after a barrier that follows
// every thread's raw copies, cp_async_raw_unit): row j from chunk row first_row(j), its units
// read at byte shift(j) = 2 lead of the raw unit pair (u, u + 1), raw unit 8 kChunkRows at spill(j).
// A task is one chunk row: its 8 units in order, each written after the raw unit after it is read;
// the next chunk row's first raw unit is read by every task before a barrier. Rows with shift 0
// are left as they are. The caller fences (async proxy) and synchronizes before the MMAs read them.
template <int kRows, int kChunkRows, typename FirstRow, typename Shift, typename Spill>
__device__ __forceinline__ void wgmma_realign_rows(unsigned char* smem, FirstRow first_row, Shift shift,
                                                   Spill spill) {
  constexpr int kTasks = kRows * kChunkRows, kThreads = WgmmaToeplitzTile::kThreads;
  constexpr int kPasses = (kTasks + kThreads - 1) / kThreads;
  uint4 next[kPasses];
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    const int f = int(threadIdx.x) + pass * kThreads, j = f / kChunkRows, m = f - j * kChunkRows;
    if (f < kTasks && shift(j) != 0) {
      const unsigned char* const after =
          m + 1 < kChunkRows ? smem + swizzled_unit_offset(first_row(j) + m + 1, 0) : spill(j);
      next[pass] = *reinterpret_cast<const uint4*>(after);
    }
  }
  __syncthreads();
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    const int f = int(threadIdx.x) + pass * kThreads, j = f / kChunkRows, m = f - j * kChunkRows;
    if (f >= kTasks || shift(j) == 0) continue;
    const int r = first_row(j) + m, by = shift(j);
    uint4 unit = *reinterpret_cast<const uint4*>(smem + swizzled_unit_offset(r, 0));
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const uint4 after = k < 7 ? *reinterpret_cast<const uint4*>(smem + swizzled_unit_offset(r, k + 1)) : next[pass];
      *reinterpret_cast<uint4*>(smem + swizzled_unit_offset(r, k)) = unit_at_byte(unit, after, by);
      unit = after;
    }
  }
}

// row[j0 + i] = the output tile's step i (as wgmma_toeplitz_store_tile) for a row `lead` values past
// the 16-byte boundary before it: the row's 16-byte units (steps j0 + 8v - lead .. + 7, v <= 512),
// each from tile units v - 1 and v, by 16-byte stores where the unit's steps all lie in this tile
// and before n, by element at the tile's two ends and the row's end.
template <typename T>
__device__ __forceinline__ void wgmma_toeplitz_store_tile_realigned(T* row, const unsigned char* tile, int first_row,
                                                                    int64_t j0, int64_t n, int lead) {
  using Tile = WgmmaToeplitzTile;
  static_assert(sizeof(T) == 2, "16-bit rows");
  if (lead == 0) {
    wgmma_toeplitz_store_tile(row, tile, first_row, j0, n);
    return;
  }
  auto unit = [&](int u) { return tile + swizzled_unit_offset(first_row + (u >> 3), u & 7); };
  const int64_t end = j0 + Tile::kOutputs < n ? j0 + Tile::kOutputs : n;
  for (int v = int(threadIdx.x); v <= Tile::kOutputs / 8; v += Tile::kThreads) {
    const int64_t t = j0 + 8 * int64_t(v) - lead;
    if (t >= j0 && t + 8 <= end) {
      store_raw16(row + t, unit_at_byte(*reinterpret_cast<const uint4*>(unit(v - 1)),
                                        *reinterpret_cast<const uint4*>(unit(v)), 2 * (8 - lead)));
    } else {
      for (int k = 0; k < 8; ++k) {
        const int64_t s = t + k;
        if (s >= j0 && s < end) row[s] = reinterpret_cast<const T*>(unit(int(s - j0) >> 3))[(s - j0) & 7];
      }
    }
  }
}

}  // namespace causalconv::detail
