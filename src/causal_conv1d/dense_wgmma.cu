// Dense/grouped causal conv on Hopper (sm_90a): TMA + wgmma, warp-specialised. Two kernels:
// the convolution (forward, and dx as the transposed convolution) and the weight gradients.
//
// The kernels and their design: dense_wgmma_kernels.cuh. Here: the pre-passes (prepared weights,
// channel-last staging), the tensor maps (common/tensor_map.h encodes them) and the launchers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "causal_conv1d/dense_kernels.h"
#include "causal_conv1d/dense_wgmma_kernels.cuh"
#include "causalconv/error.h"
#include "common/cuda_math.cuh"
#include "common/cuda_runtime.h"
#include "common/sm90_primitives.cuh"
#include "common/tensor_map.h"

namespace causalconv::detail {
namespace {

constexpr int64_t kMaxCoordinate = int64_t(1) << 30;  // TMA coordinates are int32

// ---- pre-passes ----------------------------------------------------------------------

// W'[copy][g][k][r < r_pad][c < c_pad]: row r = destination channel, column c = source channel of
// group g, zero outside dst_g x src_g. Forward: W[g*D + r, c, k]; transposed (dx): W[g*D + c, r, K-1-k].
// fp32: copy 0 = bf16 hi, copy 1 = bf16 lo.
template <typename T>
__global__ void __launch_bounds__(256)
    prepare_wgmma_weights(const T* w, int64_t ws0, int64_t ws1, int64_t ws2, int64_t dst_g, int64_t src_g,
                          int64_t width, bool transposed, int64_t r_pad, int64_t c_pad, int64_t per_copy,
                          uint16_t* out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < per_copy; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % c_pad;
    int64_t rest = i / c_pad;
    const int64_t r = rest % r_pad;
    rest /= r_pad;
    const int64_t k = rest % width, g = rest / width;
    const bool live = r < dst_g && c < src_g;
    const int64_t at = transposed ? (g * src_g + c) * ws0 + r * ws1 + (width - 1 - k) * ws2
                                  : (g * dst_g + r) * ws0 + c * ws1 + k * ws2;
    if constexpr (std::is_same_v<T, float>) {
      const float v = live ? w[at] : 0.0f;
      const __nv_bfloat16 hi = __float2bfloat16_rn(v);
      out[i] = __bfloat16_as_ushort(hi);
      out[per_copy + i] = __bfloat16_as_ushort(__float2bfloat16_rn(v - __bfloat162float(hi)));
    } else {
      out[i] = live ? reinterpret_cast<const uint16_t*>(w)[at] : uint16_t(0);
    }
  }
}

// The 16-bit operand value(s) of a source value for dtype T: the stored bits; an fp32 gradient
// rounded to T; or, for fp32 (T = float), the bf16 hi and lo halves.
template <typename TS, typename T>
__device__ __forceinline__ void operand_bits(TS v, uint16_t& hi, uint16_t& lo) {
  lo = 0;
  if constexpr (std::is_same_v<T, float>) {
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    hi = __bfloat16_as_ushort(h);
    lo = __bfloat16_as_ushort(__float2bfloat16_rn(v - __bfloat162float(h)));
  } else if constexpr (std::is_same_v<TS, T>) {
    hi = reinterpret_cast<const uint16_t&>(v);
  } else {
    const T r = from_float<T>(v);
    hi = reinterpret_cast<const uint16_t&>(r);
  }
}

constexpr int kStageChannels = 64, kStageSteps = 64, kStageThreads = 256;

// Shared-memory column of step t in staged channel row `row`: 16-byte chunks XOR-swizzled by the
// row's group of 8, so that both the row-wise stores and the 8-rows-apart reads are conflict-free.
__device__ __forceinline__ int stage_column(int row, int t) { return (((t >> 3) ^ (row >> 3)) & 7) << 3 | (t & 7); }

struct StageArgs {
  const void* x;
  int64_t xs0, xs1, xs2;
  int32_t groups, in_g, s8, length;
  int64_t copy_elems;
  bool vector_rows;  // unit time stride and 16-byte aligned rows: 16-byte loads
  uint16_t* out;
};

// The source (x, or dy / the fp32 silu gradient for dx), (B, C, L), any strides ->
// out[copy * B + b][t][g][s < s8] (zero for s >= S): a channel-last copy whose group rows start on
// 16 bytes, in T's operand bits (fp32: bf16 hi in copy 0, lo in copy 1). A block
// transposes 64 (padded) channels x 64 steps through shared memory: 16-byte loads along time
// (a warp covers whole 128-byte row pieces), then 8 lanes gather the 64 channels of one step
// and write them as 128 contiguous bytes.
template <typename TS, typename T>
__global__ void __launch_bounds__(kStageThreads) copy_to_channel_last(StageArgs a) {
  constexpr bool kSplit = std::is_same_v<T, float>;
  constexpr int kVec = 16 / sizeof(TS);  // source elements per 16-byte load
  __shared__ alignas(16) uint16_t hi_s[kStageChannels][kStageSteps];
  __shared__ alignas(16) uint16_t lo_s[kSplit ? kStageChannels : 1][kStageSteps];
  const int32_t t0 = int32_t(blockIdx.x) * kStageSteps, ch0 = int32_t(blockIdx.y) * kStageChannels;
  const int64_t b = blockIdx.z;
  const int32_t row_elems = a.groups * a.s8;
  const TS* x = static_cast<const TS*>(a.x) + b * a.xs0;

  constexpr int kLoads = kStageChannels * kStageSteps / kVec / kStageThreads;
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    const int v = threadIdx.x + i * kStageThreads;
    const int cl = v / (kStageSteps / kVec), tl = v % (kStageSteps / kVec) * kVec;
    const int32_t ch = ch0 + cl, g = ch / a.s8, s = ch - g * a.s8, t = t0 + tl;
    const bool live = s < a.in_g && g < a.groups;
    const TS* row = x + (int64_t(g) * a.in_g + s) * a.xs1;
    alignas(16) TS vals[kVec];
    if (live && a.vector_rows && t + kVec <= a.length) {
      *reinterpret_cast<uint4*>(vals) = *reinterpret_cast<const uint4*>(row + t);
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) vals[e] = live && t + e < a.length ? row[int64_t(t + e) * a.xs2] : TS(0.0f);
    }
    alignas(16) uint16_t hv[kVec], lv[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) operand_bits<TS, T>(vals[e], hv[e], lv[e]);
    // One vector store per row piece (its 8 or 4 steps share a swizzled chunk).
    using Piece = std::conditional_t<kVec == 4, uint2, uint4>;
    const int col = stage_column(cl, tl);
    *reinterpret_cast<Piece*>(&hi_s[cl][col]) = *reinterpret_cast<const Piece*>(hv);
    if constexpr (kSplit) *reinterpret_cast<Piece*>(&lo_s[cl][col]) = *reinterpret_cast<const Piece*>(lv);
  }
  __syncthreads();

  constexpr int kStores = kStageSteps * (kStageChannels / 8) / kStageThreads;
#pragma unroll
  for (int i = 0; i < kStores; ++i) {
    const int v = threadIdx.x + i * kStageThreads;
    const int cg = v % 8 * 8, tl = v / 8;  // 8 lanes: the 64 channels of one step
    const int32_t t = t0 + tl, ch = ch0 + cg;
    if (t >= a.length || ch >= row_elems) continue;
    alignas(16) uint16_t hv[8], lv[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int col = stage_column(cg + e, tl);
      hv[e] = hi_s[cg + e][col];
      if constexpr (kSplit) lv[e] = lo_s[cg + e][col];
    }
    const int64_t at = (b * a.length + t) * row_elems + ch;
    *reinterpret_cast<uint4*>(a.out + at) = *reinterpret_cast<const uint4*>(hv);
    if constexpr (kSplit) *reinterpret_cast<uint4*>(a.out + a.copy_elems + at) = *reinterpret_cast<const uint4*>(lv);
  }
}

// Launches copy_to_channel_last for a (B, C, L) source of TS values (T's, or an fp32 gradient).
template <typename T>
void launch_copy_to_channel_last(const void* src, bool src_fp32, const int64_t (&ss)[3], int64_t groups,
                               int64_t per_group, int64_t s8, int64_t length, int64_t batch, int64_t copy_elems,
                               uint16_t* out, cudaStream_t stream, const char* what) {
  StageArgs a{src,           ss[0],         ss[1],           ss[2],      int32_t(groups), int32_t(per_group),
              int32_t(s8),   int32_t(length), copy_elems,    false,      out};
  const int64_t vec = std::is_same_v<T, float> || src_fp32 ? 4 : 8;  // source elements per 16 bytes
  a.vector_rows =
      ss[2] == 1 && reinterpret_cast<uintptr_t>(src) % 16 == 0 && ss[1] % vec == 0 && ss[0] % vec == 0;
  const dim3 grid(unsigned((length + kStageSteps - 1) / kStageSteps),
                  unsigned((groups * s8 + kStageChannels - 1) / kStageChannels), unsigned(batch));
  if (src_fp32 && !std::is_same_v<T, float>)
    copy_to_channel_last<float, T><<<grid, kStageThreads, 0, stream>>>(a);
  else
    copy_to_channel_last<T, T><<<grid, kStageThreads, 0, stream>>>(a);
  check_launch(what);
}


// The gradient (B, C, L), any strides -> out[b][c][t < pitch] in T (16-bit, or fp32 as it is;
// zero for t >= length): rows TMA can read with time innermost. A thread stages 8 steps of one
// row, 16-byte stores (pitch is a multiple of 8), from 16-byte loads where the source row allows:
// element-wise 2-byte stores ran at about half of copy speed on the H200 (session 7).
template <typename TS, typename T>
__global__ void __launch_bounds__(256)
    stage_rows(const TS* src, int64_t ss0, int64_t ss1, int64_t ss2, int64_t channels, int64_t length, int64_t pitch,
               int64_t rows, void* out) {
  static_assert(!std::is_same_v<T, float> || std::is_same_v<TS, float>, "fp32 rows from fp32 ones");
  constexpr int kVec = 16 / sizeof(TS);  // source elements per 16-byte load
  const int64_t octs = pitch / 8, count = rows * octs;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i % octs * 8, row = i / octs;
    const int64_t ch = row % channels, b = row / channels;
    const TS* from = src + b * ss0 + ch * ss1 + t * ss2;
    alignas(16) TS v[8];
    if (ss2 == 1 && t + 8 <= length && reinterpret_cast<uintptr_t>(from) % 16 == 0) {
#pragma unroll
      for (int e = 0; e < 8; e += kVec) *reinterpret_cast<uint4*>(v + e) = *reinterpret_cast<const uint4*>(from + e);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = t + e < length ? from[e * ss2] : TS(0.0f);
    }
    if constexpr (std::is_same_v<T, float>) {
      auto* to = reinterpret_cast<uint4*>(static_cast<float*>(out) + row * pitch + t);
      to[0] = *reinterpret_cast<const uint4*>(v);
      to[1] = *reinterpret_cast<const uint4*>(v + 4);
    } else {
      alignas(16) uint16_t hi[8], lo[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) operand_bits<TS, T>(v[e], hi[e], lo[e]);
      *reinterpret_cast<uint4*>(static_cast<uint16_t*>(out) + row * pitch + t) = *reinterpret_cast<const uint4*>(hi);
    }
  }
}

// ---- host side -----------------------------------------------------------------------

// One convolution for the kernel: forward, or transposed for dx.
//   dst[b, g*DG + r, t] = act(bias + sum_{c < SG, k < K} W'[g][k][r][c] * src[b, g*SG + c, t + shift_base + k*d])
// forward:    src = x (SG = C_in/g), dst = y (DG = C_out/g), shift_base = -(K-1)d
// transposed: src = dy or the fp32 gradient through silu (SG = C_out/g), dst = dx (DG = C_in/g),
//             W' flipped and transposed, shift_base = 0 (a look-ahead window)
struct WgJob {
  const void* src;
  bool src_fp32;  // an fp32 gradient for a 16-bit dtype: rounded to it while staging
  int64_t src_stride[3];
  const void* weight;
  int64_t w_stride[3];
  bool transposed;
  const void* bias;  // forward only; nullptr: none
  int64_t bias_stride;
  void* dst;
  int64_t dst_stride[3];
  int64_t batch, length, dilation, groups, width, src_g, dst_g;
  DType dtype;
  bool silu;
  void* workspace;
  uint16_t* keep_x;  // forward: also write x's channel-last copy here (dense_wgmma_saved_x_bytes); or nullptr
};

// The fields a job takes from the geometry alone.
WgJob geometry_job(const DenseGeometry& g) {
  WgJob j{};
  j.batch = g.batch;
  j.length = g.length;
  j.dilation = g.dilation;
  j.groups = g.groups;
  j.width = g.width;
  j.dtype = g.dtype;
  return j;
}

WgJob forward_job(const DenseForwardParams& f) {
  const DenseGeometry& g = f.g;
  WgJob j = geometry_job(g);
  j.src = f.x;
  j.weight = f.weight;
  j.bias = f.bias;
  j.bias_stride = f.bias_stride;
  j.dst = f.y;
  for (int d = 0; d < 3; ++d) {
    j.src_stride[d] = f.x_stride[d];
    j.w_stride[d] = f.w_stride[d];
    j.dst_stride[d] = f.y_stride[d];
  }
  j.src_g = g.in_per_group();
  j.dst_g = g.out_per_group();
  j.silu = g.silu;
  j.workspace = f.workspace;
  j.keep_x = static_cast<uint16_t*>(f.saved_x);
  return j;
}

WgJob dx_job(const DenseBackwardParams& b, const void* grad, bool grad_fp32, const int64_t (&grad_stride)[3],
             void* workspace) {
  const DenseGeometry& g = b.g;
  WgJob j = geometry_job(g);
  j.src = grad;
  j.src_fp32 = grad_fp32 && g.dtype != DType::f32;
  j.weight = b.weight;
  j.transposed = true;
  j.dst = b.dx;
  for (int d = 0; d < 3; ++d) {
    j.src_stride[d] = grad_stride[d];
    j.w_stride[d] = b.w_stride[d];
    j.dst_stride[d] = b.dx_stride[d];
  }
  j.src_g = g.out_per_group();
  j.dst_g = g.in_per_group();
  j.workspace = workspace;
  return j;
}

// A 16-bit channel-last source that TMA can read in place: unit channel stride, 16-byte aligned
// base, time and batch strides, and group rows starting on 16 bytes.
bool src_read_in_place(const WgJob& j) {
  return j.dtype != DType::f32 && !j.src_fp32 && j.src_stride[1] == 1 &&
         reinterpret_cast<uintptr_t>(j.src) % 16 == 0 && j.src_stride[2] > 0 && j.src_stride[2] % 8 == 0 &&
         j.src_stride[0] >= 0 && j.src_stride[0] % 8 == 0 && (j.groups == 1 || j.src_g % 8 == 0);
}

// fp32 source rows through dense_wgmma_conv_rows<T, float> (the window builders load them
// themselves) against the staging pre-pass, measured on the H200 (session 5, docs/performance.md):
// the builders' loads are a fixed cost per 64-channel chunk that the chunk's MMAs hide only when
// it has enough taps. fp32 seed (K = 4): 0.858 -> 0.822 ms; B8 C512 L4096 K = 3: 0.302 -> 0.374 ms.
// So fp32 takes rows from K = 4 up. A 16-bit dx under silu (the builders round the fp32 gradient)
// keeps the pre-pass: one product per step leaves a third of the MMAs to hide the same loads.
bool fp32_rows_pay_off(const WgJob& j) { return j.dtype == DType::f32 && !j.src_fp32 && j.width >= 4; }

// A channel-first source whose rows the convolution kernel can copy and transpose itself
// (dense_wgmma_conv_rows): unit time stride, 16-byte aligned base and row strides, and every
// tap inside the kernel's window of steps.
bool src_rows_in_place(const WgJob& j) {
  const bool fp32_rows = j.dtype == DType::f32 || j.src_fp32;
  const int64_t vec = fp32_rows ? 4 : 8;  // elements per 16 bytes
  if (fp32_rows && !fp32_rows_pay_off(j)) return false;
  if (j.src_stride[2] != 1 || reinterpret_cast<uintptr_t>(j.src) % 16 != 0 || j.src_stride[1] <= 0 ||
      j.src_stride[1] % vec != 0 || j.src_stride[0] < 0 || j.src_stride[0] % vec != 0)
    return false;
  const int64_t shift_base = j.transposed ? 0 : -(j.width - 1) * j.dilation;
  const int64_t off0 = ((shift_base % 8) + 8) % 8;  // shift_base minus shift_base rounded down to 8
  return off0 + (j.width - 1) * j.dilation + kBN <= kWinSteps;
}

struct WgLayout {
  int64_t r_pad, c_pad, c_chunks, weight_elems;  // prepared weights; weight_elems per copy
  int64_t s8, src_copy_elems;                    // staged source: group rows of s8 values (0: read in place)
  size_t weight_bytes, bytes;
};

constexpr size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// Group rows of a channel-last staged copy: `per_group` channels padded to a multiple of 8, so that
// every group row starts on 16 bytes.
constexpr int64_t staged_row(int64_t per_group) { return (per_group + 7) / 8 * 8; }

WgLayout wg_layout(const WgJob& j) {
  WgLayout l{};
  const int copies = j.dtype == DType::f32 ? 2 : 1;
  l.r_pad = (j.dst_g + kBM - 1) / kBM * kBM;
  l.c_chunks = (j.src_g + kBK - 1) / kBK;
  l.c_pad = l.c_chunks * kBK;
  l.weight_elems = j.groups * j.width * l.r_pad * l.c_pad;
  l.weight_bytes = align_up(size_t(l.weight_elems) * 2 * copies, 256);
  if (!src_read_in_place(j) && !src_rows_in_place(j)) {
    l.s8 = staged_row(j.src_g);
    l.src_copy_elems = j.batch * j.length * j.groups * l.s8;
  }
  // A forward that keeps x stages it there, not in the workspace.
  l.bytes = l.weight_bytes + (j.keep_x ? 0 : size_t(l.src_copy_elems) * 2 * copies);
  return l;
}

// A map over a channel-last staged copy, out[copy * B + b][t][g][s < s8] (copy_to_channel_last's
// layout; `batches` = B x copies), as 4-D (s8, G, L, batches) in boxes of 64 channels x `steps`
// steps of one group: a box never crosses into the next group.
CUtensorMap staged_x_map(const void* base, DType mma_dtype, int64_t per_group, int64_t groups, int64_t length,
                         int64_t batches, uint32_t steps, const char* what) {
  const uint64_t s8 = uint64_t(staged_row(per_group));
  const uint64_t dims[4] = {s8, uint64_t(groups), uint64_t(length), uint64_t(batches)};
  const uint64_t strides[3] = {s8 * 2, uint64_t(groups) * s8 * 2, uint64_t(length * groups) * s8 * 2};
  const uint32_t box[4] = {kBK, 1, steps, 1};
  return encode_tensor_map(base, mma_dtype, 4, dims, strides, box, what);
}

template <typename T>
void launch_wgmma(const WgJob& j, cudaStream_t stream, const char* what) {
  using Tr = WgTraits<T>;
  const WgLayout l = wg_layout(j);
  auto* weights = static_cast<uint16_t*>(j.workspace);
  const unsigned prep_blocks = unsigned(std::min<int64_t>((l.weight_elems + 255) / 256, 4096));
  prepare_wgmma_weights<T><<<prep_blocks, 256, 0, stream>>>(static_cast<const T*>(j.weight), j.w_stride[0],
                                                              j.w_stride[1], j.w_stride[2], j.dst_g, j.src_g, j.width,
                                                              j.transposed, l.r_pad, l.c_pad, l.weight_elems, weights);
  check_launch(what);
  const DType mma_dtype = Tr::kSplit ? DType::bf16 : j.dtype;
  const uint64_t w_dims[2] = {uint64_t(l.c_pad), uint64_t(l.weight_elems / l.c_pad * Tr::kCopies)};
  const uint64_t w_strides[1] = {uint64_t(l.c_pad) * 2};
  const uint32_t w_box[2] = {kBK, kBM};
  const CUtensorMap w_map = encode_tensor_map(weights, mma_dtype, 2, w_dims, w_strides, w_box, what);

  WgParams p{};
  p.y = j.dst;
  p.bias = j.bias;
  for (int d = 0; d < 3; ++d) p.y_stride[d] = j.dst_stride[d];
  p.bias_stride = j.bias_stride;
  p.batch = int32_t(j.batch);
  p.groups = int32_t(j.groups);
  p.out_g = int32_t(j.dst_g);
  p.length = int32_t(j.length);
  p.width = int32_t(j.width);
  p.dilation = int32_t(j.dilation);
  p.c_chunks = int32_t(l.c_chunks);
  p.o_tiles = int32_t(l.r_pad / kBM);
  p.t_tiles = int32_t((j.length + kBN - 1) / kBN);
  p.o_pad = int32_t(l.r_pad);
  p.w_lo_rows = int32_t(l.weight_elems / l.c_pad);
  p.shift_base = j.transposed ? 0 : -int32_t((j.width - 1) * j.dilation);
  p.silu = j.silu;
  p.tiles = int64_t(p.o_tiles) * p.t_tiles * j.batch * j.groups;

  const unsigned grid = unsigned(std::min<int64_t>(p.tiles, current_device_sm_count(what)));

  if (!src_read_in_place(j) && src_rows_in_place(j)) {
    // 16-bit: the source's own rows as a 4-D map (L, SG, G, B) for TMA (a box never crosses into
    // the next group); fp32 rows: the kernel loads them itself (the weight map stands in).
    CUtensorMap rows_map = w_map;
    const bool fp32_rows = Tr::kSplit || j.src_fp32;
    if (!fp32_rows) {
      const uint64_t dims[4] = {uint64_t(j.length), uint64_t(j.src_g), uint64_t(j.groups), uint64_t(j.batch)};
      const uint64_t strides[3] = {uint64_t(j.src_stride[1]) * 2, uint64_t(j.src_g * j.src_stride[1]) * 2,
                                   uint64_t(j.src_stride[0]) * 2};
      const uint32_t box[4] = {64, kBK, 1, 1};
      rows_map = encode_tensor_map(j.src, j.dtype, 4, dims, strides, box, what);
    }
    p.src = j.src;
    for (int d = 0; d < 3; ++d) p.src_stride[d] = j.src_stride[d];
    p.in_g = int32_t(j.src_g);
    CUtensorMap keep_map = w_map;  // stands in unless the forward keeps x
    if (j.keep_x) {
      keep_map = staged_x_map(j.keep_x, mma_dtype, j.src_g, j.groups, j.length, j.batch * Tr::kCopies, kBN, what);
      p.keep_x = 1;
    }
    auto launch = [&](auto kernel, size_t smem) {
      allow_dynamic_shared_memory(kernel, smem, what);
      kernel<<<grid, kThreads, smem, stream>>>(w_map, rows_map, keep_map, p);
      check_launch(what);
    };
    if (fp32_rows)
      launch(dense_wgmma_conv_rows<T, float>, RowTraits<T, float>::kSmemBytes);
    else
      launch(dense_wgmma_conv_rows<T, T>, RowTraits<T, T>::kSmemBytes);
    return;
  }

  // The source as a 4-D map (SG, G, L, B) of channel-last rows: a box never crosses into the next group.
  CUtensorMap src_map;
  if (l.src_copy_elems == 0) {
    const uint64_t dims[4] = {uint64_t(j.src_g), uint64_t(j.groups), uint64_t(j.length), uint64_t(j.batch)};
    const uint64_t strides[3] = {uint64_t(j.groups > 1 ? j.src_g : j.src_stride[2]) * 2,  // one group: any aligned value
                                 uint64_t(j.src_stride[2]) * 2, uint64_t(j.src_stride[0]) * 2};
    const uint32_t box[4] = {kBK, 1, kBN, 1};
    src_map = encode_tensor_map(j.src, mma_dtype, 4, dims, strides, box, what);
  } else {
    // Staged into the kept copy when the forward keeps x: the pre-pass writes the layout the
    // weight gradient reads.
    auto* staged = j.keep_x ? j.keep_x : reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(j.workspace) + l.weight_bytes);
    launch_copy_to_channel_last<T>(j.src, j.src_fp32, j.src_stride, j.groups, j.src_g, l.s8, j.length, j.batch,
                                 l.src_copy_elems, staged, stream, what);
    // fp32: the lo copies follow the hi copies
    src_map = staged_x_map(staged, mma_dtype, j.src_g, j.groups, j.length, j.batch * Tr::kCopies, kBN, what);
  }
  allow_dynamic_shared_memory(dense_wgmma_conv<T>, Tr::kSmemBytes, what);
  dense_wgmma_conv<T><<<grid, kThreads, Tr::kSmemBytes, stream>>>(w_map, src_map, p);
  check_launch(what);
}

void launch_job(const WgJob& j, Stream stream, const char* what) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  switch (j.dtype) {
    case DType::f32: launch_wgmma<float>(j, s, what); break;
    case DType::f16: launch_wgmma<__half>(j, s, what); break;
    case DType::bf16: launch_wgmma<__nv_bfloat16>(j, s, what); break;
    case DType::f64: break;  // rejected by validation
  }
}

bool job_supported(const WgJob& j, bool hopper) {
  if (!hopper || j.src_g < 32 || j.dst_g < 32 || j.batch * j.length == 0) return false;  // few channels: dense_tc.cu
  if (j.length >= kMaxCoordinate || (j.width - 1) * j.dilation >= kMaxCoordinate) return false;
  const WgLayout l = wg_layout(j);
  if (l.weight_elems / l.c_pad * 2 >= kMaxCoordinate || 2 * j.batch >= kMaxCoordinate) return false;
  // the staging grid and its 32-bit channel index
  return !(l.src_copy_elems && (j.batch > 65535 || j.groups * l.s8 + kStageChannels >= kMaxCoordinate));
}

// ---- weight gradients: host side ----

// The gradient rows TMA can read in place as the weight gradient's A: in the dtype's own type
// (an fp32 gradient of a 16-bit dtype is rounded while staged), time innermost, 16-byte aligned
// base and row strides.
bool grad_rows_in_place(DType dtype, const void* grad, bool grad_fp32, const int64_t (&gs)[3]) {
  const bool fp32 = dtype == DType::f32;
  if (grad_fp32 && !fp32) return false;
  const int64_t per_16_bytes = fp32 ? 4 : 8;
  return gs[2] == 1 && reinterpret_cast<uintptr_t>(grad) % 16 == 0 && gs[1] > 0 && gs[1] % per_16_bytes == 0 &&
         gs[0] >= 0 && gs[0] % per_16_bytes == 0;
}

// The weight gradient's CTAs over 256 sources of one tap (m64n256k16) instead of 64 sources of
// four taps (m64n64k16), where the group has more than 192 sources: 37.5 % fewer shared-memory
// operand bytes per FLOP (dense_wgmma_kernels.cuh). H200, seed case fwd+bwd as CUDA graphs
// (session 16, side by side): fp32 3.089 -> 2.975 ms, bf16 1.175 -> 1.148 (within that call's
// spread), against a predicted 1.16 -> 1.07: shared-memory operand reads were not the bound.
bool weight_grad_source_wide(int64_t sources) { return sources > 3 * kBK; }

struct WgDwLayout {
  bool source_wide;
  int64_t o_tiles, c_chunks, k_chunks, t_units, units, parts, part_elems;
  int64_t s8, x_copy_elems;       // channel-last x: the forward's kept copy, or staged here
  int64_t g_pitch, g_copy_elems;  // staged gradient rows (0: read in place)
  size_t x_bytes, bytes;          // staging bytes (the partials live elsewhere); x_bytes 0 when kept
};

// The bytes of x's channel-last copy (bf16 hi and lo for fp32) that the weight gradient reads.
size_t channel_last_x_bytes(const DenseGeometry& g) {
  const int copies = g.dtype == DType::f32 ? 2 : 1;
  return align_up(size_t(g.batch * g.length * g.groups * staged_row(g.in_per_group())) * 2 * copies, 256);
}

WgDwLayout wg_dw_layout(const DenseBackwardParams& b, bool grad_in_place) {
  const DenseGeometry& g = b.g;
  const int64_t S = g.in_per_group(), D = g.out_per_group();
  WgDwLayout l{};
  l.source_wide = weight_grad_source_wide(S);
  l.o_tiles = (D + kBM - 1) / kBM;
  l.c_chunks = dw_source_groups(S, l.source_wide);
  l.k_chunks = dw_tap_groups(g.width, l.source_wide);
  l.t_units = (g.length + kDwSteps - 1) / kDwSteps;
  l.units = g.batch * l.t_units;
  l.part_elems = g.c_out * S * g.width + g.c_out;
  const int64_t ctas = g.groups * l.o_tiles * l.c_chunks * l.k_chunks;
  const int64_t cap = std::max<int64_t>(1, (int64_t(1) << 26) / l.part_elems);  // <= 256 MiB of partials
  l.parts = std::max<int64_t>(1, std::min({(kDwTargetCtas + ctas - 1) / ctas, l.units, cap, int64_t(65535)}));
  l.s8 = staged_row(S);
  l.x_copy_elems = g.batch * g.length * g.groups * l.s8;
  l.x_bytes = b.saved_x ? 0 : channel_last_x_bytes(g);
  if (!grad_in_place) {
    l.g_pitch = (g.length + 7) / 8 * 8;
    l.g_copy_elems = g.batch * g.c_out * l.g_pitch;
  }
  l.bytes = l.x_bytes + size_t(l.g_copy_elems) * (g.dtype == DType::f32 ? 4 : 2);
  return l;
}

// What the backward passes as the gradient: dy, or the fp32 gradient through silu (contiguous).
bool backward_grad_in_place(const DenseBackwardParams& b) {
  return !b.g.silu && grad_rows_in_place(b.g.dtype, b.dy, false, b.dy_stride);
}

// The gradient rows as (L, D, G, B) with time innermost, in T (16-bit, or fp32), for TMA: where
// they lie, or staged by stage_rows (other strides, or an fp32 gradient through silu rounded to a
// 16-bit T). Boxes of 128 rows x 128 bytes: 64 16-bit steps, or 32 fp32 ones (two per unit).
template <typename T>
CUtensorMap grad_rows_map(const DenseBackwardParams& b, const void* grad, bool grad_fp32, const int64_t (&gs)[3],
                          bool in_place, const WgDwLayout& l, void* workspace, cudaStream_t stream,
                          const char* what) {
  constexpr uint64_t kBytes = sizeof(T);
  const DenseGeometry& g = b.g;
  const int64_t D = g.out_per_group();
  const void* g_base = grad;
  uint64_t g_dims[4] = {uint64_t(g.length), uint64_t(D), uint64_t(g.groups), uint64_t(g.batch)};
  uint64_t g_strides[3] = {uint64_t(gs[1]) * kBytes, uint64_t(D * gs[1]) * kBytes, uint64_t(gs[0]) * kBytes};
  if (!in_place) {
    void* g_staged = reinterpret_cast<uint8_t*>(workspace) + l.x_bytes;
    const int64_t rows = g.batch * g.c_out, octs = rows * (l.g_pitch / 8);
    const unsigned blocks = unsigned(std::min<int64_t>((octs + 255) / 256, 132 * 32));
    if (grad_fp32)
      stage_rows<float, T><<<blocks, 256, 0, stream>>>(static_cast<const float*>(grad), gs[0], gs[1], gs[2], g.c_out,
                                                       g.length, l.g_pitch, rows, g_staged);
    else
      stage_rows<T, T><<<blocks, 256, 0, stream>>>(static_cast<const T*>(grad), gs[0], gs[1], gs[2], g.c_out,
                                                   g.length, l.g_pitch, rows, g_staged);
    check_launch(what);
    g_base = g_staged;
    g_strides[0] = uint64_t(l.g_pitch) * kBytes;
    g_strides[1] = uint64_t(D * l.g_pitch) * kBytes;
    g_strides[2] = uint64_t(g.c_out * l.g_pitch) * kBytes;
  }
  const uint32_t g_box[4] = {uint32_t(128 / kBytes), kBM, 1, 1};
  return encode_tensor_map(g_base, g.dtype, 4, g_dims, g_strides, g_box, what);
}

template <typename T>
void launch_wgmma_weight_grad(const DenseBackwardParams& b, const void* grad, bool grad_fp32,
                              const int64_t (&gs)[3], float* partials, void* workspace, cudaStream_t stream,
                              const char* what) {
  using Tr = DwTraits<T>;
  const DenseGeometry& g = b.g;
  const int64_t S = g.in_per_group(), D = g.out_per_group();
  const bool in_place = grad_rows_in_place(g.dtype, grad, grad_fp32, gs);
  const WgDwLayout l = wg_dw_layout(b, in_place);
  const DType mma_dtype = Tr::kSplit ? DType::bf16 : g.dtype;

  // x channel-last, in boxes of a tap's 64 rows of 64 channels: the copy the forward kept, or
  // staged here as the forward stages it.
  const void* x_base = b.saved_x;
  if (!x_base) {
    launch_copy_to_channel_last<T>(b.x, false, b.x_stride, g.groups, S, l.s8, g.length, g.batch, l.x_copy_elems,
                                   static_cast<uint16_t*>(workspace), stream, what);
    x_base = workspace;
  }
  const CUtensorMap x_map = staged_x_map(x_base, mma_dtype, S, g.groups, g.length, g.batch * Tr::kCopies, kDwSteps, what);

  const CUtensorMap g_map = grad_rows_map<T>(b, grad, grad_fp32, gs, in_place, l, workspace, stream, what);
  DwParams p{};
  p.partials = partials;
  p.part_elems = l.part_elems;
  p.units = l.units;
  p.batch = int32_t(g.batch);
  p.groups = int32_t(g.groups);
  p.out_g = int32_t(D);
  p.in_g = int32_t(S);
  p.width = int32_t(g.width);
  p.dilation = int32_t(g.dilation);
  p.o_tiles = int32_t(l.o_tiles);
  p.c_chunks = int32_t(l.c_chunks);
  p.t_units = int32_t(l.t_units);
  p.parts = int32_t(l.parts);
  p.sum_bias = b.dbias != nullptr;  // without it no CTA sums dbias
  DwLaunch launches[2];
  for (int i = 0, n = dw_launches(int(g.width), l.source_wide, launches); i < n; ++i) {
    p.q_base = launches[i].q_base;
    p.q_count = launches[i].q_count;
    auto launch = [&](auto kernel, size_t smem) {
      allow_dynamic_shared_memory(kernel, smem, what);
      const dim3 grid(unsigned(g.groups * l.o_tiles * l.c_chunks * p.q_count), unsigned(l.parts));
      kernel<<<grid, kThreads, smem, stream>>>(g_map, x_map, p);
      check_launch(what);
    };
    constexpr size_t smem = kDwSmemBytes<T>;
    if (l.source_wide) {
      launch(dense_wgmma_weight_grad<T, 1, kDwWideChunks>, smem);
      continue;
    }
    switch (launches[i].taps) {
      case 1: launch(dense_wgmma_weight_grad<T, 1, 1>, smem); break;
      case 2: launch(dense_wgmma_weight_grad<T, 2, 1>, smem); break;
      case 3: launch(dense_wgmma_weight_grad<T, 3, 1>, smem); break;
      default: launch(dense_wgmma_weight_grad<T, 4, 1>, smem); break;
    }
  }
}

}  // namespace

bool dense_wgmma_available(int device) {
#ifdef CAUSALCONV_HAS_SM90A
  return tensor_maps_available() && device_is_sm90(device);
#else
  (void)device;
  return false;
#endif
}

bool dense_wgmma_forward_supported(const DenseForwardParams& f) { return job_supported(forward_job(f), f.g.hopper); }

size_t dense_wgmma_forward_workspace_bytes(const DenseForwardParams& f) { return wg_layout(forward_job(f)).bytes; }

size_t dense_wgmma_saved_x_bytes(const DenseForwardParams& f) {
  const WgJob j = forward_job(f);
  if (!job_supported(j, f.g.hopper) || src_read_in_place(j)) return 0;
  DenseBackwardParams b{};
  b.g = f.g;
  b.dweight = f.y;  // any non-null pointer: a backward that wants dweight
  return dense_wgmma_weight_grad_supported(b) ? channel_last_x_bytes(f.g) : 0;
}

void launch_dense_wgmma_forward(const DenseForwardParams& f, Stream stream) {
  launch_job(forward_job(f), stream, "causal_conv1d forward (dense, Hopper tensor cores)");
}

// dx's workspace does not depend on the gradient's strides: its source is always staged (a
// gradient through silu is fp32; dy is rarely channel-last).
bool dense_wgmma_dx_supported(const DenseBackwardParams& b) {
  const int64_t unit[3] = {0, 0, 1};
  return b.dx && job_supported(dx_job(b, nullptr, true, unit, nullptr), b.g.hopper);
}

size_t dense_wgmma_dx_workspace_bytes(const DenseBackwardParams& b) {
  const int64_t unit[3] = {0, 0, 1};
  return wg_layout(dx_job(b, nullptr, true, unit, nullptr)).bytes;
}

void launch_dense_wgmma_dx(const DenseBackwardParams& b, const void* grad, bool grad_fp32,
                           const int64_t (&grad_stride)[3], void* workspace, Stream stream) {
  launch_job(dx_job(b, grad, grad_fp32, grad_stride, workspace), stream,
             "causal_conv1d backward (dense dx, Hopper tensor cores)");
}

bool dense_wgmma_weight_grad_supported(const DenseBackwardParams& b) {
  const DenseGeometry& g = b.g;
  const int64_t S = g.in_per_group(), D = g.out_per_group();
  if (!g.hopper || !(b.dweight || b.dbias) || S < 32 || D < 32 || g.batch * g.length == 0) return false;
  if (g.length >= kMaxCoordinate || (g.width - 1) * g.dilation >= kMaxCoordinate || 2 * g.batch >= kMaxCoordinate)
    return false;
  const WgDwLayout l = wg_dw_layout(b, backward_grad_in_place(b));
  return !(g.batch > 65535 || g.groups * l.s8 + kStageChannels >= kMaxCoordinate ||
           g.groups * l.o_tiles * l.c_chunks * l.k_chunks > 2147483647 || D >= kMaxCoordinate);
}

size_t dense_wgmma_weight_grad_saved_x_bytes(const DenseBackwardParams& b) {
  return dense_wgmma_weight_grad_supported(b) ? channel_last_x_bytes(b.g) : 0;
}

int64_t dense_wgmma_weight_grad_parts(const DenseBackwardParams& b) {
  return wg_dw_layout(b, backward_grad_in_place(b)).parts;
}

size_t dense_wgmma_weight_grad_workspace_bytes(const DenseBackwardParams& b) {
  return wg_dw_layout(b, backward_grad_in_place(b)).bytes;
}

void launch_dense_wgmma_weight_grad(const DenseBackwardParams& b, const void* grad, bool grad_fp32,
                                    const int64_t (&grad_stride)[3], float* partials, void* workspace,
                                    Stream stream) {
  auto s = static_cast<cudaStream_t>(stream.handle);
  constexpr const char* what = "causal_conv1d backward (dense weight gradients, Hopper tensor cores)";
  switch (b.g.dtype) {
    case DType::f32: launch_wgmma_weight_grad<float>(b, grad, grad_fp32, grad_stride, partials, workspace, s, what); break;
    case DType::f16: launch_wgmma_weight_grad<__half>(b, grad, grad_fp32, grad_stride, partials, workspace, s, what); break;
    case DType::bf16:
      launch_wgmma_weight_grad<__nv_bfloat16>(b, grad, grad_fp32, grad_stride, partials, workspace, s, what);
      break;
    case DType::f64: break;  // rejected by validation
  }
}

}  // namespace causalconv::detail
