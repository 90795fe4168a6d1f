// Global -> shared copies that need no registers: cp.async (sm_80+), 16 bytes at a time.
// A block issues all of a tile's copies, then waits once; every copy is in flight at once
// without holding the data in registers. (Host builds under tests/cpp/cuda_emulation.h
// get plain copies from there.)
#pragma once

#include <cstdint>

namespace causalconv::detail {

#ifndef CAUSALCONV_CUDA_EMULATION
// 16 bytes from global src to shared dst; both 16-byte aligned. Bypasses L1 (.cg).
__device__ __forceinline__ void copy_async16(void* dst, const void* src) {
  const uint32_t shared_address = uint32_t(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address), "l"(src) : "memory");
}

// 16 bytes to shared dst: the first src_bytes (0 to 16) from global src, zeros after them
// (nothing is read when src_bytes is 0).
__device__ __forceinline__ void copy_async16_zfill(void* dst, const void* src, int src_bytes) {
  const uint32_t shared_address = uint32_t(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address), "l"(src), "r"(src_bytes)
               : "memory");
}

// Waits for every copy this thread issued; a __syncthreads() after it publishes them to the block.
__device__ __forceinline__ void copy_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Pipelines: close this thread's group of copies issued since the last commit; wait until at
// most kPending of its groups are still in flight. A thread reading only what it copied
// itself needs no barrier after the wait.
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void copy_async_wait_pending() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
#endif

}  // namespace causalconv::detail
