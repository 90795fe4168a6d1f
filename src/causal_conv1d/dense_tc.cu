// Dense/grouped causal conv forward on tensor cores: an implicit GEMM per (batch, group).
//
//   Y[o, t] = sum_{i, k} W[o, i, k] * X[i, t - (K-1-k) d]     M = C_out/g, N = time, reduction = C_in/g x K
//
// A CTA makes 128 output channels x 128 time steps with 8 warps (2 along M x 4 along N,
// 64 x 32 each, mma.sync m16n8k16, fp32 accumulators). The reduction runs in stages of
// 32 input channels x up to 4 taps. Per stage the CTA holds in shared memory
//   - the x window of those 32 channels over the 128 steps plus the taps' shift, stored
//     [time][channel] (channel-contiguous rows of 64 bytes). Tap k's B operand is the same
//     window read kk*d rows further down: ldmatrix takes any row addresses, so one staged
//     window serves every tap of the stage (the main data reuse), and
//   - the 128 x 32 weights of each tap, [tap][o][channel], from a prepared copy.
// Rows are 64 bytes = four 16-byte chunks; chunk c of row r lives at chunk c ^ ((r>>1)&3),
// which makes ldmatrix conflict-free for any 8 consecutive rows (any tap shift).
//
// fp32 inputs: each operand v is split into bf16 hi = bf16(v) and lo = bf16(v - hi); the
// products hi*hi + hi*lo + lo*hi (3 MMAs) are accumulated in fp32, ~2^-17 relative error
// per product (lo*lo is below that) -- fp32-level results without TF32. fp16 inputs use the
// f16 MMA, bf16 inputs the bf16 MMA (one MMA each).
//
// Pipeline (two shared buffers): weights by cp.async from the prepared copy (aligned and
// zero-padded, no predication); the x window through registers (any strides, zero fill
// outside [0, L) and past C_in/g, fp32 split on the way), loaded for stage s+1 while the
// tensor cores work on stage s.
//
// Prepared weights (caller's workspace, rebuilt every call by a small kernel):
//   w_prep[grp][c_chunk][k][o < o_pad][32]   (bf16 or f16; fp32: hi, then a lo copy)
// zero where o >= C_out/g or the channel >= C_in/g.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "causal_conv1d/dense_kernels.h"
#include "causalconv/error.h"
#include "common/cuda_math.cuh"
#include "common/cuda_runtime.h"
#include "common/warp_mma.cuh"

namespace causalconv::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kBM = 128;                      // output channels per CTA
constexpr int kBN = 128;                      // time steps per CTA
constexpr int kBC = 32;                       // input channels per stage
constexpr int kMaxTaps = 4;                   // taps per stage
constexpr int kMaxShift = 32;                 // (taps per stage - 1) * dilation
constexpr int kRows = kBN + kMaxShift;        // x window rows per stage
constexpr int kRowBytes = kBC * 2;            // 64: one row of 32 16-bit values
constexpr int kRowsPerThread = kRows / 32;    // x staging: 32 time lanes x 8 channel groups of 4
constexpr int kWTapBytes = kBM * kRowBytes;   // 8 KiB per tap
constexpr int64_t kMaxPreparedBytes = int64_t(256) << 20;
static_assert(kRows % 32 == 0, "x staging walks the window in steps of 32 rows");

// One convolution of the kernel, forward or transposed (dx):
//   dst[b, grp*D + o, t] = act(bias + sum_{s < S, k < K} W'[o, s, k] src[b, grp*S + s, t + shift(k)])
// forward:    src = x, S = C_in/g, D = C_out/g, W'[o,s,k] = w[o,s,k],     shift(k) = -(K-1-k) d
// transposed: src = g, S = C_out/g, D = C_in/g, W'[o,s,k] = w[s,o,K-1-k], shift(k) = +k d
struct TcJob {
  const void* src;
  const void* weight;
  const void* bias;  // forward only; nullptr: none
  const void* dy;    // silu_grad only
  void* dst;
  void* workspace;  // tc_workspace_bytes(...) for the prepared weights
  int64_t src_stride[3], dst_stride[3], w_stride[3], bias_stride, dy_stride[3];
  int64_t batch, length, dilation, groups, src_g, dst_g, width;
  DType dtype;  // of the weights and dst (the source may be fp32 for 16-bit dtypes)
  bool silu, transposed;
  bool silu_grad;  // forward convolution, but dst (fp32) = dy * silu'(bias + conv)
};

struct TcParams {
  const void* src;
  const void* bias;
  const void* dy;  // silu_grad only
  void* dst;
  const uint16_t* w_hi;  // prepared weights
  const uint16_t* w_lo;  // fp32 only
  int64_t src_stride[3], dst_stride[3], bias_stride, dy_stride[3];
  int64_t batch, length, dilation, groups, src_g, dst_g, width;
  int64_t o_pad, c_chunks, o_tiles, time_tiles;
  int taps_per_stage, tap_chunks;
  bool silu, transposed, silu_grad;
};

struct Prepared {
  int64_t o_pad, c_chunks, elements;  // elements per copy
  int taps_per_stage, tap_chunks;
  bool split;
};

Prepared prepared_layout(int64_t src_g, int64_t dst_g, int64_t width, int64_t dilation, int64_t groups,
                         DType dtype) {
  Prepared p{};
  p.o_pad = (dst_g + kBM - 1) / kBM * kBM;
  p.c_chunks = (src_g + kBC - 1) / kBC;
  p.taps_per_stage = int(std::min<int64_t>({width, int64_t(kMaxTaps), 1 + kMaxShift / dilation}));
  p.tap_chunks = int((width + p.taps_per_stage - 1) / p.taps_per_stage);
  p.split = dtype == DType::f32;
  p.elements = groups * p.c_chunks * width * p.o_pad * kBC;
  return p;
}

size_t prepared_bytes(const Prepared& p) { return size_t(p.elements) * 2 * (p.split ? 2 : 1); }

bool tc_supported(int64_t src_g, int64_t dst_g, int64_t length, int64_t width, int64_t dilation, int64_t groups,
                  DType dtype) {
  if (src_g < 16 || dst_g < 32) return false;  // tiles mostly padding: the CUDA-core kernels do better
  const Prepared lay = prepared_layout(src_g, dst_g, width, dilation, groups, dtype);
  if (int64_t(prepared_bytes(lay)) > kMaxPreparedBytes) return false;
  if (lay.c_chunks * lay.tap_chunks > 2147483647) return false;
  return (lay.o_pad / kBM) * ((length + kBN - 1) / kBN) <= 2147483647;
}

// ---- small device helpers ------------------------------------------------------------

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, __half>;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The "memory" clobbers keep the compiler from moving shared-memory accesses across the copies,
// commits and waits.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_1() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

// The bits of a 16-bit MMA operand (bf16 unless kHalf) and back.
template <bool kHalf>
__device__ __forceinline__ uint16_t operand_bits(float v) {
  if constexpr (kHalf) {
    const __half h = __float2half_rn(v);
    return *reinterpret_cast<const uint16_t*>(&h);
  } else {
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    return *reinterpret_cast<const uint16_t*>(&h);
  }
}
template <bool kHalf>
__device__ __forceinline__ float operand_value(uint32_t bits) {
  if constexpr (kHalf) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  } else {
    return __uint_as_float(bits << 16);
  }
}

// Byte offset of 16-byte chunk c of row r in a swizzled [row][32] tile.
__device__ __forceinline__ uint32_t swizzled(int row, int chunk) {
  return uint32_t(row * kRowBytes + ((chunk ^ ((row >> 1) & 3)) << 4));
}

// ---- weight preparation -------------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(256)
    prepare_weights(const T* w, int64_t ws0, int64_t ws1, int64_t ws2, int64_t groups, int64_t src_g,
                    int64_t dst_g, int64_t width, int64_t o_pad, int64_t c_chunks, bool transposed, uint16_t* hi,
                    uint16_t* lo) {
  const int64_t total = groups * c_chunks * width * o_pad * kBC;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = e;
    const int64_t c = r % kBC;
    r /= kBC;
    const int64_t o = r % o_pad;
    r /= o_pad;
    const int64_t k = r % width;
    r /= width;
    const int64_t cc = r % c_chunks;
    const int64_t grp = r / c_chunks;
    const int64_t i = cc * kBC + c;
    const int64_t off = transposed ? (grp * src_g + i) * ws0 + o * ws1 + (width - 1 - k) * ws2
                                   : (grp * dst_g + o) * ws0 + i * ws1 + k * ws2;
    const float v = (o < dst_g && i < src_g) ? to_float(w[off]) : 0.0f;
    if constexpr (kIsHalf<T>) {
      const __half h = __float2half_rn(v);
      hi[e] = *reinterpret_cast<const uint16_t*>(&h);
    } else {
      const __nv_bfloat16 h = __float2bfloat16_rn(v);
      hi[e] = *reinterpret_cast<const uint16_t*>(&h);
      if constexpr (std::is_same_v<T, float>) {
        const __nv_bfloat16 l = __float2bfloat16_rn(v - __bfloat162float(h));
        lo[e] = *reinterpret_cast<const uint16_t*>(&l);
      }
    }
  }
}

// ---- the implicit-GEMM kernel ---------------------------------------------------------

// T: weights and output (and MMA operands: bf16 for fp32 via the split); TSrc: the source rows.
template <typename T, typename TSrc>
__global__ void __launch_bounds__(kThreads, 1) dense_tc_kernel(TcParams p) {
  constexpr bool kSplit = std::is_same_v<T, float>;
  constexpr bool kHalf = kIsHalf<T>;
  constexpr int kCopies = kSplit ? 2 : 1;
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / 4, wn = warp % 4;  // warp tile: rows wm*64.., time wn*32..

  const int taps = p.taps_per_stage;
  const uint32_t w_bytes = uint32_t(taps) * kWTapBytes;  // one copy of a stage's weights
  const uint32_t x_bytes = kRows * kRowBytes;            // one copy of a stage's x window
  const uint32_t buf_bytes = kCopies * (w_bytes + x_bytes);
  const uint32_t smem_base = smem_addr(smem);
  // Buffer b: [w hi][w lo][x hi][x lo].
  auto w_tile = [&](int b, int copy) { return smem_base + b * buf_bytes + copy * w_bytes; };
  auto x_tile = [&](int b, int copy) { return smem_base + b * buf_bytes + kCopies * w_bytes + copy * x_bytes; };

  const int64_t K = p.width, d = p.dilation, n = p.length;
  const int stages = int(p.c_chunks) * p.tap_chunks;

  for (int64_t bz = blockIdx.z; bz < p.batch; bz += gridDim.z) {
    for (int64_t grp = blockIdx.y; grp < p.groups; grp += gridDim.y) {
      const int64_t ot = int64_t(blockIdx.x) % p.o_tiles;  // o fastest: neighbours share the x window in L2
      const int64_t t0 = int64_t(blockIdx.x) / p.o_tiles * kBN;
      const int64_t o0 = ot * kBM;
      const TSrc* x_group =
          static_cast<const TSrc*>(p.src) + bz * p.src_stride[0] + grp * p.src_g * p.src_stride[1];

      // Stage s: input channels [cc*32, cc*32+32), taps [k0, k0+nk).
      auto stage_geometry = [&](int s, int64_t& cc, int64_t& k0, int& nk) {
        cc = s / p.tap_chunks;
        k0 = int64_t(s % p.tap_chunks) * taps;
        nk = int(std::min<int64_t>(taps, K - k0));
      };

      auto issue_weights = [&](int s, int b) {
        int64_t cc, k0;
        int nk;
        stage_geometry(s, cc, k0, nk);
        const int64_t base = (((grp * p.c_chunks + cc) * K + k0) * p.o_pad + o0) * kBC;
        for (int idx = tid; idx < nk * kBM * 4; idx += kThreads) {
          const int kk = idx / (kBM * 4), rem = idx % (kBM * 4), o = rem / 4, c = rem % 4;
          const int64_t src = base + (int64_t(kk) * p.o_pad + o) * kBC + c * 8;
          const uint32_t dst = uint32_t(kk) * kWTapBytes + swizzled(o, c);
          cp_async16(w_tile(b, 0) + dst, p.w_hi + src);
          if constexpr (kSplit) cp_async16(w_tile(b, 1) + dst, p.w_lo + src);
        }
      };

      // x window of stage s: rows r <-> time ts + r, ts = t0 - (K-1-k0) d; this thread loads
      // rows tl + 32 j of channels cg*4 .. cg*4+3.
      const int tl = tid % 32, cg = tid / 32;
      // The raw source values (fp32, or the bits of a 16-bit value), converted only when
      // stored: issue is in order, so a conversion here would make the warp wait for the
      // loads before the tensor-core work they are meant to overlap.
      using Raw = std::conditional_t<std::is_same_v<TSrc, float>, float, uint16_t>;
      Raw xr[kRowsPerThread][4];
      auto load_x = [&](int s) {
        int64_t cc, k0;
        int nk;
        stage_geometry(s, cc, k0, nk);
        const int64_t ts = p.transposed ? t0 + k0 * d : t0 - (K - 1 - k0) * d;
        const int rows = kBN + int((nk - 1) * d);  // nk == 1 whenever d > kMaxShift
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int64_t ci = cc * kBC + cg * 4 + c;
          const bool channel_ok = ci < p.src_g;
          const Raw* row = reinterpret_cast<const Raw*>(x_group + (channel_ok ? ci : 0) * p.src_stride[1]);
#pragma unroll
          for (int j = 0; j < kRowsPerThread; ++j) {
            const int r = tl + 32 * j;
            const int64_t t = ts + r;
            Raw v = Raw(0);  // +0 in every format
            if (channel_ok && r < rows && t >= 0 && t < n) v = row[t * p.src_stride[2]];
            xr[j][c] = v;
          }
        }
      };
      auto store_x = [&](int s, int b) {
        int64_t cc, k0;
        int nk;
        stage_geometry(s, cc, k0, nk);
        const int rows = kBN + int((nk - 1) * d);  // nk == 1 whenever d > kMaxShift
        unsigned char* xs = smem + (x_tile(b, 0) - smem_base);
#pragma unroll
        for (int j = 0; j < kRowsPerThread; ++j) {
          const int r = tl + 32 * j;
          if (r >= rows) continue;
#pragma unroll
          for (int q = 0; q < 2; ++q) {  // channel pairs cg*2 + q: chunk cg/2, word (cg*2+q) % 4
            const int pair = cg * 2 + q;
            const uint32_t off = swizzled(r, pair / 4) + (pair % 4) * 4;
            if constexpr (kSplit) {
              const float v0 = xr[j][2 * q], v1 = xr[j][2 * q + 1];
              const float h0 = bf16_hi(v0), h1 = bf16_hi(v1);
              *reinterpret_cast<uint32_t*>(xs + off) = pack2<false>(h0, h1);
              *reinterpret_cast<uint32_t*>(xs + x_bytes + off) = pack2<false>(v0 - h0, v1 - h1);
            } else if constexpr (std::is_same_v<TSrc, float>) {  // fp32 gradient into 16-bit operands
              *reinterpret_cast<uint32_t*>(xs + off) = pack2<kHalf>(xr[j][2 * q], xr[j][2 * q + 1]);
            } else {  // 16-bit source: the bits as they are, the first channel in the low half
              *reinterpret_cast<uint32_t*>(xs + off) = uint32_t(xr[j][2 * q]) | (uint32_t(xr[j][2 * q + 1]) << 16);
            }
          }
        }
      };

      float acc[4][4][4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

      __syncthreads();  // the previous (batch, group) round is done with the buffers
      issue_weights(0, 0);
      cp_async_commit();
      load_x(0);
      store_x(0, 0);

      for (int s = 0; s < stages; ++s) {
        const int b = s & 1;
        if (s + 1 < stages) issue_weights(s + 1, b ^ 1);
        cp_async_commit();
        if (s + 1 < stages) load_x(s + 1);  // in flight while the tensor cores run
        cp_async_wait_1();
        __syncthreads();

        int64_t cc, k0;
        int nk;
        stage_geometry(s, cc, k0, nk);
#pragma unroll 1
        for (int kk = 0; kk < nk; ++kk) {
          const int shift = int(kk * d);  // tap k0+kk reads the window kk*d rows further down
#pragma unroll
          for (int kh = 0; kh < 2; ++kh) {  // two k16 steps over the 32 channels
            uint32_t bh[4][2], bl[4][2];
#pragma unroll
            for (int jp = 0; jp < 4; jp += 2) {
              const int q = lane / 8;
              const int row = wn * 32 + (jp + q / 2) * 8 + lane % 8 + shift;
              const uint32_t off = swizzled(row, kh * 2 + q % 2);
              uint32_t r[4];
              ldmatrix_x4(r, x_tile(b, 0) + off);
              bh[jp][0] = r[0];
              bh[jp][1] = r[1];
              bh[jp + 1][0] = r[2];
              bh[jp + 1][1] = r[3];
              if constexpr (kSplit) {
                ldmatrix_x4(r, x_tile(b, 1) + off);
                bl[jp][0] = r[0];
                bl[jp][1] = r[1];
                bl[jp + 1][0] = r[2];
                bl[jp + 1][1] = r[3];
              }
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const int q = lane / 8;
              const int orow = wm * 64 + i * 16 + (q % 2) * 8 + lane % 8;
              const uint32_t off = uint32_t(kk) * kWTapBytes + swizzled(orow, kh * 2 + q / 2);
              uint32_t ah[4];
              ldmatrix_x4(ah, w_tile(b, 0) + off);
              if constexpr (kSplit) {
                uint32_t al[4];
                ldmatrix_x4(al, w_tile(b, 1) + off);
                // Small terms first; j innermost so that consecutive MMAs are independent
                // (the three products of one accumulator would otherwise wait on each other).
#pragma unroll
                for (int j = 0; j < 4; ++j) mma_m16n8k16<false>(acc[i][j], al, bh[j][0], bh[j][1]);
#pragma unroll
                for (int j = 0; j < 4; ++j) mma_m16n8k16<false>(acc[i][j], ah, bl[j][0], bl[j][1]);
#pragma unroll
                for (int j = 0; j < 4; ++j) mma_m16n8k16<false>(acc[i][j], ah, bh[j][0], bh[j][1]);
              } else {
#pragma unroll
                for (int j = 0; j < 4; ++j) mma_m16n8k16<kHalf>(acc[i][j], ah, bh[j][0], bh[j][1]);
              }
            }
          }
        }
        __syncthreads();  // buffer b is consumed: stage s+2's weights and stage s+1's x may land
        if (s + 1 < stages) store_x(s + 1, b ^ 1);
      }

      // Epilogue: c0,c1 at (row lane/4, time 2*(lane%4) + {0,1}); c2,c3 eight rows down.
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t o = o0 + wm * 64 + i * 16 + lane / 4 + h * 8;
          if (o >= p.dst_g) continue;
          const int64_t c = grp * p.dst_g + o;
          const float bias = p.bias ? to_float(static_cast<const T*>(p.bias)[c * p.bias_stride]) : 0.0f;
          const int64_t y_row = bz * p.dst_stride[0] + c * p.dst_stride[1];
          const T* dy = p.silu_grad ? static_cast<const T*>(p.dy) + bz * p.dy_stride[0] + c * p.dy_stride[1] : nullptr;
#pragma unroll
          for (int j = 0; j < 4; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int64_t t = t0 + wn * 32 + j * 8 + 2 * (lane % 4) + e;
              if (t >= n) continue;
              const float v = acc[i][j][h * 2 + e] + bias;
              if (p.silu_grad) {
                static_cast<float*>(p.dst)[y_row + t * p.dst_stride[2]] =
                    to_float(dy[t * p.dy_stride[2]]) * silu_derivative<T>(v);
              } else {
                static_cast<T*>(p.dst)[y_row + t * p.dst_stride[2]] = from_float<T>(p.silu ? silu<T>(v) : v);
              }
            }
          }
        }
      }
    }
  }
}

size_t kernel_smem_bytes(const Prepared& p) {
  const size_t copies = p.split ? 2 : 1;
  return 2 * copies * (size_t(p.taps_per_stage) * kWTapBytes + size_t(kRows) * kRowBytes);
}

template <typename T, typename TSrc>
void launch_tc(const TcJob& job, cudaStream_t stream, const char* what) {
  const Prepared lay = prepared_layout(job.src_g, job.dst_g, job.width, job.dilation, job.groups, job.dtype);
  auto* hi = static_cast<uint16_t*>(job.workspace);
  uint16_t* lo = lay.split ? hi + lay.elements : nullptr;

  const unsigned prep_blocks = unsigned(std::min<int64_t>((lay.elements + 255) / 256, 4096));
  prepare_weights<T><<<prep_blocks, 256, 0, stream>>>(static_cast<const T*>(job.weight), job.w_stride[0],
                                                      job.w_stride[1], job.w_stride[2], job.groups, job.src_g,
                                                      job.dst_g, job.width, lay.o_pad, lay.c_chunks,
                                                      job.transposed, hi, lo);
  check_launch(what);

  TcParams p{};
  p.src = job.src;
  p.bias = job.bias;
  p.dy = job.dy;
  p.dst = job.dst;
  p.w_hi = hi;
  p.w_lo = lo;
  for (int d = 0; d < 3; ++d) {
    p.src_stride[d] = job.src_stride[d];
    p.dst_stride[d] = job.dst_stride[d];
    p.dy_stride[d] = job.dy_stride[d];
  }
  p.bias_stride = job.bias_stride;
  p.batch = job.batch;
  p.length = job.length;
  p.dilation = job.dilation;
  p.groups = job.groups;
  p.src_g = job.src_g;
  p.dst_g = job.dst_g;
  p.width = job.width;
  p.o_pad = lay.o_pad;
  p.c_chunks = lay.c_chunks;
  p.o_tiles = lay.o_pad / kBM;
  p.time_tiles = (job.length + kBN - 1) / kBN;
  p.taps_per_stage = lay.taps_per_stage;
  p.tap_chunks = lay.tap_chunks;
  p.silu = job.silu;
  p.transposed = job.transposed;
  p.silu_grad = job.silu_grad;

  const size_t smem = kernel_smem_bytes(lay);
  allow_dynamic_shared_memory(dense_tc_kernel<T, TSrc>, smem, what);
  const dim3 grid(unsigned(p.o_tiles * p.time_tiles), unsigned(std::min<int64_t>(job.groups, 65535)),
                  unsigned(std::min<int64_t>(job.batch, 65535)));
  dense_tc_kernel<T, TSrc><<<grid, kThreads, smem, stream>>>(p);
  check_launch(what);
}

// ---- weight gradients on tensor cores --------------------------------------------------
//
//   dW[o, i, k] = sum_{b, t} G[b, o, t] X[b, i, t - (K-1-k) d]    M = C_out/g, N = C_in/g x K, reduction = B x L
//
// G is dy, or the fp32 gradient through silu. A CTA makes 128 output channels x 32 input
// channels x up to 4 taps with 8 warps: 2 along M (64 rows each) x 4 taps (warp wn <-> tap
// k0 + wn, all 32 channels). The reduction runs over units of 64 (fp32 G: 32) time steps of
// one batch row; a CTA sums a fixed, contiguous range of units (its part) and writes fp32
// partials, which dense_weight_grad_reduce adds in part order (bitwise reproducible). Per
// unit the CTA stages in shared memory, through registers (any strides, zero fill):
//   - G as [o][t] (128 rows, in 32-step halves): the A operand, read like the forward's weights;
//   - the x window as [t][i] over the unit's steps plus the taps' reach: tap kk's B operand
//     (k = time, n = channel) is the window read kk*d rows further down, through
//     ldmatrix.trans, so one staged window serves every tap (as in the forward).
// Both use the forward's swizzled 64-byte rows. The CTAs of the first channel/tap tile also
// sum the rows of G (dbias). fp32 uses the same 3-product bf16 split as the forward.
// Time steps per unit (the MMA reduction of one stage): 64 for 16-bit G; 32 when G is fp32
// (fp32 data or the silu gradient), whose 64-step staging would spill.
constexpr int dw_steps(bool float_g) { return float_g ? 32 : 64; }
constexpr int kDwOPerThread = kBM / 8;     // G staging: 8 warps x 32 time lanes, per 32 steps
constexpr int64_t kDwTargetBlocks = 1024;  // about 8 waves of 1 CTA per SM on a large GPU

struct DwLayout {
  int64_t o_tiles, i_tiles, k_chunks, units_per_row, parts;
  int taps;
  int64_t blocks_per_part() const { return o_tiles * i_tiles * k_chunks; }
};

DwLayout dw_layout(const DenseGeometry& g) {
  DwLayout l{};
  const int64_t S = g.in_per_group(), D = g.out_per_group();
  l.o_tiles = (D + kBM - 1) / kBM;
  l.i_tiles = (S + kBC - 1) / kBC;
  l.taps = int(std::min<int64_t>({g.width, int64_t(kMaxTaps), 1 + kMaxShift / g.dilation}));
  l.k_chunks = (g.width + l.taps - 1) / l.taps;
  const int steps = dw_steps(g.dtype == DType::f32 || g.silu);
  l.units_per_row = (g.length + steps - 1) / steps;
  const int64_t units = g.batch * l.units_per_row;
  const int64_t blocks = std::max<int64_t>(1, g.groups * l.blocks_per_part());
  const int64_t elements = std::max<int64_t>(1, g.c_out * S * g.width + g.c_out);
  const int64_t cap = std::max<int64_t>(1, (int64_t(1) << 26) / elements);  // <= 256 MiB of partials
  l.parts = std::max<int64_t>(1, std::min({(kDwTargetBlocks + blocks - 1) / blocks, units, cap, int64_t(65535)}));
  return l;
}

struct DwParams {
  const void* g;
  const void* x;
  float* partials;  // parts x (C_out*S*K dweight, then C_out dbias)
  int64_t g_stride[3], x_stride[3];
  int64_t batch, length, dilation, width, in_g, out_g, c_out;
  int64_t o_tiles, i_tiles, k_chunks, units_per_row, parts;
  int taps;
};

// T: x and the MMA operands (bf16 pairs for fp32); TG: the gradient rows.
template <typename T, typename TG>
__global__ void __launch_bounds__(kThreads, 1) dense_tc_weight_grad(DwParams p) {
  constexpr bool kSplit = std::is_same_v<T, float>;
  constexpr bool kHalf = kIsHalf<T>;
  constexpr int kCopies = kSplit ? 2 : 1;
  constexpr int kDwSteps = dw_steps(std::is_same_v<TG, float>);
  constexpr int kDwHalves = kDwSteps / 32;        // G tile: [half][o][32 steps] (64-byte rows)
  constexpr int kDwRows = kDwSteps + kMaxShift;   // x window rows per unit
  constexpr int kDwRowsPerThread = kDwRows / 32;  // x staging: one time step per lane
  constexpr uint32_t g_half = kBM * kRowBytes;       // 32 steps of G
  constexpr uint32_t g_bytes = kDwHalves * g_half;   // one copy of a unit's G tile
  constexpr uint32_t x_bytes = kDwRows * kRowBytes;  // one copy of a unit's x window
  constexpr bool kFloatG = std::is_same_v<TG, float>;  // dbias sums a copy of the fp32 rows
  constexpr uint32_t buf_bytes = kCopies * (g_bytes + x_bytes) + (kFloatG ? kBM * kDwSteps * 4 : 0);
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / 4, wn = warp % 4;
  const uint32_t smem_base = smem_addr(smem);
  // Buffer b: [G hi][G lo][x hi][x lo][G fp32 [o][t], bias tiles only].
  auto g_float = [&](int b) { return reinterpret_cast<float*>(smem + b * buf_bytes + kCopies * (g_bytes + x_bytes)); };
  auto g_tile = [&](int b, int copy) { return smem_base + b * buf_bytes + copy * g_bytes; };
  auto x_tile = [&](int b, int copy) { return smem_base + b * buf_bytes + kCopies * g_bytes + copy * x_bytes; };

  const int64_t K = p.width, d = p.dilation, n = p.length, S = p.in_g, D = p.out_g;
  int64_t tile = blockIdx.x;
  const int64_t kq = tile % p.k_chunks;
  tile /= p.k_chunks;
  const int64_t it = tile % p.i_tiles;
  tile /= p.i_tiles;
  const int64_t ot = tile % p.o_tiles;
  const int64_t grp = tile / p.o_tiles;
  const int64_t k0 = kq * p.taps, i0 = it * kBC, o0 = ot * kBM;
  const int nk = int(std::min<int64_t>(p.taps, K - k0));
  const int rows = kDwSteps + int((nk - 1) * d);  // window rows used; nk == 1 whenever d > kMaxShift
  const bool bias_tile = it == 0 && kq == 0;
  const int64_t part = blockIdx.y;
  const int64_t units = p.batch * p.units_per_row;
  const int64_t u_begin = part * units / p.parts, u_end = (part + 1) * units / p.parts;
  const TG* g_group = static_cast<const TG*>(p.g) + (grp * D + o0) * p.g_stride[1];
  const T* x_group = static_cast<const T*>(p.x) + (grp * S + i0) * p.x_stride[1];

  // Raw values, converted when stored (see the forward's load_x): G rows warp + 8m at steps
  // lane + 32h; x window rows lane + 32j of channels warp*4 .. warp*4+3.
  using RawG = std::conditional_t<std::is_same_v<TG, float>, float, uint16_t>;
  using RawX = std::conditional_t<kSplit, float, uint16_t>;
  RawG gr[kDwHalves][kDwOPerThread];
  RawX xr[kDwRowsPerThread][4];
  auto load = [&](int64_t u) {
    const int64_t b = u / p.units_per_row;
    const int64_t t0 = (u - b * p.units_per_row) * kDwSteps;
    const RawG* g_rows = reinterpret_cast<const RawG*>(g_group + b * p.g_stride[0]);
#pragma unroll
    for (int h = 0; h < kDwHalves; ++h) {
      const int64_t t = t0 + 32 * h + lane;
#pragma unroll
      for (int m = 0; m < kDwOPerThread; ++m) {
        const int o = warp + 8 * m;
        RawG v = RawG(0);
        if (o0 + o < D && t < n) v = g_rows[o * p.g_stride[1] + t * p.g_stride[2]];
        gr[h][m] = v;
      }
    }
    const int64_t ts = t0 - (K - 1 - k0) * d;  // window row r <-> time ts + r
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int64_t ci = i0 + warp * 4 + c;
      const bool channel_ok = ci < S;
      const RawX* row = reinterpret_cast<const RawX*>(x_group + b * p.x_stride[0] +
                                                      (channel_ok ? ci - i0 : 0) * p.x_stride[1]);
#pragma unroll
      for (int j = 0; j < kDwRowsPerThread; ++j) {
        const int r = lane + 32 * j;
        const int64_t t = ts + r;
        RawX v = RawX(0);
        if (channel_ok && r < rows && t >= 0 && t < n) v = row[t * p.x_stride[2]];
        xr[j][c] = v;
      }
    }
  };
  auto store = [&](int b) {
    unsigned char* gs = smem + (g_tile(b, 0) - smem_base);
#pragma unroll
    for (int h = 0; h < kDwHalves; ++h) {
#pragma unroll
      for (int m = 0; m < kDwOPerThread; ++m) {
        const RawG v = gr[h][m];
        const uint32_t off = h * g_half + swizzled(warp + 8 * m, lane / 8) + (lane % 8) * 2;
        if constexpr (kSplit) {
          const float hi = bf16_hi(v);
          *reinterpret_cast<uint16_t*>(gs + off) = operand_bits<false>(hi);
          *reinterpret_cast<uint16_t*>(gs + g_bytes + off) = operand_bits<false>(v - hi);
        } else if constexpr (std::is_same_v<TG, float>) {
          *reinterpret_cast<uint16_t*>(gs + off) = operand_bits<kHalf>(v);
        } else {
          *reinterpret_cast<uint16_t*>(gs + off) = v;
        }
        if constexpr (kFloatG) {
          if (bias_tile) g_float(b)[(warp + 8 * m) * kDwSteps + 32 * h + lane] = v;
        }
      }
    }
    unsigned char* xs = smem + (x_tile(b, 0) - smem_base);
#pragma unroll
    for (int j = 0; j < kDwRowsPerThread; ++j) {
      const int r = lane + 32 * j;
      if (r >= rows) continue;
#pragma unroll
      for (int q = 0; q < 2; ++q) {  // channel pairs warp*2 + q: chunk warp/2, word (warp*2+q) % 4
        const int pair = warp * 2 + q;
        const uint32_t off = swizzled(r, pair / 4) + (pair % 4) * 4;
        if constexpr (kSplit) {
          const float v0 = xr[j][2 * q], v1 = xr[j][2 * q + 1];
          const float h0 = bf16_hi(v0), h1 = bf16_hi(v1);
          *reinterpret_cast<uint32_t*>(xs + off) = pack2<false>(h0, h1);
          *reinterpret_cast<uint32_t*>(xs + x_bytes + off) = pack2<false>(v0 - h0, v1 - h1);
        } else {
          *reinterpret_cast<uint32_t*>(xs + off) = uint32_t(xr[j][2 * q]) | (uint32_t(xr[j][2 * q + 1]) << 16);
        }
      }
    }
  };

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
  float bsum = 0.0f;

  if (u_begin < u_end) {
    load(u_begin);
    store(0);
  }
  for (int64_t u = u_begin; u < u_end; ++u) {
    const int b = int((u - u_begin) & 1);
    if (u + 1 < u_end) load(u + 1);  // in flight while the tensor cores run
    // Buffer b is complete, and every warp is done with buffer b^1 (the previous unit),
    // so it may be refilled below without a second barrier.
    __syncthreads();

    if (bias_tile && tid < kBM) {  // dbias: thread tid sums row tid of G
      if constexpr (kFloatG) {  // the fp32 rows; steps rotated by tid (no bank conflicts)
        const float* gf = g_float(b) + tid * kDwSteps;
#pragma unroll
        for (int w = 0; w < kDwSteps; ++w) bsum += gf[(w + tid) % kDwSteps];
      } else {  // 16-bit rows, exact in fp32; words rotated by tid/8 (no bank conflicts)
        const unsigned char* gs = smem + (g_tile(b, 0) - smem_base);
#pragma unroll
        for (int h = 0; h < kDwHalves; ++h) {
#pragma unroll
          for (int w = 0; w < 16; ++w) {
            const int word = (w & ~3) | ((w + (tid >> 3)) & 3);
            const uint32_t off = h * g_half + swizzled(tid, word / 4) + (word % 4) * 4;
            const uint32_t bits = *reinterpret_cast<const uint32_t*>(gs + off);
            bsum += operand_value<kHalf>(bits & 0xffffu) + operand_value<kHalf>(bits >> 16);
          }
        }
      }
    }

    if (wn < nk) {  // warp-uniform: tap k0 + wn exists
      const int shift = int(wn * d);  // tap k0+wn reads the window wn*d rows further down
#pragma unroll
      for (int kh = 0; kh < kDwSteps / 16; ++kh) {  // k16 steps over the unit's time steps
        const int q = lane / 8;
        uint32_t bh[4][2], bl[4][2];
#pragma unroll
        for (int jp = 0; jp < 4; jp += 2) {  // matrices: (t 0-7, ch jp), (t 8-15, jp), (t 0-7, jp+1), (t 8-15, jp+1)
          const int row = kh * 16 + (q % 2) * 8 + lane % 8 + shift;
          const uint32_t off = swizzled(row, jp + q / 2);
          uint32_t r[4];
          ldmatrix_x4_trans(r, x_tile(b, 0) + off);
          bh[jp][0] = r[0];
          bh[jp][1] = r[1];
          bh[jp + 1][0] = r[2];
          bh[jp + 1][1] = r[3];
          if constexpr (kSplit) {
            ldmatrix_x4_trans(r, x_tile(b, 1) + off);
            bl[jp][0] = r[0];
            bl[jp][1] = r[1];
            bl[jp + 1][0] = r[2];
            bl[jp + 1][1] = r[3];
          }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int orow = wm * 64 + i * 16 + (q % 2) * 8 + lane % 8;
          const uint32_t off = (kh / 2) * g_half + swizzled(orow, (kh % 2) * 2 + q / 2);
          uint32_t ah[4];
          ldmatrix_x4(ah, g_tile(b, 0) + off);
          if constexpr (kSplit) {
            uint32_t al[4];
            ldmatrix_x4(al, g_tile(b, 1) + off);
#pragma unroll
            for (int j = 0; j < 4; ++j) mma_m16n8k16<false>(acc[i][j], al, bh[j][0], bh[j][1]);
#pragma unroll
            for (int j = 0; j < 4; ++j) mma_m16n8k16<false>(acc[i][j], ah, bl[j][0], bl[j][1]);
#pragma unroll
            for (int j = 0; j < 4; ++j) mma_m16n8k16<false>(acc[i][j], ah, bh[j][0], bh[j][1]);
          } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) mma_m16n8k16<kHalf>(acc[i][j], ah, bh[j][0], bh[j][1]);
          }
        }
      }
    }
    if (u + 1 < u_end) store(b ^ 1);
  }

  // Partials of this part: c0,c1 at (row lane/4, channel 2*(lane%4) + {0,1}); c2,c3 eight rows down.
  float* out = p.partials + part * (p.c_out * S * K + p.c_out);
  if (wn < nk) {
    const int64_t k = k0 + wn;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t o = o0 + wm * 64 + i * 16 + lane / 4 + h * 8;
        if (o >= D) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int64_t ch = i0 + j * 8 + 2 * (lane % 4) + e;
            if (ch < S) out[((grp * D + o) * S + ch) * K + k] = acc[i][j][h * 2 + e];
          }
        }
      }
    }
  }
  if (bias_tile && tid < kBM && o0 + tid < D) out[p.c_out * S * K + grp * D + o0 + tid] = bsum;
}

template <typename T, typename TG>
void launch_tc_weight_grad(const DwParams& p, int64_t groups, cudaStream_t stream) {
  constexpr size_t copies = std::is_same_v<T, float> ? 2 : 1;
  constexpr size_t steps = dw_steps(std::is_same_v<TG, float>);
  constexpr size_t g_float = std::is_same_v<TG, float> ? size_t(kBM) * steps * 4 : 0;
  constexpr size_t smem = 2 * (copies * (size_t(kBM) * (steps / 32) + steps + kMaxShift) * kRowBytes + g_float);
  constexpr const char* what = "causal_conv1d backward (dense weight gradients, tensor cores)";
  allow_dynamic_shared_memory(dense_tc_weight_grad<T, TG>, smem, what);
  const dim3 grid(unsigned(groups * p.o_tiles * p.i_tiles * p.k_chunks), unsigned(p.parts));
  dense_tc_weight_grad<T, TG><<<grid, kThreads, smem, stream>>>(p);
  check_launch(what);
}

// The forward convolution (or its silu gradient) of a job, by dtype.
void launch_forward_job(const TcJob& job, Stream stream, const char* what) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  switch (job.dtype) {
    case DType::f32: launch_tc<float, float>(job, s, what); break;
    case DType::f16: launch_tc<__half, __half>(job, s, what); break;
    case DType::bf16: launch_tc<__nv_bfloat16, __nv_bfloat16>(job, s, what); break;
    case DType::f64: break;  // rejected by validation
  }
}

}  // namespace

bool dense_tc_forward_supported(const DenseGeometry& g) {
  return tc_supported(g.in_per_group(), g.out_per_group(), g.length, g.width, g.dilation, g.groups, g.dtype);
}

size_t dense_tc_forward_workspace_bytes(const DenseGeometry& g) {
  return prepared_bytes(prepared_layout(g.in_per_group(), g.out_per_group(), g.width, g.dilation, g.groups, g.dtype));
}

void launch_dense_tc_forward(const DenseForwardParams& f, Stream stream) {
  const DenseGeometry& g = f.g;
  TcJob job{};
  job.src = f.x;
  job.weight = f.weight;
  job.bias = f.bias;
  job.dst = f.y;
  job.workspace = f.workspace;
  for (int d = 0; d < 3; ++d) {
    job.src_stride[d] = f.x_stride[d];
    job.dst_stride[d] = f.y_stride[d];
    job.w_stride[d] = f.w_stride[d];
  }
  job.bias_stride = f.bias_stride;
  job.batch = g.batch;
  job.length = g.length;
  job.dilation = g.dilation;
  job.groups = g.groups;
  job.src_g = g.in_per_group();
  job.dst_g = g.out_per_group();
  job.width = g.width;
  job.dtype = g.dtype;
  job.silu = g.silu;
  job.transposed = false;
  launch_forward_job(job, stream, "causal_conv1d forward (dense, tensor cores)");
}

void launch_dense_tc_silu_grad(const DenseBackwardParams& b, float* grad, const int64_t (&grad_stride)[3],
                               void* workspace, Stream stream) {
  const DenseGeometry& g = b.g;
  TcJob job{};
  job.src = b.x;
  job.weight = b.weight;
  job.bias = b.bias;
  job.dy = b.dy;
  job.dst = grad;
  job.workspace = workspace;
  for (int d = 0; d < 3; ++d) {
    job.src_stride[d] = b.x_stride[d];
    job.dst_stride[d] = grad_stride[d];
    job.w_stride[d] = b.w_stride[d];
    job.dy_stride[d] = b.dy_stride[d];
  }
  job.bias_stride = b.bias_stride;
  job.batch = g.batch;
  job.length = g.length;
  job.dilation = g.dilation;
  job.groups = g.groups;
  job.src_g = g.in_per_group();
  job.dst_g = g.out_per_group();
  job.width = g.width;
  job.dtype = g.dtype;
  job.transposed = false;
  job.silu_grad = true;
  launch_forward_job(job, stream, "causal_conv1d backward (dense silu gradient, tensor cores)");
}

bool dense_tc_dx_supported(const DenseGeometry& g) {
  return tc_supported(g.out_per_group(), g.in_per_group(), g.length, g.width, g.dilation, g.groups, g.dtype);
}

size_t dense_tc_dx_workspace_bytes(const DenseGeometry& g) {
  return prepared_bytes(prepared_layout(g.out_per_group(), g.in_per_group(), g.width, g.dilation, g.groups, g.dtype));
}

void launch_dense_tc_dx(const DenseBackwardParams& b, const void* grad, bool grad_fp32,
                        const int64_t (&grad_stride)[3], void* workspace, Stream stream) {
  const DenseGeometry& g = b.g;
  TcJob job{};
  job.src = grad;
  job.weight = b.weight;
  job.dst = b.dx;
  job.workspace = workspace;
  for (int d = 0; d < 3; ++d) {
    job.src_stride[d] = grad_stride[d];
    job.dst_stride[d] = b.dx_stride[d];
    job.w_stride[d] = b.w_stride[d];
  }
  job.batch = g.batch;
  job.length = g.length;
  job.dilation = g.dilation;
  job.groups = g.groups;
  job.src_g = g.out_per_group();
  job.dst_g = g.in_per_group();
  job.width = g.width;
  job.dtype = g.dtype;
  job.transposed = true;
  auto s = static_cast<cudaStream_t>(stream.handle);
  constexpr const char* what = "causal_conv1d backward (dense dx, tensor cores)";
  switch (g.dtype) {
    case DType::f32: launch_tc<float, float>(job, s, what); break;
    case DType::f16:
      if (grad_fp32)
        launch_tc<__half, float>(job, s, what);
      else
        launch_tc<__half, __half>(job, s, what);
      break;
    case DType::bf16:
      if (grad_fp32)
        launch_tc<__nv_bfloat16, float>(job, s, what);
      else
        launch_tc<__nv_bfloat16, __nv_bfloat16>(job, s, what);
      break;
    case DType::f64: break;  // rejected by validation
  }
}

bool dense_tc_weight_grad_supported(const DenseGeometry& g) {
  const int64_t S = g.in_per_group(), D = g.out_per_group();
  if (S < 16 || D < 32 || g.batch * g.length == 0) return false;  // as the forward; empty: the generic path zeroes
  const DwLayout l = dw_layout(g);
  return g.groups * l.blocks_per_part() <= 2147483647;
}

int64_t dense_tc_weight_grad_parts(const DenseGeometry& g) { return dw_layout(g).parts; }

void launch_dense_tc_weight_grad(const DenseBackwardParams& b, const void* grad, bool grad_fp32,
                                 const int64_t (&grad_stride)[3], float* partials, Stream stream) {
  const DenseGeometry& g = b.g;
  const DwLayout l = dw_layout(g);
  DwParams p{};
  p.g = grad;
  p.x = b.x;
  p.partials = partials;
  for (int d = 0; d < 3; ++d) {
    p.g_stride[d] = grad_stride[d];
    p.x_stride[d] = b.x_stride[d];
  }
  p.batch = g.batch;
  p.length = g.length;
  p.dilation = g.dilation;
  p.width = g.width;
  p.in_g = g.in_per_group();
  p.out_g = g.out_per_group();
  p.c_out = g.c_out;
  p.o_tiles = l.o_tiles;
  p.i_tiles = l.i_tiles;
  p.k_chunks = l.k_chunks;
  p.units_per_row = l.units_per_row;
  p.parts = l.parts;
  p.taps = l.taps;
  auto s = static_cast<cudaStream_t>(stream.handle);
  switch (g.dtype) {
    case DType::f32: launch_tc_weight_grad<float, float>(p, g.groups, s); break;
    case DType::f16:
      if (grad_fp32)
        launch_tc_weight_grad<__half, float>(p, g.groups, s);
      else
        launch_tc_weight_grad<__half, __half>(p, g.groups, s);
      break;
    case DType::bf16:
      if (grad_fp32)
        launch_tc_weight_grad<__nv_bfloat16, float>(p, g.groups, s);
      else
        launch_tc_weight_grad<__nv_bfloat16, __nv_bfloat16>(p, g.groups, s);
      break;
    case DType::f64: break;  // rejected by validation
  }
}

}  // namespace causalconv::detail
