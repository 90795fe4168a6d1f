// Hopper (sm_90a) building blocks: TMA tensor copies, mbarriers and warpgroup MMA (wgmma).
// Device code only; every function compiles to nothing useful below sm_90a, so callers
// guard their kernels with CAUSALCONV_SM90A.
//
// Shared-memory operands use the 128-byte swizzle that TMA writes with
// CU_TENSOR_MAP_SWIZZLE_128B: rows of 128 bytes, the 16-byte chunk c of row r stored at
// chunk c ^ (r % 8), tiles 1024-byte aligned. A tiled TMA copy's innermost start
// coordinate must be a whole 16 bytes (the H200 raises an illegal instruction otherwise, for
// negative and positive coordinates alike); outer coordinates may be anything, negative
// included, and out-of-range elements arrive as zeros.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/warp_mma.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CAUSALCONV_SM90A 1
#elif defined(CAUSALCONV_CUDA_EMULATION)
#define CAUSALCONV_SM90A 1  // the host emulation below stands in for sm_90a
#endif

#ifndef CAUSALCONV_CUDA_EMULATION

namespace causalconv::detail::sm90 {

// The block's dynamic shared memory.
__device__ __forceinline__ uint8_t* dynamic_shared() {
  extern __shared__ uint8_t sm90_dynamic_shared[];
  return sm90_dynamic_shared;
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The block's dynamic shared memory from its first 1024-byte aligned byte (the 128-byte swizzle's
// period; size the request 1024 bytes over). An offset into the shared array rather than an
// integer round trip: through uintptr_t the compiler loses the pointer's address space and its
// accesses become generic LD/ST (the dense kernels' fp32 builders stored that way until session 27).
__device__ __forceinline__ uint8_t* aligned_dynamic_shared() {
  uint8_t* const raw = dynamic_shared();
  return raw + ((1024u - (smem_u32(raw) & 1023u)) & 1023u);
}

// ---- mbarriers ----

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}

// Makes initialised barriers visible to the async proxy (TMA) and the other threads.
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

// Blocks until the phase with parity `parity` of the barrier has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

// ---- TMA: box copies global -> shared, completing on an mbarrier ----

__device__ __forceinline__ void tma_load_2d(void* dst, const void* map, uint64_t* bar, int32_t c0, int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
      ::"r"(smem_u32(dst)), "l"(map), "r"(c0), "r"(c1), "r"(smem_u32(bar))
      : "memory");
}

__device__ __forceinline__ void tma_load_4d(void* dst, const void* map, uint64_t* bar, int32_t c0, int32_t c1,
                                            int32_t c2, int32_t c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];"
      ::"r"(smem_u32(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_u32(bar))
      : "memory");
}

__device__ __forceinline__ void tma_prefetch_descriptor(const void* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}

// ---- TMA: box copies shared -> global (the map's bounds clip the box), in bulk groups ----

// The source must be made visible to the async proxy first (fence_proxy_async_shared by its writers).
__device__ __forceinline__ void tma_store_4d(const void* map, const void* src, int32_t c0, int32_t c1, int32_t c2,
                                             int32_t c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(map),
               "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until at most kPending committed groups still read their shared-memory source.
template <int kPending>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}
// Waits until at most kPending committed groups are still in flight (their writes included).
template <int kPending>
__device__ __forceinline__ void bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(kPending) : "memory");
}

// ---- wgmma ----

// Shared-memory matrix descriptor, 128-byte swizzle. For a K-major operand: rows of 64 16-bit
// values along the reduction (128 bytes), one row per M or N index, 8-row groups 1024 bytes
// apart (`stride`); `leading` is unused in this mode. Step the start address by 32 bytes per
// 16 reduction values. The swizzle applies to absolute address bits, so an operand may start at
// any row r of a swizzled tile (start + r * 128, r % 8 != 0 included) with the base offset
// (bits 49-51) left 0: measured on the H200 (tests/cpp/test_sm90_primitives_cuda.cu), where
// setting it to the period's phase, r % 8, reads the wrong rows.
__device__ __forceinline__ uint64_t smem_descriptor(uint32_t smem_address, uint32_t leading, uint32_t stride) {
  return uint64_t((smem_address & 0x3FFFF) >> 4) | uint64_t((leading >> 4) & 0x3FFF) << 16 |
         uint64_t((stride >> 4) & 0x3FFF) << 32 | uint64_t(1) << 62;
}

// Shared-memory matrix descriptor without swizzle, K-major: the operand is made of 8 x 8 core
// matrices (8 M or N indices x 8 reduction values, each core 128 contiguous bytes, one 16-byte
// row per M or N index); `leading` is the byte distance between cores adjacent along the
// reduction, `stride` between cores adjacent along M or N. The addresses need not be distinct:
// a Toeplitz or Hankel operand may point several cores at the same bytes.
__device__ __forceinline__ uint64_t smem_descriptor_unswizzled(uint32_t smem_address, uint32_t leading,
                                                               uint32_t stride) {
  return uint64_t((smem_address & 0x3FFFF) >> 4) | uint64_t((leading >> 4) & 0x3FFF) << 16 |
         uint64_t((stride >> 4) & 0x3FFF) << 32;
}

// The descriptor of the operand `bytes` (a multiple of 16) past `desc`'s start, in the same
// layout: bitwise what smem_descriptor / smem_descriptor_unswizzled give for that address. The
// start field (bits 0-13) holds the address / 16 and shared addresses stay below 2^18, so this is
// one 32-bit add to the low word that never carries out of the field. Why: built from the address
// at every MMA, each operand's descriptor costs ~5 uniform instructions (add, mask, shift, or, move:
// ~10 an MMA in the sm_90a SASS of the b2b forward); from a descriptor built once, one add.
__device__ __forceinline__ uint64_t descriptor_plus(uint64_t desc, uint32_t bytes) {
  return uint64_t(uint32_t(desc >> 32)) << 32 | (uint32_t(desc) + (bytes >> 4));
}

// 8x8 16-bit matrix moves between shared memory and registers (common/warp_mma.cuh).
using causalconv::detail::ldmatrix_x4_trans;
using causalconv::detail::stmatrix_x4;
using causalconv::detail::stmatrix_x4_trans;

// Orders this thread's ordinary shared-memory writes before later async-proxy reads (wgmma,
// TMA) of the same bytes: write, fence, then signal the reader through an mbarrier.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Waits until `threads` threads (a multiple of 32: whole warps) have arrived at barrier `id`
// (1-15; 0 is __syncthreads'): a barrier of some warps of the block, e.g. the consumer warpgroup
// of a block whose producer warp never comes.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Counts the calling warp towards barrier `id`'s round of `threads` without waiting for it: a
// producer signalling consumers that named_barrier_sync(id, threads) on it.
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// The same barrier, returning whether any of its threads passed `vote` (bar.red.or.pred).
__device__ __forceinline__ bool named_barrier_sync_or(uint32_t id, uint32_t threads, bool vote) {
  uint32_t any;
  asm volatile(
      "{\n"
      ".reg .pred v;\n"
      "setp.ne.u32 v, %1, 0;\n"
      "bar.red.or.pred v, %2, %3, v;\n"
      "selp.u32 %0, 1, 0, v;\n"
      "}\n"
      : "=r"(any)
      : "r"(uint32_t(vote)), "r"(id), "r"(threads)
      : "memory");
  return any != 0;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accumulator reads/writes across wgmma boundaries.
template <int N>
__device__ __forceinline__ void fence_registers(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The accumulator operands of the m64n256 (128 registers) and m64n64 (32) forms: the PTX list
// and the asm output constraints over d.
#define CAUSALCONV_ACC128_LIST "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define CAUSALCONV_ACC32_LIST "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define CAUSALCONV_ACC128_OUT \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define CAUSALCONV_ACC32_OUT \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

// The wgmma instructions (inline asm needs literal operand lists: the macros above); TYPE is
// the PTX operand type, "bf16" or "f16".
// The transpose flags are immediates %131 (A) and %132 (B): 0 K-major, 1 MN-major.
#define CAUSALCONV_WGMMA_M64N256K16(TYPE)                                                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                             \
               "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " "                                \
               CAUSALCONV_ACC128_LIST ", "                                                                             \
               "%128, %129, p, 1, 1, %131, %132;\n}\n"                                                           \
      : CAUSALCONV_ACC128_OUT \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransposeA), "n"(kTransposeB))

// The transpose flags are immediates %35 (A) and %36 (B): 0 K-major, 1 MN-major.
#define CAUSALCONV_WGMMA_M64N64K16_SS(TYPE)                                                                 \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                             \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " "                                \
               CAUSALCONV_ACC32_LIST ", "                                                                             \
               "%32, %33, p, 1, 1, %35, %36;\n}\n"                                                      \
      : CAUSALCONV_ACC32_OUT \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransposeA), "n"(kTransposeB))

// D[64 x N] (+)= A[64 x 16] * B[16 x N], N = 64 or 256, with both operands in shared memory,
// each K-major (0) or MN-major (1), fp32 accumulators in the m64nNk16 fragment layout (N / 2 a
// thread). accumulate == 0 overwrites D. The named forms below.
template <typename T, int kTransposeA, int kTransposeB, int N>
__device__ __forceinline__ void wgmma_m64k16_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b,
                                                uint32_t accumulate) {
  static_assert(N == 64 || N == 256, "the shapes spelled out above");
#ifdef CAUSALCONV_SM90A
  constexpr bool kHalf = std::is_same_v<T, __half>;
  if constexpr (N == 256 && kHalf)
    CAUSALCONV_WGMMA_M64N256K16("f16");
  else if constexpr (N == 256)
    CAUSALCONV_WGMMA_M64N256K16("bf16");
  else if constexpr (kHalf)
    CAUSALCONV_WGMMA_M64N64K16_SS("f16");
  else
    CAUSALCONV_WGMMA_M64N64K16_SS("bf16");
#endif
}

// Both operands K-major.
template <typename T>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b,
                                                  uint32_t accumulate) {
  wgmma_m64k16_ss<T, 0, 0, 256>(d, desc_a, desc_b, accumulate);
}

// A K-major; B N-major as wgmma_m64n64k16_bt's, its four 64-wide groups along N `leading` bytes
// apart (e.g. four TMA boxes of 64 channels, one after another).
template <typename T>
__device__ __forceinline__ void wgmma_m64n256k16_bt(float (&d)[128], uint64_t desc_a, uint64_t desc_b,
                                                     uint32_t accumulate) {
  wgmma_m64k16_ss<T, 0, 1, 256>(d, desc_a, desc_b, accumulate);
}

// Both operands K-major.
template <typename T>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                 uint32_t accumulate) {
  wgmma_m64k16_ss<T, 0, 0, 64>(d, desc_a, desc_b, accumulate);
}

// A K-major; B N-major (rows of 64 N values, one per reduction index, 8-row groups 1024 bytes
// apart: descriptor stride 1024, step 2048 bytes per 16 reduction values; with N = 64 there is one
// 128-byte group along N, so `leading` is unused).
template <typename T>
__device__ __forceinline__ void wgmma_m64n64k16_bt(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                    uint32_t accumulate) {
  wgmma_m64k16_ss<T, 0, 1, 64>(d, desc_a, desc_b, accumulate);
}

// D[64 x 8] (+)= A[64 x 16] * B[16 x 8], both K-major in shared memory (B: 8 rows of the
// reduction, one 8-row core group). With B all ones every column of D is A's row sums: the
// weight gradient's dbias on the tensor cores.
template <typename T>
__device__ __forceinline__ void wgmma_m64n8k16(float (&d)[4], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
#ifdef CAUSALCONV_SM90A
#define CAUSALCONV_WGMMA_M64N8K16(TYPE)                                                                   \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"                                               \
               "wgmma.mma_async.sync.aligned.m64n8k16.f32." TYPE "." TYPE " {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                             \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate))
  if constexpr (std::is_same_v<T, __half>)
    CAUSALCONV_WGMMA_M64N8K16("f16");
  else
    CAUSALCONV_WGMMA_M64N8K16("bf16");
#undef CAUSALCONV_WGMMA_M64N8K16
#endif
}

// Both operands MN-major: A as rows of 64 M values, one per reduction index (the layout of
// wgmma_m64n64k16_bt's B), B as there. For correlations of two staged rows over time (the b2b
// wgmma backward's weight gradients).
template <typename T>
__device__ __forceinline__ void wgmma_m64n64k16_tt(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                    uint32_t accumulate) {
  wgmma_m64k16_ss<T, 1, 1, 64>(d, desc_a, desc_b, accumulate);
}

// A from registers (RS): the transpose flag of B is immediate %37 (N = 64) or %133 (N = 256).
#define CAUSALCONV_WGMMA_M64N64K16_RS(TYPE)                                                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                             \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " "                                \
               CAUSALCONV_ACC32_LIST ", "                                                                             \
               "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"                                                           \
      : CAUSALCONV_ACC32_OUT \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(kTransposeB))

#define CAUSALCONV_WGMMA_M64N256K16_RS(TYPE)                                                                         \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"                                            \
               "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " "                               \
               CAUSALCONV_ACC128_LIST ", "                                                                             \
               "{%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"                                          \
      : CAUSALCONV_ACC128_OUT \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(kTransposeB))

// D[64 x N] (+)= A[64 x 16] * B[16 x N], N = 64 or 256: A in registers (per warp w of the
// warpgroup, rows 16w .. 16w + 15 in mma.sync's m16n8k16 A layout: lane l holds (row l/4 +
// 8 (r & 1), columns 2 (l%4) + 8 (r >> 1) and the next) in a[r], the lower column in the low half),
// B in shared memory, K-major (0) or N-major (1) as for the SS forms. The registers must stay
// unchanged until the MMA has completed (wgmma_wait), and a wgmma_fence must follow their writes.
template <typename T, int kTransposeB, int N>
__device__ __forceinline__ void wgmma_m64k16_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                                uint32_t accumulate) {
  static_assert(N == 64 || N == 256, "the shapes spelled out above");
#ifdef CAUSALCONV_SM90A
  constexpr bool kHalf = std::is_same_v<T, __half>;
  if constexpr (N == 256 && kHalf)
    CAUSALCONV_WGMMA_M64N256K16_RS("f16");
  else if constexpr (N == 256)
    CAUSALCONV_WGMMA_M64N256K16_RS("bf16");
  else if constexpr (kHalf)
    CAUSALCONV_WGMMA_M64N64K16_RS("f16");
  else
    CAUSALCONV_WGMMA_M64N64K16_RS("bf16");
#endif
}

// B K-major.
template <typename T>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b,
                                                    uint32_t accumulate) {
  wgmma_m64k16_rs<T, 0, 64>(d, a, desc_b, accumulate);
}

// B N-major as wgmma_m64n64k16_bt's / wgmma_m64n256k16_bt's.
template <typename T>
__device__ __forceinline__ void wgmma_m64n64k16_rs_bt(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b,
                                                       uint32_t accumulate) {
  wgmma_m64k16_rs<T, 1, 64>(d, a, desc_b, accumulate);
}
template <typename T>
__device__ __forceinline__ void wgmma_m64n256k16_rs_bt(float (&d)[128], const uint32_t (&a)[4], uint64_t desc_b,
                                                        uint32_t accumulate) {
  wgmma_m64k16_rs<T, 1, 256>(d, a, desc_b, accumulate);
}

// D[64 x 64] (+)= A[64 x 8] * B[8 x 64] on tf32 operands (fp32 bit patterns; the tensor core reads
// their upper 19 bits), fp32 accumulators as wgmma_m64n64k16's. A in registers: per warp w of the
// warpgroup, rows 16w .. 16w + 15 in mma.sync's m16n8k8 tf32 A layout (lane l: a[0] = (row l/4,
// column l%4), a[1] = (row + 8, column), a[2] = (row, column + 4), a[3] = (row + 8, column + 4)).
// B in shared memory, K-major (tf32 has no N-major form): under the 128-byte swizzle a row holds 32
// values, and a k8 slice is 32 bytes of it (step the start address by 32 bytes per slice, as for
// the 16-bit k16 slices). The registers must stay unchanged until the MMA has completed.
__device__ __forceinline__ void wgmma_m64n64k8_tf32_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b,
                                                       uint32_t accumulate) {
#ifdef CAUSALCONV_SM90A
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 " CAUSALCONV_ACC32_LIST ", "
               "{%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
               : CAUSALCONV_ACC32_OUT
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
#endif
}

#undef CAUSALCONV_WGMMA_M64N256K16
#undef CAUSALCONV_WGMMA_M64N64K16_SS
#undef CAUSALCONV_WGMMA_M64N64K16_RS
#undef CAUSALCONV_WGMMA_M64N256K16_RS
#undef CAUSALCONV_ACC128_LIST
#undef CAUSALCONV_ACC32_LIST
#undef CAUSALCONV_ACC128_OUT
#undef CAUSALCONV_ACC32_OUT

}  // namespace causalconv::detail::sm90

#else  // CAUSALCONV_CUDA_EMULATION

// ---- Host emulation (tests/cpp/cuda_emulation.h, included first, runs one OS thread per CUDA
// thread). Same signatures; what each primitive does on the GPU, done synchronously:
//  * shared addresses are offsets from the 1024-byte aligned address at or below the block's
//    dynamic shared memory, so the 128-byte swizzle (a function of address bits [4:6] ^ [7:9])
//    sees the same bits as the absolute address;
//  * a tensor map is an EmulatedTensorMap stored in a CUtensorMap's bytes; a TMA load is done
//    at once by the issuing thread (box written in the swizzled layout, zeros out of bounds),
//    then completes its bytes on the mbarrier;
//  * an mbarrier is its 64-bit word in shared memory (arrival count, pending arrivals, phase,
//    transaction bytes), updated under one mutex; waits sleep on a condition variable;
//  * wgmma: each thread computes its own accumulator fragment from the operands the
//    descriptors address (products exact in fp32, summed in fp32, not in the hardware's order)
//    and the MMA is complete on return. wgmma_wait is a barrier of the warp, so that a lane
//    that signals a stage consumed (lane 0 arriving on `empty`) does so only after every lane
//    of its warp has read it, as the hardware's wait guarantees for the warp.
#include <cuda.h>  // CUtensorMap: 128 opaque bytes

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>

namespace causalconv::detail::sm90 {

// What the test encodes in place of cuTensorMapEncodeTiled: a tensor of 2- or 4-byte elements,
// dims innermost first, byte strides of dims 1..rank-1, the box, the 128-byte swizzle (the only
// mode used).
struct EmulatedTensorMap {
  const void* base;
  int32_t rank;
  uint32_t box[4];
  uint64_t dims[4];
  uint64_t strides[3];
  bool swizzle_128b;
  uint32_t element_bytes = 2;
};
static_assert(sizeof(EmulatedTensorMap) <= sizeof(CUtensorMap));

[[noreturn]] inline void emulation_fault(const char* what);

// Encodes the map, with cuTensorMapEncodeTiled's checks on what it holds.
inline CUtensorMap emulated_tensor_map(const EmulatedTensorMap& m) {
  if (m.rank < 1 || m.rank > 4 || reinterpret_cast<uintptr_t>(m.base) % 16 != 0)
    emulation_fault("tensor map: rank 1-4 and a 16-byte aligned base");
  for (int d = 0; d < m.rank; ++d) {
    if (m.dims[d] == 0 || m.dims[d] > (uint64_t(1) << 32) || m.box[d] == 0 || m.box[d] > 256)
      emulation_fault("tensor map: dims 1..2^32, box 1..256");
    if (d > 0 && (m.strides[d - 1] % 16 != 0 || m.strides[d - 1] >= (uint64_t(1) << 40)))
      emulation_fault("tensor map: strides multiples of 16 bytes below 2^40");
  }
  CUtensorMap map;
  std::memset(&map, 0, sizeof map);
  std::memcpy(&map, &m, sizeof m);
  return map;
}

[[noreturn]] inline void emulation_fault(const char* what) {
  std::fprintf(stderr, "sm90 emulation: %s\n", what);
  std::abort();
}

inline uint8_t* emulated_dynamic_shared() {
  return reinterpret_cast<uint8_t*>(causalconv::emulation::block_state->shared.data());
}
inline uint8_t* dynamic_shared() { return emulated_dynamic_shared(); }

// The shared-memory address space's origin: 1024-byte aligned, at or below the dynamic buffer.
inline uint8_t* shared_origin() {
  return reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(emulated_dynamic_shared()) & ~uintptr_t(1023));
}

inline uint32_t smem_u32(const void* p) {
  const ptrdiff_t off = static_cast<const uint8_t*>(p) - shared_origin();
  const auto& buffer = causalconv::emulation::block_state->shared;
  if (off < 0 || static_cast<const uint8_t*>(p) > reinterpret_cast<const uint8_t*>(buffer.data() + buffer.size()) ||
      off >= (ptrdiff_t(1) << 18))
    emulation_fault("address outside the block's shared memory");
  return uint32_t(off);
}

inline uint8_t* aligned_dynamic_shared() {
  uint8_t* const raw = dynamic_shared();
  return raw + ((1024u - (smem_u32(raw) & 1023u)) & 1023u);
}

// The byte at shared address `address` after the 128-byte swizzle.
inline uint8_t* swizzled(uint32_t address) { return shared_origin() + (address ^ (((address >> 7) & 7) << 4)); }

// ---- mbarriers: bits 0-11 arrival count, 12-23 pending arrivals, 24 phase parity, 26-31 a
// marker of initialisation, 32-63 transaction bytes outstanding (signed).
struct MbarrierState {
  uint32_t count, pending, phase;
  int32_t tx;
};
inline std::mutex mbarrier_mutex;
inline std::condition_variable mbarrier_cv;
constexpr uint64_t kMbarrierMarker = uint64_t(0x2A) << 26;

inline MbarrierState mbarrier_load(const uint64_t* bar) {
  uint64_t w;
  std::memcpy(&w, bar, 8);
  if ((w & (uint64_t(0x3F) << 26)) != kMbarrierMarker) emulation_fault("mbarrier used before mbarrier.init");
  return {uint32_t(w & 0xFFF), uint32_t(w >> 12) & 0xFFF, uint32_t(w >> 24) & 1, int32_t(uint32_t(w >> 32))};
}

// Stores the state, completing the phase when no arrivals and no bytes are outstanding.
inline void mbarrier_store(uint64_t* bar, MbarrierState s) {
  if (s.pending == 0 && s.tx == 0) {
    s.phase ^= 1;
    s.pending = s.count;
    mbarrier_cv.notify_all();
  }
  const uint64_t w = uint64_t(s.count) | uint64_t(s.pending) << 12 | uint64_t(s.phase) << 24 | kMbarrierMarker |
                     uint64_t(uint32_t(s.tx)) << 32;
  std::memcpy(bar, &w, 8);
}

inline void mbarrier_init(uint64_t* bar, uint32_t count) {
  if (count == 0 || count > 0xFFF) emulation_fault("mbarrier count out of range");
  std::lock_guard<std::mutex> lock(mbarrier_mutex);
  const uint64_t w = uint64_t(count) | uint64_t(count) << 12 | kMbarrierMarker;
  std::memcpy(bar, &w, 8);
}

inline void mbarrier_init_fence() {}

inline void mbarrier_update(uint64_t* bar, uint32_t arrivals, int32_t expect, int32_t complete) {
  std::lock_guard<std::mutex> lock(mbarrier_mutex);
  MbarrierState s = mbarrier_load(bar);
  if (arrivals > s.pending) emulation_fault("more arrivals than the phase expects");
  s.pending -= arrivals;
  s.tx += expect - complete;
  mbarrier_store(bar, s);
}

inline void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) { mbarrier_update(bar, 1, int32_t(bytes), 0); }
inline void mbarrier_arrive(uint64_t* bar) { mbarrier_update(bar, 1, 0, 0); }
inline void mbarrier_complete_tx(uint64_t* bar, uint32_t bytes) { mbarrier_update(bar, 0, 0, int32_t(bytes)); }

// try_wait.parity(P) succeeds once the phase of parity P has completed: the current phase's
// parity is then the other one.
inline bool mbarrier_try_wait_parity(uint64_t* bar, uint32_t parity) {
  std::lock_guard<std::mutex> lock(mbarrier_mutex);
  return mbarrier_load(bar).phase != (parity & 1);
}

// A phase that never completes is a hang on the GPU: here, after a minute, a fault.
inline void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  std::unique_lock<std::mutex> lock(mbarrier_mutex);
  if (!mbarrier_cv.wait_for(lock, std::chrono::seconds(60),
                            [&] { return mbarrier_load(bar).phase != (parity & 1); }))
    emulation_fault("mbarrier wait did not complete within a minute (a deadlock on the GPU)");
}

// ---- TMA ----

// Walks a box of the map at `coords` whose swizzled shared-memory tile starts at `at`: fn(global
// byte offset, inside the map's bounds, shared address) per element; returns the box's bytes.
template <typename Fn>
inline uint32_t walk_box(const EmulatedTensorMap& m, const int32_t* coords, uint32_t at, Fn fn) {
  const uint32_t e = m.element_bytes;
  if (e != 2 && e != 4) emulation_fault("2- or 4-byte elements");
  if (!m.swizzle_128b || m.box[0] * e != 128) emulation_fault("only 128-byte rows with the 128-byte swizzle");
  if ((int64_t(coords[0]) * e) % 16 != 0) emulation_fault("innermost TMA coordinate not a whole 16 bytes");
  if (at % 1024 != 0) emulation_fault("swizzled TMA tile not 1024-byte aligned");
  uint32_t box[4] = {1, 1, 1, 1};
  for (int d = 0; d < m.rank; ++d) box[d] = m.box[d];
  uint32_t row = 0;
  for (uint32_t i3 = 0; i3 < box[3]; ++i3)
    for (uint32_t i2 = 0; i2 < box[2]; ++i2)
      for (uint32_t i1 = 0; i1 < box[1]; ++i1, ++row)
        for (uint32_t i0 = 0; i0 < box[0]; ++i0) {
          const uint32_t idx[4] = {i0, i1, i2, i3};
          bool inside = true;
          uint64_t offset = 0;
          for (int d = 0; d < m.rank; ++d) {
            const int64_t c = int64_t(coords[d]) + idx[d];
            if (c < 0 || c >= int64_t(m.dims[d])) inside = false;
            offset += uint64_t(c) * (d == 0 ? e : m.strides[d - 1]);
          }
          fn(offset, inside, at + row * 128 + i0 * e);
        }
  return row * 128;
}

inline void tma_load(void* dst, const void* map_bytes, uint64_t* bar, const int32_t* coords) {
  const auto& m = *static_cast<const EmulatedTensorMap*>(map_bytes);
  const uint32_t bytes = walk_box(m, coords, smem_u32(dst), [&](uint64_t offset, bool inside, uint32_t address) {
    uint32_t v = 0;
    if (inside) std::memcpy(&v, static_cast<const uint8_t*>(m.base) + offset, m.element_bytes);
    std::memcpy(swizzled(address), &v, m.element_bytes);
  });
  mbarrier_complete_tx(bar, bytes);
}

inline void tma_load_2d(void* dst, const void* map, uint64_t* bar, int32_t c0, int32_t c1) {
  if (static_cast<const EmulatedTensorMap*>(map)->rank != 2) emulation_fault("tma_load_2d on a map of another rank");
  const int32_t c[4] = {c0, c1, 0, 0};
  tma_load(dst, map, bar, c);
}

inline void tma_load_4d(void* dst, const void* map, uint64_t* bar, int32_t c0, int32_t c1, int32_t c2, int32_t c3) {
  if (static_cast<const EmulatedTensorMap*>(map)->rank != 4) emulation_fault("tma_load_4d on a map of another rank");
  const int32_t c[4] = {c0, c1, c2, c3};
  tma_load(dst, map, bar, c);
}

inline void tma_prefetch_descriptor(const void*) {}

// A store completes at once here: the bulk-group waits have nothing to wait for.
inline void tma_store_4d(const void* map_bytes, const void* src, int32_t c0, int32_t c1, int32_t c2, int32_t c3) {
  const auto& m = *static_cast<const EmulatedTensorMap*>(map_bytes);
  if (m.rank != 4) emulation_fault("tma_store_4d on a map of another rank");
  const int32_t coords[4] = {c0, c1, c2, c3};
  auto* base = static_cast<uint8_t*>(const_cast<void*>(m.base));
  walk_box(m, coords, smem_u32(src), [&](uint64_t offset, bool inside, uint32_t address) {
    if (inside) std::memcpy(base + offset, swizzled(address), m.element_bytes);
  });
}
inline void bulk_commit_group() {}
template <int kPending>
inline void bulk_wait_group_read() {}
template <int kPending>
inline void bulk_wait_group() {}

inline void check_named_barrier(uint32_t id, uint32_t threads) {
  if (id == 0 || id > 15 || threads % 32 != 0) emulation_fault("named barrier: id 1-15, whole warps");
}
inline void named_barrier_sync(uint32_t id, uint32_t threads) {
  check_named_barrier(id, threads);
  causalconv::emulation::named_barrier(id, threads);
}
inline void named_barrier_arrive(uint32_t id, uint32_t threads) {
  check_named_barrier(id, threads);
  causalconv::emulation::named_barrier_arrive(id, threads);
}
inline bool named_barrier_sync_or(uint32_t id, uint32_t threads, bool vote) {
  check_named_barrier(id, threads);
  return causalconv::emulation::named_barrier_or(id, threads, vote);
}

// ---- wgmma ----

inline uint64_t smem_descriptor(uint32_t smem_address, uint32_t leading, uint32_t stride) {
  return uint64_t((smem_address & 0x3FFFF) >> 4) | uint64_t((leading >> 4) & 0x3FFF) << 16 |
         uint64_t((stride >> 4) & 0x3FFF) << 32 | uint64_t(1) << 62;
}

inline uint64_t smem_descriptor_unswizzled(uint32_t smem_address, uint32_t leading, uint32_t stride) {
  return uint64_t((smem_address & 0x3FFFF) >> 4) | uint64_t((leading >> 4) & 0x3FFF) << 16 |
         uint64_t((stride >> 4) & 0x3FFF) << 32;
}

// As on the device; here the sum must also stay inside the start field and be whole 16 bytes.
inline uint64_t descriptor_plus(uint64_t desc, uint32_t bytes) {
  if (bytes % 16 != 0 || (desc & 0x3FFF) + (bytes >> 4) > 0x3FFF)
    emulation_fault("descriptor_plus: a start past the descriptor's 14-bit field, or not 16-byte aligned");
  return uint64_t(uint32_t(desc >> 32)) << 32 | (uint32_t(desc) + (bytes >> 4));
}

struct Descriptor {
  uint32_t start, leading, stride;
  bool swizzled;  // the 128-byte swizzle; otherwise 8 x 8 core matrices, no swizzle
};

// Operands are read at their absolute swizzled addresses, whatever row they start at, with a
// zero base offset (as the H200 does: tests/cpp/test_sm90_primitives_cuda.cu).
inline Descriptor decode_descriptor(uint64_t d) {
  if ((d >> 62) > 1) emulation_fault("only the 128-byte swizzle and the unswizzled modes are emulated");
  if ((d >> 49) & 7) emulation_fault("a nonzero descriptor base offset (the H200 reads the wrong rows with one)");
  return {uint32_t(d & 0x3FFF) << 4, uint32_t((d >> 16) & 0x3FFF) << 4, uint32_t((d >> 32) & 0x3FFF) << 4,
          (d >> 62) == 1};
}

template <typename T>
inline float operand_value(uint16_t bits) {
  if constexpr (std::is_same_v<T, __half>) {
    __half_raw r;
    r.x = bits;
    return __half2float(__half(r));
  } else {
    const uint32_t f = uint32_t(bits) << 16;
    float v;
    std::memcpy(&v, &f, 4);
    return v;
  }
}

template <typename T>
inline float operand_at(uint32_t address, bool swizzle = true) {
  uint16_t bits;
  std::memcpy(&bits, swizzle ? swizzled(address) : shared_origin() + address, 2);
  return operand_value<T>(bits);
}

// K-major operand: row r (an M or N index), reduction index k of this k16 slice. 128-byte
// swizzle: rows of 128 bytes, 8-row groups `stride` bytes apart. Unswizzled: core matrices of
// 8 rows x 16 bytes, `leading` bytes apart along k and `stride` bytes apart along r.
inline uint32_t k_major_address(const Descriptor& d, int r, int k) {
  if (!d.swizzled)
    return d.start + uint32_t(r / 8) * d.stride + uint32_t(k / 8) * d.leading + uint32_t(r % 8) * 16 +
           uint32_t(k % 8) * 2;
  return d.start + uint32_t(r / 8) * d.stride + uint32_t(r % 8) * 128 + uint32_t(k) * 2;
}

// N-major (transposed) B: rows = reduction index k of 128 bytes of N values, 8-row groups
// `stride` bytes apart, 64-wide N groups `leading` bytes apart.
inline uint32_t n_major_address(const Descriptor& d, int k, int n) {
  return d.start + uint32_t(k / 8) * d.stride + uint32_t(k % 8) * 128 + uint32_t(n / 64) * d.leading +
         uint32_t(n % 64) * 2;
}

// D[64 x N] (+)= A[64 x 16] B[16 x N] for this thread's fragment: element 4j + 2h + e is row
// 16w + l/4 + 8h, column 8j + 2(l%4) + e (w: the warp in the warpgroup, l: the lane).
// a: this thread's two rows of A (16w + l/4 + 8h).
template <typename T, int N, bool kBNMajor>
inline void wgmma_emulated_rows(float* d, const float (&a)[2][16], uint64_t desc_b, uint32_t accumulate) {
  const int l = int(threadIdx.x % 32);
  const Descriptor db = decode_descriptor(desc_b);
  if (kBNMajor && !db.swizzled) emulation_fault("an unswizzled N-major operand is not emulated");
  for (int j = 0; j < N / 8; ++j)
    for (int e = 0; e < 2; ++e) {
      const int n = 8 * j + 2 * (l % 4) + e;
      float b[16];
      for (int k = 0; k < 16; ++k)
        b[k] = operand_at<T>(kBNMajor ? n_major_address(db, k, n) : k_major_address(db, n, k), db.swizzled);
      for (int h = 0; h < 2; ++h) {
        float sum = accumulate ? d[4 * j + 2 * h + e] : 0.0f;
        for (int k = 0; k < 16; ++k) sum += a[h][k] * b[k];
        d[4 * j + 2 * h + e] = sum;
      }
    }
}

template <typename T, int N, bool kBNMajor, bool kAMMajor = false>
inline void wgmma_emulated(float* d, uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
  const int t = int(threadIdx.x % 128), w = t / 32, l = t % 32;
  const Descriptor da = decode_descriptor(desc_a);
  if (kAMMajor && !da.swizzled) emulation_fault("an unswizzled M-major operand is not emulated");
  float a[2][16];
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 16; ++k) {
      const int m = 16 * w + l / 4 + 8 * h;  // M-major A: laid out as an N-major B
      a[h][k] = operand_at<T>(kAMMajor ? n_major_address(da, k, m) : k_major_address(da, m, k), da.swizzled);
    }
  wgmma_emulated_rows<T, N, kBNMajor>(d, a, desc_b, accumulate);
}

// A from registers: this thread's rows gathered from the fragments of the warp's lanes 4g .. 4g + 3
// (g = l/4): lane 4g + q' holds (row g + 8 (reg & 1), cols 2q' + 8 (reg >> 1), +1) in a[reg].
template <typename T, int N, bool kBNMajor = false>
inline void wgmma_emulated_registers(float* d, const uint32_t (&frag)[4], uint64_t desc_b, uint32_t accumulate) {
  const int g = int(threadIdx.x % 32) / 4;
  float a[2][16];
  for (int src = 0; src < 4; ++src)
    for (int reg = 0; reg < 4; ++reg) {
      const uint32_t v = __shfl_sync(0xffffffffu, frag[reg], 4 * g + src);
      const int col = 2 * src + 8 * (reg >> 1);
      for (int e = 0; e < 2; ++e) a[reg & 1][col + e] = operand_value<T>(uint16_t(v >> (16 * e)));
    }
  wgmma_emulated_rows<T, N, kBNMajor>(d, a, desc_b, accumulate);
}

// wgmma_m64n64k8_tf32_rs: A's rows gathered from the lanes 4g .. 4g + 3 (lane 4g + q' holds (row g +
// 8 (reg & 1), column q' + 4 (reg >> 1)) in a[reg]); B K-major under the 128-byte swizzle, 4-byte
// values (row n at start + (n / 8) stride + (n % 8) 128, value k at 4k). Element 4j + 2h + e of d as
// wgmma_emulated_rows's.
inline void wgmma_emulated_tf32_registers(float* d, const uint32_t (&frag)[4], uint64_t desc_b,
                                          uint32_t accumulate) {
  using causalconv::emulation::tf32_operand;
  const int l = int(threadIdx.x % 32), g = l / 4;
  float a[2][8];
  for (int src = 0; src < 4; ++src)
    for (int reg = 0; reg < 4; ++reg)
      a[reg & 1][src + 4 * (reg >> 1)] = tf32_operand(__shfl_sync(0xffffffffu, frag[reg], 4 * g + src));
  const Descriptor db = decode_descriptor(desc_b);
  if (!db.swizzled) emulation_fault("an unswizzled tf32 operand is not emulated");
  for (int j = 0; j < 8; ++j)
    for (int e = 0; e < 2; ++e) {
      const int n = 8 * j + 2 * (l % 4) + e;
      float b[8];
      for (int k = 0; k < 8; ++k) {
        uint32_t bits;
        std::memcpy(&bits, swizzled(db.start + uint32_t(n / 8) * db.stride + uint32_t(n % 8) * 128 + 4 * k), 4);
        b[k] = tf32_operand(bits);
      }
      for (int h = 0; h < 2; ++h) {
        float sum = accumulate ? d[4 * j + 2 * h + e] : 0.0f;
        for (int k = 0; k < 8; ++k) sum += a[h][k] * b[k];
        d[4 * j + 2 * h + e] = sum;
      }
    }
}

// ---- ldmatrix / stmatrix: every lane of the warp calls them; the lanes' addresses are
// exchanged, then each lane moves its own fragment. Addresses are used as given (they already
// hold the swizzle's chunk permutation, as on the GPU).

inline uint16_t load16(uint32_t address) {
  uint16_t v;
  std::memcpy(&v, shared_origin() + address, 2);
  return v;
}

// The lanes' row addresses through one exchange: `lane(l)` reads lane l's address after every lane
// has posted its own, and done() closes the move (every lane has read the addresses and moved its
// rows before any lane goes on). Two warp barriers a move, where a shuffle per row took up to 16 (the
// b2b backward's mma.sync dwp band, ten ldmatrix a row and tile, made its emulated tests 3x slower).
class LaneAddresses {
 public:
  explicit LaneAddresses(uint32_t smem_address)
      : tid_(threadIdx.x), base_(tid_ - tid_ % 32),
        warp_(*causalconv::emulation::block_state->warps[tid_ / 32]) {
    causalconv::emulation::block_state->exchange_bits[tid_] = smem_address;
    warp_.wait();
  }
  uint32_t lane(unsigned l) const { return causalconv::emulation::block_state->exchange_bits[base_ + l]; }
  void done() { warp_.wait(); }

 private:
  unsigned tid_, base_;
  causalconv::emulation::Barrier& warp_;
};

inline void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t smem_address) {
  const unsigned t = threadIdx.x % 32;
  LaneAddresses rows(smem_address);
  for (unsigned i = 0; i < 4; ++i) {
    const uint32_t row0 = rows.lane(8 * i + 2 * (t % 4)), row1 = rows.lane(8 * i + 2 * (t % 4) + 1);
    r[i] = uint32_t(load16(row0 + 2 * (t / 4))) | uint32_t(load16(row1 + 2 * (t / 4))) << 16;
  }
  rows.done();
}

inline void stmatrix_x4(uint32_t smem_address, const uint32_t (&r)[4]) {
  const unsigned t = threadIdx.x % 32;
  LaneAddresses rows(smem_address);
  for (unsigned i = 0; i < 4; ++i) std::memcpy(shared_origin() + rows.lane(8 * i + t / 4) + 4 * (t % 4), &r[i], 4);
  rows.done();
}

inline void stmatrix_x4_trans(uint32_t smem_address, const uint32_t (&r)[4]) {
  const unsigned t = threadIdx.x % 32;
  LaneAddresses rows(smem_address);
  for (unsigned i = 0; i < 4; ++i) {
    const uint16_t lo = uint16_t(r[i] & 0xffffu), hi = uint16_t(r[i] >> 16);
    std::memcpy(shared_origin() + rows.lane(8 * i + 2 * (t % 4)) + 2 * (t / 4), &lo, 2);
    std::memcpy(shared_origin() + rows.lane(8 * i + 2 * (t % 4) + 1) + 2 * (t / 4), &hi, 2);
  }
  rows.done();
}

inline void fence_proxy_async_shared() {}

inline void wgmma_fence() {}
inline void wgmma_commit() {}
template <int kPending>
inline void wgmma_wait() {
  causalconv::emulation::block_state->warps[threadIdx.x / 32]->wait();
}

template <int N>
inline void fence_registers(float (&)[N]) {}

template <typename T>
inline void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
  wgmma_emulated<T, 256, false>(d, desc_a, desc_b, accumulate);
}

template <typename T>
inline void wgmma_m64n256k16_bt(float (&d)[128], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
  wgmma_emulated<T, 256, true>(d, desc_a, desc_b, accumulate);
}

template <typename T>
inline void wgmma_m64n64k16(float (&d)[32], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
  wgmma_emulated<T, 64, false>(d, desc_a, desc_b, accumulate);
}

template <typename T>
inline void wgmma_m64n8k16(float (&d)[4], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
  wgmma_emulated<T, 8, false>(d, desc_a, desc_b, accumulate);
}

template <typename T>
inline void wgmma_m64n64k16_bt(float (&d)[32], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
  wgmma_emulated<T, 64, true>(d, desc_a, desc_b, accumulate);
}

template <typename T>
inline void wgmma_m64n64k16_tt(float (&d)[32], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
  wgmma_emulated<T, 64, true, true>(d, desc_a, desc_b, accumulate);
}

template <typename T>
inline void wgmma_m64n64k16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, uint32_t accumulate) {
  wgmma_emulated_registers<T, 64>(d, a, desc_b, accumulate);
}

template <typename T>
inline void wgmma_m64n64k16_rs_bt(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, uint32_t accumulate) {
  wgmma_emulated_registers<T, 64, true>(d, a, desc_b, accumulate);
}

template <typename T>
inline void wgmma_m64n256k16_rs_bt(float (&d)[128], const uint32_t (&a)[4], uint64_t desc_b, uint32_t accumulate) {
  wgmma_emulated_registers<T, 256, true>(d, a, desc_b, accumulate);
}

inline void wgmma_m64n64k8_tf32_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, uint32_t accumulate) {
  wgmma_emulated_tf32_registers(d, a, desc_b, accumulate);
}

}  // namespace causalconv::detail::sm90

#endif  // CAUSALCONV_CUDA_EMULATION
