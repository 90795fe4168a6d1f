// Global -> shared copies that need no registers: cp.async (sm_80+), 16 bytes at a time.
// A block issues all of a tile's copies, then waits once; every copy is in flight at once
// without holding the data in registers. (Host builds under tests/cpp/cuda_emulation.h
// get their emulation from there: cp_async16's copies land at the wait that retires their
// group, as they may on the GPU.)
#pragma once

#include <cstdint>

#include "common/vector_access.cuh"

namespace causalconv::detail {

#ifndef CAUSALCONV_CUDA_EMULATION
// 16 bytes from global src to shared dst; both 16-byte aligned. Bypasses L1 (.cg).
__device__ __forceinline__ void copy_async16(void* dst, const void* src) {
  const uint32_t shared_address = uint32_t(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address), "l"(src) : "memory");
}

// Waits for every copy this thread issued; a __syncthreads() after it publishes them to the block.
__device__ __forceinline__ void copy_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Pipelines of groups: 16 bytes into shared memory, reading `bytes` (0..16) from src and
// zero-filling the rest (nothing is read at 0); cp_async_commit closes this thread's group of
// copies issued since the last commit, cp_async_wait<n> waits until at most n of its groups
// are still in flight. A thread reading only what it copied itself needs no barrier after it.
__device__ __forceinline__ void cp_async16(void* dst_shared, const void* src, int bytes) {
  const uint32_t dst = uint32_t(__cvta_generic_to_shared(dst_shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
#endif

// One 16-byte unit of a row that lies `lead` values of T past the 16-byte boundary before it, copied
// raw from the row's 16-byte grid (grid_row = row - lead, 16-byte aligned): the unit at grid_row + t
// (t a multiple of the unit's values), i.e. steps t - lead .. of the row, zero outside [0, n). A
// cp.async (zero-filled past n by the copy itself), except the unit holding step 0 after the
// previous row's tail: loaded and masked by this thread and stored at once (cp.async zero-fills
// only a tail), so it is visible after the same barrier as the copies. interior: the caller knows
// the unit's steps all lie in [0, n).
template <typename T>
__device__ __forceinline__ void cp_async_raw_unit(void* dst_shared, const T* grid_row, int64_t t, int lead, int64_t n,
                                                  bool interior) {
  constexpr int kValues = 16 / int(sizeof(T));
  const T* const src = grid_row + t;
  if (interior) {
    cp_async16(dst_shared, src, 16);
    return;
  }
  const int64_t first = t - lead;  // the unit's first step
  if (first < 0 && first + kValues > 0) {
    const int64_t end = n - first < kValues ? n - first : kValues;
    constexpr int kBytes = int(sizeof(T));
    *reinterpret_cast<uint4*>(dst_shared) = masked_unit(src, int(-first) * kBytes, int(end) * kBytes);
    return;
  }
  const int64_t valid = first < 0 ? 0 : n - first;
  const int bytes = valid >= kValues ? 16 : valid > 0 ? int(valid * int64_t(sizeof(T))) : 0;
  cp_async16(dst_shared, bytes > 0 ? src : grid_row, bytes);
}

}  // namespace causalconv::detail
