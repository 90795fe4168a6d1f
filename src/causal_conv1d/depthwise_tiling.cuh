// How the depthwise kernels cut the work: one block per (sequence, time tile).
//
// A sequence is one (b, c) row. When the causal reach (K-1)*d is too long for a
// shared-memory halo, each row is split into its d residue classes t = r (mod d):
// every class is a dilation-1 convolution over x[r::d], so the halo is K-1.
#pragma once

#include <cstdint>

namespace causalconv::detail {

constexpr int kTileThreads = 256;
constexpr int kTileOutputs = 2048;                            // time steps per block
constexpr int kOutputsPerThread = kTileOutputs / kTileThreads;  // interleaved by kTileThreads
constexpr int64_t kMaxTiledReach = 1024;                      // halo limit before splitting by residue
constexpr int64_t kMaxGridX = 2147483647;
constexpr int64_t kMaxGridY = 65535;

struct DepthwiseTiling {
  int64_t residues;      // R: 1, or d when split
  int64_t step;          // time step between neighbours of a sub-sequence: R
  int64_t dilation;      // dilation within a sub-sequence: d / R
  int64_t halo;          // (K-1) * dilation
  int64_t max_length;    // longest sub-sequence
  int64_t tiles;         // tiles per sub-sequence
  int64_t sequences;     // batch * channels * R
};

inline DepthwiseTiling make_depthwise_tiling(int64_t batch, int64_t channels, int64_t length, int64_t width,
                                             int64_t dilation) {
  DepthwiseTiling t{};
  const bool split = (width - 1) * dilation > kMaxTiledReach;
  t.residues = split ? dilation : 1;
  t.step = t.residues;
  t.dilation = split ? 1 : dilation;
  t.halo = (width - 1) * t.dilation;
  t.max_length = (length + t.step - 1) / t.step;
  t.tiles = (t.max_length + kTileOutputs - 1) / kTileOutputs;
  t.sequences = batch * channels * t.residues;
  return t;
}

}  // namespace causalconv::detail

#ifdef __CUDACC__
#include "common/cuda_math.cuh"

namespace causalconv::detail {

// Stages src[j * stride] for j in [j0 - before, j0 + kTileOutputs + after) into dst
// as fp32, zero outside [0, n). The tile body is loaded with a fixed, unrolled count
// per thread so that all of a thread's loads are in flight at once (a runtime-bounded
// loop would wait for each load before issuing the next); the halos follow.
template <typename T>
__device__ __forceinline__ void stage_row(float* dst, const T* src, int64_t stride, int64_t j0, int64_t n,
                                          int before, int after) {
  float body[kOutputsPerThread];
#pragma unroll
  for (int e = 0; e < kOutputsPerThread; ++e) {
    const int64_t j = j0 + threadIdx.x + e * kTileThreads;
    body[e] = j < n ? to_float(src[j * stride]) : 0.0f;
  }
  for (int i = threadIdx.x; i < before; i += kTileThreads) {
    const int64_t j = j0 - before + i;
    dst[i] = (j >= 0 && j < n) ? to_float(src[j * stride]) : 0.0f;
  }
  for (int i = threadIdx.x; i < after; i += kTileThreads) {
    const int64_t j = j0 + kTileOutputs + i;
    dst[before + kTileOutputs + i] = j < n ? to_float(src[j * stride]) : 0.0f;
  }
#pragma unroll
  for (int e = 0; e < kOutputsPerThread; ++e) dst[before + threadIdx.x + e * kTileThreads] = body[e];
}

}  // namespace causalconv::detail
#endif
