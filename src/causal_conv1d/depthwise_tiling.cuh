// How the depthwise kernels cut the work: one block per (sequence, time tile).
//
// A sequence is one (b, c) row. When the causal reach (K-1)*d is too long for a
// shared-memory halo, each row is split into its d residue classes t = r (mod d):
// every class is a dilation-1 convolution over x[r::d], so the halo is K-1.
#pragma once

#include <algorithm>
#include <cstdint>

namespace causalconv::detail {

constexpr int kTileOutputs = 2048;  // time steps per tile

// Threads of a tile, each making kPerThread outputs interleaved by kThreads.
template <int kThreadsPerTile>
struct TileShape {
  static constexpr int kThreads = kThreadsPerTile;
  static constexpr int kPerThread = kTileOutputs / kThreadsPerTile;
};
// The forward's fixed cost per block (locating its row, loading weights) is amortised
// over 16 outputs per thread and up to 4 tiles per block; the backward keeps more
// state per output, so it runs 8 outputs per thread and one tile per block.
using ForwardTile = TileShape<128>;
constexpr int64_t kForwardTilesPerBlock = 4;
using BackwardTile = TileShape<256>;
constexpr int64_t kBackwardTilesPerBlock = 1;
constexpr int64_t kMaxTiledReach = 1024;                      // halo limit before splitting by residue
constexpr int64_t kMaxGridX = 2147483647;
constexpr int64_t kMaxGridY = 65535;

// True when every row base + b stride[0] + c stride[1] (b < batch, c < channels) of values of
// elem_bytes bytes starts 16-byte aligned.
inline bool rows_16byte_aligned(const void* base, const int64_t* stride, int64_t batch, int64_t channels,
                                int elem_bytes) {
  const int64_t per_unit = 16 / elem_bytes;
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 && (batch == 1 || stride[0] % per_unit == 0) &&
         (channels == 1 || stride[1] % per_unit == 0);
}

struct DepthwiseTiling {
  int64_t residues;      // R: 1, or min(d, L) when split
  int64_t step;          // time step between neighbours of a sub-sequence: 1, or d when split
  int64_t dilation;      // dilation within a sub-sequence: d / R
  int64_t halo;          // (K-1) * dilation
  int64_t max_length;    // longest sub-sequence
  int64_t tiles;         // tiles per sub-sequence
  int64_t tile_blocks;   // blocks along a sub-sequence (grid.y), each walking tiles strided by it
  int64_t sequences;     // batch * channels * R
};

inline DepthwiseTiling make_depthwise_tiling(int64_t batch, int64_t channels, int64_t length, int64_t width,
                                             int64_t dilation, int64_t tiles_per_block) {
  DepthwiseTiling t{};
  const bool split = (width - 1) * dilation > kMaxTiledReach;
  t.residues = split ? std::min(dilation, length) : 1;  // classes r >= L would be empty
  t.step = split ? dilation : 1;
  t.dilation = split ? 1 : dilation;
  t.halo = (width - 1) * t.dilation;
  t.max_length = (length + t.step - 1) / t.step;
  t.tiles = (t.max_length + kTileOutputs - 1) / kTileOutputs;
  t.tile_blocks = std::min((t.tiles + tiles_per_block - 1) / tiles_per_block, kMaxGridY);
  t.sequences = batch * channels * t.residues;
  return t;
}

}  // namespace causalconv::detail

#if defined(__CUDACC__) || defined(CAUSALCONV_CUDA_EMULATION)
#include "common/cuda_math.cuh"

namespace causalconv::detail {

// Stages src[j * stride] for j in [j0 - before, j0 + kTileOutputs + after) into dst
// as fp32, zero outside [0, n): position i of the span at dst[index(i)]. The tile body is
// loaded with a fixed, unrolled count per thread so that all of a thread's loads are in
// flight at once; a full tile
// (the common case) takes no bounds checks, and kUnitStride turns the index math into
// immediate offsets from one row pointer.
template <bool kUnitStride>
__device__ __forceinline__ int64_t element_offset(int64_t i, int64_t stride) {
  return kUnitStride ? i : i * stride;
}

struct StagedPosition {  // the identity: position i at dst[i]
  __device__ __forceinline__ int operator()(int i) const { return i; }
};

template <typename Shape, bool kUnitStride, typename T, typename Index = StagedPosition>
__device__ __forceinline__ void stage_row(float* dst, const T* src, int64_t stride, int64_t j0, int64_t n,
                                          int before, int after, Index index = {}) {
  const T* row = src + j0 * stride;  // element j0
  const int64_t remaining = n - j0;  // > 0
  float body[Shape::kPerThread];
  if (remaining >= kTileOutputs) {
#pragma unroll
    for (int e = 0; e < Shape::kPerThread; ++e)
      body[e] = to_float(row[element_offset<kUnitStride>(threadIdx.x + e * Shape::kThreads, stride)]);
  } else {
    const int valid = int(remaining);
#pragma unroll
    for (int e = 0; e < Shape::kPerThread; ++e) {
      const int i = threadIdx.x + e * Shape::kThreads;
      body[e] = i < valid ? to_float(row[element_offset<kUnitStride>(i, stride)]) : 0.0f;
    }
  }
  for (int i = threadIdx.x; i < before; i += Shape::kThreads) {  // causal halo; zero padding before t = 0
    const int back = before - i;
    dst[index(i)] = back <= j0 ? to_float(row[element_offset<kUnitStride>(-back, stride)]) : 0.0f;
  }
  for (int i = threadIdx.x; i < after; i += Shape::kThreads) {  // look-ahead halo (backward)
    const int ahead = kTileOutputs + i;
    dst[index(before + ahead)] = ahead < remaining ? to_float(row[element_offset<kUnitStride>(ahead, stride)]) : 0.0f;
  }
#pragma unroll
  for (int e = 0; e < Shape::kPerThread; ++e) dst[index(before + int(threadIdx.x) + e * Shape::kThreads)] = body[e];
}

// Writes a thread's interleaved outputs v[e] (tile positions threadIdx.x + e * Shape::kThreads)
// to dst_row[position * stride], skipping positions at or beyond n - j0.
template <typename Shape, bool kUnitStride, typename T>
__device__ __forceinline__ void store_tile(T* dst_row, int64_t stride, int64_t remaining,
                                           const float (&v)[Shape::kPerThread]) {
  if (remaining >= kTileOutputs) {
#pragma unroll
    for (int e = 0; e < Shape::kPerThread; ++e)
      dst_row[element_offset<kUnitStride>(threadIdx.x + e * Shape::kThreads, stride)] = from_float<T>(v[e]);
  } else {
    const int valid = int(remaining);
#pragma unroll
    for (int e = 0; e < Shape::kPerThread; ++e) {
      const int i = threadIdx.x + e * Shape::kThreads;
      if (i < valid) dst_row[element_offset<kUnitStride>(i, stride)] = from_float<T>(v[e]);
    }
  }
}

}  // namespace causalconv::detail
#endif
