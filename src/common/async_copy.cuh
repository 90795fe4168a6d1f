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

// Waits for every copy this thread issued; a __syncthreads() after it publishes them to the block.
__device__ __forceinline__ void copy_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
#endif

}  // namespace causalconv::detail
