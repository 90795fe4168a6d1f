// Warp-level matrix instructions for the CPU emulation (tests/cpp/cuda_emulation.h):
// ldmatrix.x4, mma.sync.m16n8k16 and .m16n8k8.tf32 (fp32 accumulators) and the fp32 -> tf32
// rounding, exchanging the lanes'
// registers through a warp barrier and applying the PTX ISA's fragment layouts,
// written here independently of the kernels' own comments. Include after
// cuda_emulation.h and before the kernel headers.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda_emulation.h"

namespace causalconv::emulation {

inline std::vector<uint64_t> warp_exchange(1024 * 8);  // 8 slots per thread

inline void warp_barrier() { block_state->warps[threadIdx.x / 32]->wait(); }

inline float from_bits16(uint32_t bits, bool half) {
  if (half) {
    __half_raw r;
    r.x = uint16_t(bits);
    return __half2float(__half(r));
  }
  const uint32_t f = bits << 16;
  float v;
  std::memcpy(&v, &f, 4);
  return v;
}

}  // namespace causalconv::emulation

namespace causalconv::detail {

inline unsigned char* toeplitz_shared() {
  return reinterpret_cast<unsigned char*>(causalconv::emulation::block_state->shared.data());
}

// Matrix i's rows come from lanes 8i..8i+7; lane l gets row l/4, 16-bit elements 2(l%4), 2(l%4)+1.
inline void ldmatrix_x4(uint32_t (&r)[4], const void* row_address) {
  namespace emu = causalconv::emulation;
  const unsigned t = threadIdx.x, lane = t % 32, base = t - lane;
  emu::warp_exchange[t * 8] = reinterpret_cast<uintptr_t>(row_address);
  emu::warp_barrier();
  for (int i = 0; i < 4; ++i) {
    const auto* row = reinterpret_cast<const unsigned char*>(emu::warp_exchange[(base + 8 * i + lane / 4) * 8]);
    std::memcpy(&r[i], row + 4 * (lane % 4), 4);
  }
  emu::warp_barrier();
}

// stmatrix .trans: lane l holds (row l/4, cols 2(l%4), 2(l%4)+1) of matrix i; the stored row c
// (from lane 8i + c) is the matrix's column c.
inline void stmatrix_x4_trans(void* row_address, const uint32_t (&r)[4]) {
  namespace emu = causalconv::emulation;
  const unsigned t = threadIdx.x, lane = t % 32, base = t - lane;
  emu::warp_exchange[t * 8] = reinterpret_cast<uintptr_t>(row_address);
  emu::warp_barrier();
  for (int i = 0; i < 4; ++i)
    for (int k = 0; k < 2; ++k) {
      auto* row = reinterpret_cast<unsigned char*>(emu::warp_exchange[(base + 8 * i + 2 * (lane % 4) + k) * 8]);
      const uint16_t half = uint16_t(k ? r[i] >> 16 : r[i] & 0xffffu);
      std::memcpy(row + 2 * (lane / 4), &half, 2);
    }
  emu::warp_barrier();
}

// Transposed: lane l gets (row 2(l%4), col l/4) in the low half, (row 2(l%4)+1, col l/4) in the high half.
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_address) {
  namespace emu = causalconv::emulation;
  const unsigned t = threadIdx.x, lane = t % 32, base = t - lane;
  emu::warp_exchange[t * 8] = reinterpret_cast<uintptr_t>(row_address);
  emu::warp_barrier();
  for (int i = 0; i < 4; ++i) {
    uint16_t half[2];
    for (int k = 0; k < 2; ++k) {
      const auto* row =
          reinterpret_cast<const unsigned char*>(emu::warp_exchange[(base + 8 * i + 2 * (lane % 4) + k) * 8]);
      std::memcpy(&half[k], row + 2 * (lane / 4), 2);
    }
    r[i] = uint32_t(half[0]) | (uint32_t(half[1]) << 16);
  }
  emu::warp_barrier();
}

// d += A · B for an m16n8kK MMA: the lanes' registers go through the warp exchange, decode(g, q, s,
// A, B) places lane (g, q)'s six registers s[0..5] (four of A, two of B) into the matrices, then
// each lane sums its D fragment (g, 2q), (g, 2q+1), (g+8, 2q), (g+8, 2q+1) in k order.
template <int kK, typename Decode>
inline void emulated_mma_m16n8(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, Decode decode) {
  namespace emu = causalconv::emulation;
  const unsigned t = threadIdx.x, lane = t % 32, base = t - lane;
  for (int i = 0; i < 4; ++i) emu::warp_exchange[t * 8 + i] = a[i];
  emu::warp_exchange[t * 8 + 4] = b0;
  emu::warp_exchange[t * 8 + 5] = b1;
  emu::warp_barrier();
  float A[16][kK], B[kK][8];
  for (unsigned l = 0; l < 32; ++l) decode(l / 4, l % 4, &emu::warp_exchange[(base + l) * 8], A, B);
  emu::warp_barrier();
  const unsigned g = lane / 4, q = lane % 4;
  for (int e = 0; e < 4; ++e) {
    const unsigned row = g + 8 * (e >> 1), col = 2 * q + (e & 1);
    float sum = d[e];
    for (int k = 0; k < kK; ++k) sum += A[row][k] * B[k][col];
    d[e] = sum;
  }
}

// m16n8k16, 16-bit operands: A regs (g, 2q..2q+1), (g+8, 2q..), (g, 2q+8..), (g+8, 2q+8..);
// B regs (k 2q..2q+1, n g), (k 2q+8.., n g).
template <bool kHalf>
inline void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  emulated_mma_m16n8<16>(d, a, b0, b1, [](unsigned g, unsigned q, const uint64_t* s, float (&A)[16][16],
                                          float (&B)[16][8]) {
    for (int reg = 0; reg < 4; ++reg)
      for (int h = 0; h < 2; ++h)
        A[g + 8 * (reg & 1)][2 * q + h + 8 * (reg >> 1)] =
            causalconv::emulation::from_bits16(uint32_t(s[reg]) >> (16 * h), kHalf);
    for (int reg = 0; reg < 2; ++reg)
      for (int h = 0; h < 2; ++h)
        B[2 * q + h + 8 * reg][g] = causalconv::emulation::from_bits16(uint32_t(s[4 + reg]) >> (16 * h), kHalf);
  });
}

// m16n8k8, tf32 operands: A regs (g, q), (g+8, q), (g, q+4), (g+8, q+4); B regs (k q, n g),
// (k q+4, n g).
inline void mma_m16n8k8_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  emulated_mma_m16n8<8>(d, a, b0, b1, [](unsigned g, unsigned q, const uint64_t* s, float (&A)[16][8],
                                         float (&B)[8][8]) {
    using causalconv::emulation::tf32_operand;
    for (int reg = 0; reg < 4; ++reg) A[g + 8 * (reg & 1)][q + 4 * (reg >> 1)] = tf32_operand(uint32_t(s[reg]));
    for (int reg = 0; reg < 2; ++reg) B[q + 4 * reg][g] = tf32_operand(uint32_t(s[4 + reg]));
  });
}

// cvt.rna{.satfinite}.tf32.f32: to nearest, ties away from zero (half the dropped unit added to
// the magnitude), the low 13 bits cleared; satfinite clamps an overflow and +-inf to the largest
// finite tf32. NaN stays NaN.
inline uint32_t tf32_round_bits(float v, bool satfinite) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  const uint32_t sign = u & 0x80000000u, kMaxFinite = 0x7f7fe000u;
  if ((u & 0x7f800000u) == 0x7f800000u) {
    if (u & 0x007fffffu) return u;
    return satfinite ? sign | kMaxFinite : u;
  }
  const uint32_t r = (u + 0x1000u) & 0xffffe000u;
  return satfinite && (r & 0x7f800000u) == 0x7f800000u ? sign | kMaxFinite : r;
}
inline uint32_t tf32_round(float v) { return tf32_round_bits(v, false); }
inline uint32_t tf32_round_satfinite(float v) { return tf32_round_bits(v, true); }

}  // namespace causalconv::detail
