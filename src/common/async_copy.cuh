// Global -> shared copies that need no registers: cp.async (sm_80+), 16 bytes at a time.
// A block issues all of a tile's copies, then waits once; every copy is in flight at once
// without holding the data in registers. (Host builds under tests/cpp/cuda_emulation.h
// get their emulation from there: cp_async16's copies land at the wait that retires their
// group, as they may on the GPU.)
#pragma once

#include <cstdint>

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

}  // namespace causalconv::detail
