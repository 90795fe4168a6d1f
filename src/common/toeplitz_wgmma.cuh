// Shared pieces of the warpgroup-MMA (sm_90a) Toeplitz kernels: 64-step chunks, staged rows
// of 128 bytes under the 128-byte swizzle (common/sm90_primitives.cuh), 1024-byte aligned
// shared memory.
#pragma once

#include <cstdint>
#include <type_traits>

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
#pragma unroll
  for (int m = 0; m < Tile::kOutputs / 8 / Tile::kThreads; ++m) {
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

}  // namespace causalconv::detail
