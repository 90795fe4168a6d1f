// Dense and grouped causal conv on CUDA cores: the generic path, correct for every shape,
// dtype, dilation and stride, and the fallback of everything the tensor-core path skips.
//
// One tiled kernel serves three convolutions (fp32 arithmetic, storage types in and out):
//   forward      y[o,t]  = act(bias[o] + sum_{i,k} w[o,i,k] x[i, t-(K-1-k)d])
//   silu_grad    g[o,t]  = dy[o,t] * silu'(bias[o] + sum_{i,k} w[o,i,k] x[i, t-(K-1-k)d])  (fp32 out)
//   transposed   dx[i,t] = sum_{o,k} w[o,i,k] g[o, t+(K-1-k)d]     (look-ahead, weights transposed)
// In each, a destination row is a sum over (source channel, tap) pairs of a weight times
// a time-shifted source row. A block makes 32 destination channels x 128 time steps of
// one (batch, group); it stages 16 pairs at a time in shared memory: for each pair the
// 128-step source window at that tap's shift (so any dilation needs no halo) and the 32
// weights. Each thread keeps 8 channels x 4 time steps of fp32 accumulators.
//
// Weight gradients: dw[o,i,k] = sum_{b,t} g[o,t] x[i,t-(K-1-k)d], db[o] = sum_{b,t} g[o,t].
// The (batch, 64-step time tile) space is cut into P contiguous parts (P depends on the
// shape only); a block sums one part for a 32 (o) x 32 (i) x 4 (tap) tile of dw and writes
// fp32 partials to the caller's workspace; a second kernel adds the P partials of each
// element in order. No atomics: bitwise reproducible.
#include <algorithm>
#include <type_traits>

#include "causal_conv1d/dense_kernels.h"
#include "causalconv/error.h"
#include "common/cuda_math.cuh"
#include "common/cuda_runtime.h"

namespace causalconv::detail {
namespace {

constexpr int64_t kMaxGridYZ = 65535;

// ---- the tiled conv kernel ----------------------------------------------------------

enum class TileMode : int { forward = 0, silu_grad = 1, transposed = 2 };

struct TileConvArgs {
  const void* src;  // forward / silu_grad: x; transposed: g
  const void* weight;
  const void* bias;  // forward / silu_grad; nullptr: none
  const void* dy;    // silu_grad
  void* dst;         // y, g (fp32) or dx
  int64_t src_stride[3], w_stride[3], dy_stride[3], dst_stride[3];
  int64_t bias_stride;
  int64_t batch, length, width, dilation, groups;
  int64_t src_per_group, dst_per_group;  // channels of a group read / written
  TileMode mode;
  bool silu;  // forward: apply silu
};

constexpr int kConvThreads = 128;
constexpr int kConvTime = 128;  // time steps per block: 4 per lane
constexpr int kConvRows = 32;   // destination channels per block: 8 per warp
constexpr int kConvPairs = 16;  // (source channel, tap) pairs per shared-memory stage

// T: weight/bias/dy storage type; TSrc: source rows; TDst: destination rows.
template <typename T, typename TSrc, typename TDst>
__global__ void __launch_bounds__(kConvThreads) dense_tile_conv(TileConvArgs p) {
  __shared__ float src_s[kConvPairs][kConvTime];
  __shared__ __align__(16) float w_s[kConvPairs][kConvRows];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t n = p.length, K = p.width, S = p.src_per_group, D = p.dst_per_group;
  const int64_t pairs = S * K;
  const bool transposed = p.mode == TileMode::transposed;
  const int64_t t0 = int64_t(blockIdx.x) * kConvTime;
  const int64_t row_tiles = (D + kConvRows - 1) / kConvRows;
  const T* w = static_cast<const T*>(p.weight);

  for (int64_t rt = blockIdx.y; rt < p.groups * row_tiles; rt += gridDim.y) {
    const int64_t grp = div_nonneg(rt, row_tiles);
    const int64_t d0 = (rt - grp * row_tiles) * kConvRows;
    for (int64_t b = blockIdx.z; b < p.batch; b += gridDim.z) {
      const TSrc* src = static_cast<const TSrc*>(p.src) + b * p.src_stride[0] + grp * S * p.src_stride[1];
      float acc[8][4];
#pragma unroll
      for (int m = 0; m < 8; ++m)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[m][e] = 0.0f;

      for (int64_t p0 = 0; p0 < pairs; p0 += kConvPairs) {
        __syncthreads();  // the previous stage is consumed
        // Source windows: warp w stages pairs w, w+4, ...; lanes walk time (coalesced).
        for (int pi = warp; pi < kConvPairs; pi += kConvThreads / 32) {
          const int64_t pair = p0 + pi;
          float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          if (pair < pairs) {
            const int64_t s = div_nonneg(pair, K), k = pair - s * K;
            const int64_t start = t0 + (transposed ? k * p.dilation : -(K - 1 - k) * p.dilation);
            const TSrc* row = src + s * p.src_stride[1];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int64_t t = start + lane + 32 * e;
              if (t >= 0 && t < n) v[e] = to_float(row[t * p.src_stride[2]]);
            }
          }
#pragma unroll
          for (int e = 0; e < 4; ++e) src_s[pi][lane + 32 * e] = v[e];
        }
        // Weights of the stage: w_s[pair][row]; transposed reads w[o=s, i=d, K-1-k].
        for (int idx = threadIdx.x; idx < kConvPairs * kConvRows; idx += kConvThreads) {
          const int pi = idx / kConvRows, r = idx % kConvRows;
          const int64_t pair = p0 + pi, d = d0 + r;
          float v = 0.0f;
          if (pair < pairs && d < D) {
            const int64_t s = div_nonneg(pair, K), k = pair - s * K;
            const int64_t off = transposed
                                    ? (grp * S + s) * p.w_stride[0] + d * p.w_stride[1] + (K - 1 - k) * p.w_stride[2]
                                    : (grp * D + d) * p.w_stride[0] + s * p.w_stride[1] + k * p.w_stride[2];
            v = to_float(w[off]);
          }
          w_s[pi][r] = v;
        }
        __syncthreads();

#pragma unroll 4
        for (int pi = 0; pi < kConvPairs; ++pi) {
          float xv[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) xv[e] = src_s[pi][lane + 32 * e];
          const float4 wa = *reinterpret_cast<const float4*>(&w_s[pi][warp * 8]);
          const float4 wb = *reinterpret_cast<const float4*>(&w_s[pi][warp * 8 + 4]);
          const float wv[8] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
#pragma unroll
          for (int m = 0; m < 8; ++m)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[m][e] = fmaf(wv[m], xv[e], acc[m][e]);
        }
      }

#pragma unroll
      for (int m = 0; m < 8; ++m) {
        const int64_t d = d0 + warp * 8 + m;
        if (d >= D) continue;
        const int64_t c = grp * D + d;  // global destination channel
        const float bias =
            (!transposed && p.bias) ? to_float(static_cast<const T*>(p.bias)[c * p.bias_stride]) : 0.0f;
        TDst* dst = static_cast<TDst*>(p.dst) + b * p.dst_stride[0] + c * p.dst_stride[1];
        const T* dy = p.mode == TileMode::silu_grad
                          ? static_cast<const T*>(p.dy) + b * p.dy_stride[0] + c * p.dy_stride[1]
                          : nullptr;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t t = t0 + lane + 32 * e;
          if (t >= n) continue;
          float v = acc[m][e] + bias;
          if (p.mode == TileMode::silu_grad)
            v = to_float(dy[t * p.dy_stride[2]]) * silu_derivative<T>(v);
          else if (p.silu)
            v = silu<T>(v);
          dst[t * p.dst_stride[2]] = from_float<TDst>(v);
        }
      }
    }
  }
}

template <typename T, typename TSrc, typename TDst>
void launch_tile_conv(const TileConvArgs& a, cudaStream_t stream, const char* what) {
  if (a.batch == 0 || a.length == 0 || a.dst_per_group == 0) return;
  const int64_t time_tiles = (a.length + kConvTime - 1) / kConvTime;
  if (time_tiles > 2147483647)
    throw Error(ErrorKind::not_implemented, "causal_conv1d: sequence too long for the dense kernels");
  const int64_t row_tiles = a.groups * ((a.dst_per_group + kConvRows - 1) / kConvRows);
  const dim3 grid(unsigned(time_tiles), unsigned(std::min(row_tiles, kMaxGridYZ)),
                  unsigned(std::min(a.batch, kMaxGridYZ)));
  dense_tile_conv<T, TSrc, TDst><<<grid, kConvThreads, 0, stream>>>(a);
  check_launch(what);
}

// ---- weight-gradient partials and their ordered reduction ------------------------------

struct WeightGradArgs {
  const void* g;  // dy' (T, or fp32 after silu)
  const void* x;
  int64_t g_stride[3], x_stride[3];
  int64_t batch, length, width, dilation, groups, in_per_group, out_per_group, c_out;
  int64_t parts, tiles_per_row;  // tiles of kWgTime steps per (batch) row
  bool bias;                     // also make dbias partials
};

constexpr int kWgThreads = 256;
constexpr int kWgTime = 64;  // time steps per staged tile
constexpr int kWgRows = 32;  // output channels per block (4 per thread)
constexpr int kWgCols = 32;  // input channels per block (4 per thread)
constexpr int kWgTaps = 4;   // taps per block (one per 64-thread slot)
constexpr int kWgPad = 4;    // row padding of the [time][channel] tiles (keeps float4 alignment)

struct WeightGradTiles {
  int64_t k_chunks, i_tiles, o_tiles;
  int64_t blocks_per_part() const { return k_chunks * i_tiles * o_tiles; }
};

WeightGradTiles weight_grad_tiles(const DenseGeometry& g) {
  WeightGradTiles t{};
  t.k_chunks = (g.width + kWgTaps - 1) / kWgTaps;
  t.i_tiles = std::max<int64_t>(1, (g.in_per_group() + kWgCols - 1) / kWgCols);  // >= 1: dbias needs a block
  t.o_tiles = (g.out_per_group() + kWgRows - 1) / kWgRows;
  return t;
}

// Elements of one part: dweight (C_out, C_in/groups, K) then dbias (C_out).
int64_t weight_grad_elements(const DenseGeometry& g) {
  return g.c_out * g.in_per_group() * g.width + g.c_out;
}

// P depends only on the shape, so the summation order (and the result) does too.
int64_t weight_grad_parts(const DenseGeometry& g) {
  const int64_t tiles = g.batch * ((g.length + kWgTime - 1) / kWgTime);
  const WeightGradTiles wt = weight_grad_tiles(g);
  const int64_t blocks = std::max<int64_t>(1, g.groups * wt.blocks_per_part());
  const int64_t want = (2048 + blocks - 1) / blocks;  // a few waves of blocks on a large GPU
  const int64_t elements = std::max<int64_t>(1, weight_grad_elements(g));
  const int64_t cap = std::max<int64_t>(1, (int64_t(1) << 26) / elements);  // <= 256 MiB of partials
  return std::max<int64_t>(1, std::min({want, tiles, cap, kMaxGridYZ}));
}

template <typename T, typename G>
__global__ void __launch_bounds__(kWgThreads, 2) dense_weight_grad_partials(WeightGradArgs p, float* partials) {
  __shared__ __align__(16) float g_s[kWgTime][kWgRows + kWgPad];
  __shared__ __align__(16) float x_s[kWgTaps][kWgTime][kWgCols + kWgPad];
  const int tid = threadIdx.x;
  const int64_t n = p.length, K = p.width, S = p.in_per_group, D = p.out_per_group;
  const int64_t k_chunks = (K + kWgTaps - 1) / kWgTaps;
  const int64_t i_tiles = std::max<int64_t>(1, (S + kWgCols - 1) / kWgCols);
  const int64_t o_tiles = (D + kWgRows - 1) / kWgRows;
  int64_t tile = blockIdx.x;
  const int64_t kq = tile % k_chunks;
  tile /= k_chunks;
  const int64_t it = tile % i_tiles;
  tile /= i_tiles;
  const int64_t ot = tile % o_tiles;
  const int64_t grp = tile / o_tiles;
  const int64_t k0 = kq * kWgTaps, i0 = it * kWgCols, o0 = ot * kWgRows;
  // Taps of this block; when fewer than 4, the spare 64-thread slots split the time steps.
  const int kc = int(std::min<int64_t>(K - k0, kWgTaps));
  const int nparts = kWgTaps / kc;
  const int slot = tid / 64, tap = slot % kc, tpart = slot / kc;
  const bool active = tpart < nparts;
  const int om = (tid % 64) / 8, im = tid % 8;  // 4 outputs (om*4..) x 4 inputs (im*4..)
  const bool bias_block = p.bias && it == 0 && kq == 0;

  const int64_t part = blockIdx.y;
  const int64_t total = p.batch * p.tiles_per_row;
  const int64_t q_begin = part * total / p.parts, q_end = (part + 1) * total / p.parts;
  const G* g_base = static_cast<const G*>(p.g) + (grp * D + o0) * p.g_stride[1];
  const T* x_base = static_cast<const T*>(p.x) + (grp * S + i0) * p.x_stride[1];

  float acc[4][4];
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[a][c] = 0.0f;
  float bsum = 0.0f;

  for (int64_t q = q_begin; q < q_end; ++q) {
    const int64_t b = div_nonneg(q, p.tiles_per_row);
    const int64_t t0 = (q - b * p.tiles_per_row) * kWgTime;
    __syncthreads();  // the previous tile is consumed
#pragma unroll
    for (int j = 0; j < kWgTime * kWgRows / kWgThreads; ++j) {
      const int e = tid + j * kWgThreads, o = e / kWgTime, t = e % kWgTime;
      const int64_t time = t0 + t;
      g_s[t][o] = (o0 + o < D && time < n) ? to_float(g_base[b * p.g_stride[0] + o * p.g_stride[1] +
                                                             time * p.g_stride[2]])
                                           : 0.0f;
    }
    for (int kk = 0; kk < kc; ++kk) {
      const int64_t lag = (K - 1 - (k0 + kk)) * p.dilation;
#pragma unroll
      for (int j = 0; j < kWgTime * kWgCols / kWgThreads; ++j) {
        const int e = tid + j * kWgThreads, i = e / kWgTime, t = e % kWgTime;
        const int64_t time = t0 + t - lag;
        x_s[kk][t][i] = (i0 + i < S && time >= 0 && time < n)
                            ? to_float(x_base[b * p.x_stride[0] + i * p.x_stride[1] + time * p.x_stride[2]])
                            : 0.0f;
      }
    }
    __syncthreads();
    if (active) {
      for (int t = tpart; t < kWgTime; t += nparts) {
        const float4 gv = *reinterpret_cast<const float4*>(&g_s[t][om * 4]);
        const float4 xv = *reinterpret_cast<const float4*>(&x_s[tap][t][im * 4]);
        const float ga[4] = {gv.x, gv.y, gv.z, gv.w}, xa[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[a][c] = fmaf(ga[a], xa[c], acc[a][c]);
      }
    }
    if (bias_block) {
      for (int t = tid / kWgRows; t < kWgTime; t += kWgThreads / kWgRows) bsum += g_s[t][tid % kWgRows];
    }
  }

  // Combine the time-split slots in a fixed order, through shared memory.
  __syncthreads();
  float* red = &x_s[0][0][0];  // kWgThreads * 16 floats fit
  if (nparts > 1) {
    if (active && tpart > 0) {
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int c = 0; c < 4; ++c) red[tid * 16 + a * 4 + c] = acc[a][c];
    }
    __syncthreads();
    if (active && tpart == 0) {
      for (int s = 1; s < nparts; ++s) {
        const int partner = tid + s * kc * 64;
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[a][c] += red[partner * 16 + a * 4 + c];
      }
    }
  }
  float* out = partials + part * (p.c_out * S * K + p.c_out);
  if (active && tpart == 0) {
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int64_t o = o0 + om * 4 + a;
      if (o >= D) continue;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int64_t i = i0 + im * 4 + c;
        if (i < S) out[((grp * D + o) * S + i) * K + k0 + tap] = acc[a][c];
      }
    }
  }
  if (bias_block) {
    float* bred = &g_s[0][0];
    bred[tid] = bsum;
    __syncthreads();
    if (tid < kWgRows && o0 + tid < D) {
      float s = 0.0f;
      for (int j = 0; j < kWgThreads / kWgRows; ++j) s += bred[j * kWgRows + tid];
      out[p.c_out * S * K + grp * D + o0 + tid] = s;
    }
  }
}

struct WeightGradReduceArgs {
  void* dweight;  // nullptr: not wanted
  void* dbias;    // nullptr: not wanted
  int64_t dw_stride[3], dbias_stride;
  int64_t c_out, in_per_group, width, parts;
  bool tap_major;  // weight partials in (K, C_out, C_in/g) order (the Hopper kernel's), else (C_out, C_in/g, K)
};

template <typename T>
__global__ void __launch_bounds__(256) dense_weight_grad_reduce(WeightGradReduceArgs r, const float* partials) {
  const int64_t weights = r.c_out * r.in_per_group * r.width, elements = weights + r.c_out;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < elements;
       e += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int64_t q = 0; q < r.parts; ++q) s += partials[q * elements + e];
    if (e < weights) {
      if (!r.dweight) continue;
      int64_t o, i, k;
      if (r.tap_major) {
        k = div_nonneg(e, r.c_out * r.in_per_group);
        const int64_t rem = e - k * r.c_out * r.in_per_group;
        o = div_nonneg(rem, r.in_per_group);
        i = rem - o * r.in_per_group;
      } else {
        o = div_nonneg(e, r.in_per_group * r.width);
        const int64_t rem = e - o * r.in_per_group * r.width;
        i = div_nonneg(rem, r.width);
        k = rem - i * r.width;
      }
      static_cast<T*>(r.dweight)[o * r.dw_stride[0] + i * r.dw_stride[1] + k * r.dw_stride[2]] = from_float<T>(s);
    } else if (r.dbias) {
      static_cast<T*>(r.dbias)[(e - weights) * r.dbias_stride] = from_float<T>(s);
    }
  }
}

// ---- launch sequences -----------------------------------------------------------------

template <typename T>
void forward_typed(const DenseForwardParams& p, cudaStream_t stream) {
  TileConvArgs a{};
  a.src = p.x;
  a.weight = p.weight;
  a.bias = p.bias;
  a.dst = p.y;
  for (int d = 0; d < 3; ++d) {
    a.src_stride[d] = p.x_stride[d];
    a.w_stride[d] = p.w_stride[d];
    a.dst_stride[d] = p.y_stride[d];
  }
  a.bias_stride = p.bias_stride;
  a.batch = p.g.batch;
  a.length = p.g.length;
  a.width = p.g.width;
  a.dilation = p.g.dilation;
  a.groups = p.g.groups;
  a.src_per_group = p.g.in_per_group();
  a.dst_per_group = p.g.out_per_group();
  a.mode = TileMode::forward;
  a.silu = p.g.silu;
  launch_tile_conv<T, T, T>(a, stream, "causal_conv1d forward (dense, generic)");
}

size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

size_t silu_grad_bytes(const DenseBackwardParams& p) {
  return p.g.silu ? align_up(sizeof(float) * size_t(p.g.batch * p.g.c_out * p.g.length)) : 0;
}

bool tc_weight_grads(const DenseBackwardParams& p) {
  return (p.dweight || p.dbias) && p.g.c_out > 0 && dense_tc_weight_grad_supported(p.g);
}

// Parts of the weight-gradient reduction: fixed by the shape (and the kernel it picks).
bool wgmma_weight_grads(const DenseBackwardParams& p) { return dense_wgmma_weight_grad_supported(p); }

int64_t partial_parts(const DenseBackwardParams& p) {
  if (wgmma_weight_grads(p)) return dense_wgmma_weight_grad_parts(p);
  return tc_weight_grads(p) ? dense_tc_weight_grad_parts(p.g) : weight_grad_parts(p.g);
}

size_t partial_bytes(const DenseBackwardParams& p) {
  if (!p.dweight && !p.dbias) return 0;
  return align_up(sizeof(float) * size_t(partial_parts(p) * weight_grad_elements(p.g)));
}

bool wgmma_dx(const DenseBackwardParams& p) { return p.dx && dense_wgmma_dx_supported(p); }
bool tc_dx(const DenseBackwardParams& p) {
  return p.dx && p.g.batch * p.g.length > 0 && dense_tc_dx_supported(p.g);
}

// The silu gradient on tensor cores: the forward's shapes, whenever a gradient is wanted.
bool tc_silu_grad(const DenseBackwardParams& p) {
  return p.g.silu && p.g.batch * p.g.length > 0 && p.g.c_out > 0 && dense_tc_forward_supported(p.g);
}

// One region for the prepared weights of the silu gradient and then of dx (stream order).
// The tensor-core kernels' scratch region, used in stream order by the silu gradient (prepared
// weights), dx (prepared weights, staged gradient) and the weight gradients (staged x, gradient).
size_t tc_weight_bytes(const DenseBackwardParams& p) {
  const size_t dx_bytes =
      wgmma_dx(p) ? dense_wgmma_dx_workspace_bytes(p) : (tc_dx(p) ? dense_tc_dx_workspace_bytes(p.g) : 0);
  const size_t dw_bytes = wgmma_weight_grads(p) ? dense_wgmma_weight_grad_workspace_bytes(p) : 0;
  return std::max({dx_bytes, dw_bytes, tc_silu_grad(p) ? dense_tc_forward_workspace_bytes(p.g) : size_t(0)});
}

// The CUDA-core partials: every shape the tensor-core kernel does not take.
template <typename T, typename G>
void launch_weight_grad_partials(const DenseBackwardParams& p, const G* g, const int64_t (&g_stride)[3],
                                 int64_t parts, float* partials, cudaStream_t stream) {
  const DenseGeometry& geo = p.g;
  WeightGradArgs a{};
  a.g = g;
  a.x = p.x;
  for (int d = 0; d < 3; ++d) {
    a.g_stride[d] = g_stride[d];
    a.x_stride[d] = p.x_stride[d];
  }
  a.batch = geo.batch;
  a.length = geo.length;
  a.width = geo.width;
  a.dilation = geo.dilation;
  a.groups = geo.groups;
  a.in_per_group = geo.in_per_group();
  a.out_per_group = geo.out_per_group();
  a.c_out = geo.c_out;
  a.parts = parts;
  a.tiles_per_row = (geo.length + kWgTime - 1) / kWgTime;
  a.bias = true;  // always: the reduction reads every partial
  const int64_t blocks = geo.groups * weight_grad_tiles(geo).blocks_per_part();
  if (blocks > 2147483647)
    throw Error(ErrorKind::not_implemented, "causal_conv1d backward: weight too large for the dense kernels");
  dense_weight_grad_partials<T, G><<<dim3(unsigned(blocks), unsigned(a.parts)), kWgThreads, 0, stream>>>(a, partials);
  check_launch("causal_conv1d backward (dense weight-gradient partials)");
}

template <typename T, typename G>
void weight_grads_typed(const DenseBackwardParams& p, const G* g, const int64_t (&g_stride)[3], float* partials,
                        void* tc_workspace, cudaStream_t stream) {
  const DenseGeometry& geo = p.g;
  if (geo.c_out == 0) return;
  const int64_t parts = partial_parts(p);
  const bool on_hopper = wgmma_weight_grads(p);
  if (on_hopper)
    launch_dense_wgmma_weight_grad(p, g, std::is_same_v<G, float>, g_stride, partials, tc_workspace,
                                   Stream{stream});
  else if (tc_weight_grads(p))
    launch_dense_tc_weight_grad(p, g, std::is_same_v<G, float>, g_stride, partials, Stream{stream});
  else
    launch_weight_grad_partials<T, G>(p, g, g_stride, parts, partials, stream);

  WeightGradReduceArgs r{};
  r.dweight = p.dweight;
  r.dbias = p.dbias;
  for (int d = 0; d < 3; ++d) r.dw_stride[d] = p.dw_stride[d];
  r.dbias_stride = p.dbias_stride;
  r.c_out = geo.c_out;
  r.in_per_group = geo.in_per_group();
  r.width = geo.width;
  r.parts = parts;
  r.tap_major = on_hopper;
  const int64_t elements = weight_grad_elements(geo);
  const unsigned reduce_blocks = unsigned(std::min<int64_t>((elements + 255) / 256, 65535));
  dense_weight_grad_reduce<T><<<reduce_blocks, 256, 0, stream>>>(r, partials);
  check_launch("causal_conv1d backward (dense weight-gradient reduction)");
}

template <typename T, typename G>
void dx_typed(const DenseBackwardParams& p, const G* g, const int64_t (&g_stride)[3], void* tc_workspace,
              cudaStream_t stream) {
  if (wgmma_dx(p)) {
    launch_dense_wgmma_dx(p, g, std::is_same_v<G, float>, g_stride, tc_workspace, Stream{stream});
    return;
  }
  if (tc_dx(p)) {
    launch_dense_tc_dx(p, g, std::is_same_v<G, float>, g_stride, tc_workspace, Stream{stream});
    return;
  }
  TileConvArgs a{};
  a.src = g;
  a.weight = p.weight;
  a.dst = p.dx;
  for (int d = 0; d < 3; ++d) {
    a.src_stride[d] = g_stride[d];
    a.w_stride[d] = p.w_stride[d];
    a.dst_stride[d] = p.dx_stride[d];
  }
  a.batch = p.g.batch;
  a.length = p.g.length;
  a.width = p.g.width;
  a.dilation = p.g.dilation;
  a.groups = p.g.groups;
  a.src_per_group = p.g.out_per_group();
  a.dst_per_group = p.g.in_per_group();
  a.mode = TileMode::transposed;
  launch_tile_conv<T, G, T>(a, stream, "causal_conv1d backward (dense dx)");
}

template <typename T, typename G>
void backward_from(const DenseBackwardParams& p, const G* g, const int64_t (&g_stride)[3], float* partials,
                   void* tc_workspace, cudaStream_t stream) {
  if (p.dx) dx_typed<T, G>(p, g, g_stride, tc_workspace, stream);
  if (p.dweight || p.dbias) weight_grads_typed<T, G>(p, g, g_stride, partials, tc_workspace, stream);
}

// Workspace: [fp32 gradient through silu][weight-gradient partials][tensor-core weights].
template <typename T>
void backward_typed(const DenseBackwardParams& p, char* workspace, cudaStream_t stream) {
  float* partials = (p.dweight || p.dbias) ? reinterpret_cast<float*>(workspace + silu_grad_bytes(p)) : nullptr;
  void* tc_workspace = tc_weight_bytes(p) > 0 ? workspace + silu_grad_bytes(p) + partial_bytes(p) : nullptr;
  if (!p.g.silu) {
    backward_from<T, T>(p, static_cast<const T*>(p.dy), p.dy_stride, partials, tc_workspace, stream);
    return;
  }
  // g = dy * silu'(pre), pre recomputed by the forward tile kernel, fp32 (B, C_out, L).
  float* g = reinterpret_cast<float*>(workspace);
  const int64_t g_stride[3] = {p.g.c_out * p.g.length, p.g.length, 1};
  if (tc_silu_grad(p)) {
    launch_dense_tc_silu_grad(p, g, g_stride, tc_workspace, Stream{stream});
    backward_from<T, float>(p, g, g_stride, partials, tc_workspace, stream);
    return;
  }
  TileConvArgs a{};
  a.src = p.x;
  a.weight = p.weight;
  a.bias = p.bias;
  a.dy = p.dy;
  a.dst = g;
  for (int d = 0; d < 3; ++d) {
    a.src_stride[d] = p.x_stride[d];
    a.w_stride[d] = p.w_stride[d];
    a.dy_stride[d] = p.dy_stride[d];
    a.dst_stride[d] = g_stride[d];
  }
  a.bias_stride = p.bias_stride;
  a.batch = p.g.batch;
  a.length = p.g.length;
  a.width = p.g.width;
  a.dilation = p.g.dilation;
  a.groups = p.g.groups;
  a.src_per_group = p.g.in_per_group();
  a.dst_per_group = p.g.out_per_group();
  a.mode = TileMode::silu_grad;
  launch_tile_conv<T, T, float>(a, stream, "causal_conv1d backward (dense silu gradient)");
  backward_from<T, float>(p, g, g_stride, partials, tc_workspace, stream);
}

}  // namespace

void launch_dense_forward_generic(const DenseForwardParams& p, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  switch (p.g.dtype) {
    case DType::f32: forward_typed<float>(p, s); break;
    case DType::f16: forward_typed<__half>(p, s); break;
    case DType::bf16: forward_typed<__nv_bfloat16>(p, s); break;
    case DType::f64: break;  // rejected by validation
  }
}

size_t dense_backward_workspace_bytes(const DenseBackwardParams& p) {
  if (!p.dx && !p.dweight && !p.dbias) return 0;
  return silu_grad_bytes(p) + partial_bytes(p) + tc_weight_bytes(p);
}

void launch_dense_backward(const DenseBackwardParams& p, void* workspace, Stream stream) {
  if (!p.dx && !p.dweight && !p.dbias) return;
  auto s = static_cast<cudaStream_t>(stream.handle);
  auto* ws = static_cast<char*>(workspace);
  switch (p.g.dtype) {
    case DType::f32: backward_typed<float>(p, ws, s); break;
    case DType::f16: backward_typed<__half>(p, ws, s); break;
    case DType::bf16: backward_typed<__nv_bfloat16>(p, ws, s); break;
    case DType::f64: break;  // rejected by validation
  }
}

}  // namespace causalconv::detail
