// Warp-level tensor-core building blocks: 8x8 16-bit matrix moves between shared memory and
// registers (ldmatrix, sm_75+; stmatrix, sm_90+), the m16n8k16 MMA (16-bit operands) and the
// m16n8k8 MMA (tf32 operands) with fp32 accumulators, and the fp32 -> tf32 rounding (sm_80+).
// Shared addresses are 32-bit shared-window addresses (__cvta_generic_to_shared).
//
// Device code only: the host emulations of the kernels that use these (tests/cpp:
// mma_emulation.h, and common/sm90_primitives.cuh's emulation) provide their own.
#pragma once

#include <cstdint>

#ifndef CAUSALCONV_CUDA_EMULATION

namespace causalconv::detail {

// ldmatrix .x4: lanes 8i..8i+7 give the addresses of the 8 rows (16 bytes each) of matrix i;
// register i of lane l receives matrix i's row l/4, elements 2(l%4) and 2(l%4)+1.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address));
}

// The same, transposed: register i of lane l receives matrix i's elements (row 2(l%4), column
// l/4) and (row 2(l%4)+1, column l/4): row l/4, columns 2(l%4) and 2(l%4)+1 of its transpose.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t smem_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address));
}

// stmatrix .x4 (sm_90): lanes 8i..8i+7 give the row addresses of matrix i; register i of lane l
// holds row l/4, columns 2(l%4) and 2(l%4)+1 of it (the layout ldmatrix_x4 delivers).
__device__ __forceinline__ void stmatrix_x4(uint32_t smem_address, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(smem_address), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// The same, transposed: register i of lane l holds elements (row l/4, columns 2(l%4), 2(l%4)+1) of
// matrix i, and row c of the stored matrix (its address from lane 8i + c) is column c of that one.
// A warp's m16n8 accumulator pairs stored time-major.
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t smem_address, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(smem_address),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// d += a · b, m16n8k16, fp32 accumulators; kHalf: fp16 operands, else bf16.
template <bool kHalf>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kHalf) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// d += a · b, m16n8k8 with tf32 operands (fp32 bit patterns; the tensor core reads their upper 19
// bits), fp32 accumulators. g = lane / 4, q = lane % 4 (PTX ISA, "Matrix Fragments for
// mma.m16n8k8", .tf32): A 16x8 row-major a0 = (g, q), a1 = (g+8, q), a2 = (g, q+4), a3 = (g+8, q+4);
// B 8x8 b0 = (k q, n g), b1 = (k q+4, n g); C/D as m16n8k16.
__device__ __forceinline__ void mma_m16n8k8_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// v rounded to tf32 (to nearest, ties away from zero) as fp32 bits with the low 13 bits zero; the
// satfinite form gives the largest finite tf32 where the rounding would overflow (and for +-inf).
__device__ __forceinline__ uint32_t tf32_round(float v) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(v));
  return r;
}
__device__ __forceinline__ uint32_t tf32_round_satfinite(float v) {
  uint32_t r;
  asm("cvt.rna.satfinite.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(v));
  return r;
}

}  // namespace causalconv::detail

#endif  // CAUSALCONV_CUDA_EMULATION
