// The blocked Toeplitz form of common/toeplitz_mma.cuh for fp32 operands: tf32 MMAs, split three
// ways (the depthwise fp32 forward and the b2b fp32 mixer).
//
// Precision. Each fp32 operand v is split in two tf32 parts, hi = tf32(v) (to nearest) and
// lo = tf32(v - hi), so v = hi + lo to ~2^-22 of v. A product w v is taken as
// w_lo v_hi + w_hi v_lo + w_hi v_hi (three m16n8k8 MMAs, fp32 accumulators; tf32 products are
// exact in fp32): the terms dropped (w_lo v_lo and the parts' roundings) are ~2^-21 of |w v|,
// which keeps the fp32 bound of DESIGN.md §4 (1e-6 relative, with the terms' magnitude) that one
// tf32 product (2^-11) or a bf16 hi/lo split (2^-17) would miss. hi saturates (satfinite) so a
// finite v near the fp32 maximum splits into finite parts; v = +-inf gives lo = +-inf and an
// infinite result, as on the CUDA cores.
//
// Math. As the 16-bit form (16-step chunks, output chunk j = sum_i T_i · u_chunk[j - i], T_i[r][c] =
// wr[16i + r - c] with wr[s] = w[K-1-s]); each 16 x 16 block is two m16n8k8 halves h (input steps
// 8h .. 8h+7 of the chunk): A_h[r][c] = wr[16i - 8h + r - c]. With the tf32 fragment layout
// (common/warp_mma.cuh), lane (g, q) holds for half 0 the lags base, base + 8, base - 4, base + 4
// and for half 1 base - 8, base, base - 12, base - 4, base = 16i + g - q, read per block from the
// split lag filter in shared memory (lanes with equal g - q read the same word: broadcasts, no
// conflicts).
// B: B_h[k][n] = u[chunk J + n - i][8h + k] for 8 consecutive output chunks J + n. ldmatrix.x4 on
// 32-bit data hands lane (g, q) word q of row g of each 8 x 16-byte matrix: matrix m = unit m (steps
// 4m .. 4m+3) of the 8 input chunks gives r[m] = u[chunk g][4m + q], i.e. half h's b0 = r[2h],
// b1 = r[2h + 1], from the tile of hi parts and from the tile of lo parts alike.
//
// Shared input tiles: a chunk is 4 units of 16 bytes; unit h of local chunk m sits at unit
// 4m + (h ^ ((m >> 1) & 3)), so the 8 rows of one ldmatrix phase (unit h of 8 consecutive chunks)
// fall in 8 distinct 16-byte bank groups.
#pragma once

#include <cstdint>

#if defined(__CUDACC__) || defined(CAUSALCONV_CUDA_EMULATION)
#include "common/toeplitz_mma.cuh"

namespace causalconv::detail {

// Byte offset of 16-byte unit h (steps 4h .. 4h+3) of local chunk m in the fp32 input stage.
__device__ __forceinline__ int tf32_unit_offset(int m, int h) { return 16 * (4 * m + (h ^ ((m >> 1) & 3))); }

// The two tf32 parts of an fp32 value (as bits): v ~ hi + lo.
__device__ __forceinline__ void tf32_split(float v, uint32_t& hi, uint32_t& lo) {
  hi = tf32_round_satfinite(v);
  lo = tf32_round(v - __uint_as_float(hi));
}

// Byte offset of step `step` of local chunk m in a tf32 tile (for element access).
__device__ __forceinline__ int tf32_element_offset(int m, int step) {
  return tf32_unit_offset(m, step >> 2) + 4 * (step & 3);
}

// wr_hi_s[kPad + s], wr_lo_s[kPad + s]: the tf32 parts of wr[s] = w[K-1-s] for lag s in [0, K), zero
// elsewhere in [-kPad, kCount - kPad).
template <int kPad, int kCount>
__device__ __forceinline__ void tf32_split_lag_filter(uint32_t* wr_hi_s, uint32_t* wr_lo_s, const float* w,
                                                      int64_t w_stride, int width) {
  for (int i = int(threadIdx.x); i < kCount; i += ToeplitzTile::kThreads) {
    const int s = i - kPad;
    tf32_split(s >= 0 && s < width ? w[int64_t(width - 1 - s) * w_stride] : 0.0f, wr_hi_s[i], wr_lo_s[i]);
  }
}

// The 16-step form's: lags [-16, 16 * (kMaxBlocks + 1)) (as toeplitz_lag_filter).
template <int kMaxBlocks>
__device__ __forceinline__ void tf32_lag_filter(uint32_t* wr_hi_s, uint32_t* wr_lo_s, const float* w,
                                                int64_t w_stride, int width) {
  tf32_split_lag_filter<16, toeplitz_lag_filter_size<kMaxBlocks>()>(wr_hi_s, wr_lo_s, w, w_stride, width);
}

// Splits the units u = threadIdx.x + k kThreads < units of a staged tile (those this thread staged),
// unit u at byte unit_offset(u): the hi parts stay in in_s, the lo parts go to the same offsets of lo_s.
template <typename UnitOffset>
__device__ __forceinline__ void tf32_split_units(unsigned char* in_s, unsigned char* lo_s, int units,
                                                 UnitOffset unit_offset) {
  for (int u = int(threadIdx.x); u < units; u += ToeplitzTile::kThreads) {
    const int offset = unit_offset(u);
    uint4 hi = *reinterpret_cast<const uint4*>(in_s + offset), lo;
    tf32_split(__uint_as_float(hi.x), hi.x, lo.x);
    tf32_split(__uint_as_float(hi.y), hi.y, lo.y);
    tf32_split(__uint_as_float(hi.z), hi.z, lo.z);
    tf32_split(__uint_as_float(hi.w), hi.w, lo.w);
    *reinterpret_cast<uint4*>(in_s + offset) = hi;
    *reinterpret_cast<uint4*>(lo_s + offset) = lo;
  }
}

// kTiles m16n8 accumulator tiles of consecutive output chunks: acc[p] covers output chunks
// 8p .. 8p + 7 (counted from this call's first), output chunk j reading input chunks
// in_chunk0 + j - i (local, i < blocks) of the split tile (hi_s, lo_s). acc[p][e] is y at output
// chunk 8p + 2q + (e & 1), step g + 8 (e >> 1) (g, q: of the lane).
template <int kTiles>
__device__ __forceinline__ void toeplitz_tf32x3_mma_tiles(float (&acc)[kTiles][4], const uint32_t* wr_hi_s,
                                                          const uint32_t* wr_lo_s, const unsigned char* hi_s,
                                                          const unsigned char* lo_s, int blocks, int in_chunk0,
                                                          int lane) {
#pragma unroll
  for (int p = 0; p < kTiles; ++p)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[p][e] = 0.0f;
  const int g = lane >> 2, q = lane & 3;
  const int unit = lane >> 3, first = in_chunk0 + (lane & 7);  // ldmatrix: this lane's row address
#pragma unroll 1
  for (int i = 0; i < blocks; ++i) {
    // Block i's fragments: halves 0 and 1 at lags base + kLag[h][reg] (six distinct lags; ptxas
    // still spends ~39 moves a block building the four-register A operands, SASS of session 29).
    const int base = 16 + 16 * i + g - q;  // index of lag base
    constexpr int kLag[2][4] = {{0, 8, -4, 4}, {-8, 0, -12, -4}};
    uint32_t a_hi[2][4], a_lo[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int reg = 0; reg < 4; ++reg) {
        a_hi[h][reg] = wr_hi_s[base + kLag[h][reg]];
        a_lo[h][reg] = wr_lo_s[base + kLag[h][reg]];
      }
#pragma unroll
    for (int p = 0; p < kTiles; ++p) {
      const int offset = tf32_unit_offset(first + 8 * p - i, unit);
      uint32_t b_hi[4], b_lo[4];
      ldmatrix_x4(b_hi, hi_s + offset);
      ldmatrix_x4(b_lo, lo_s + offset);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mma_m16n8k8_tf32(acc[p], a_lo[h], b_hi[2 * h], b_hi[2 * h + 1]);
        mma_m16n8k8_tf32(acc[p], a_hi[h], b_lo[2 * h], b_lo[2 * h + 1]);
        mma_m16n8k8_tf32(acc[p], a_hi[h], b_hi[2 * h], b_hi[2 * h + 1]);
      }
    }
  }
}

}  // namespace causalconv::detail
#endif
