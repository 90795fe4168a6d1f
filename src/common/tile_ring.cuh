// Persistent grids of sm_90a kernels whose blocks walk contiguous ranges of 4096-step tiles in
// row-major order (BlockTileRange, RingWalk), and a TMA view of 64-step chunks: the depthwise
// streaming forward's (depthwise_forward_wgmma_ring_kernel). (The b2b forward's walks across rows,
// streamed and per-row, used them and lost: docs/performance.md, session 48 and 49.)
#pragma once

#include <cstdint>

#include "common/toeplitz_wgmma.cuh"

namespace causalconv::detail {

// The (64, L / 64, C, B) view of a channel-first activation (strides in elements, L % 64 == 0)
// for a tensor map of boxes of `box_chunks` chunks of one row. A unit dimension gets a stride the
// encoder accepts (any multiple of 16 bytes), as it is never stepped.
struct RowChunksView {
  uint64_t dims[4];
  uint64_t strides[3];  // bytes, dims 1-3
  uint32_t box[4];
};
inline RowChunksView row_chunks_view(int64_t batch, int64_t channels, int64_t length, const int64_t* stride,
                                     int box_chunks) {
  const uint64_t chunk_bytes = uint64_t(WgmmaToeplitzTile::kRowBytes);
  const uint64_t row_bytes = uint64_t(length) * 2;
  RowChunksView v{};
  v.dims[0] = uint64_t(WgmmaToeplitzTile::kChunk);
  v.dims[1] = uint64_t(length / WgmmaToeplitzTile::kChunk);
  v.dims[2] = uint64_t(channels);
  v.dims[3] = uint64_t(batch);
  v.strides[0] = chunk_bytes;
  v.strides[1] = channels > 1 ? uint64_t(stride[1]) * 2 : row_bytes;
  v.strides[2] = batch > 1 ? uint64_t(stride[0]) * 2 : row_bytes * uint64_t(channels);
  v.box[0] = uint32_t(WgmmaToeplitzTile::kChunk);
  v.box[1] = uint32_t(box_chunks);
  v.box[2] = 1;
  v.box[3] = 1;
  return v;
}

// Whether row_chunks_view describes a (batch, channels, length) activation of 16-bit values with
// (batch, channel) strides `stride`: rows of whole 64-step chunks that do not overlap (no expanded
// or aliased rows: the map's strides stay as ordinary as the encoder expects), at strides a map can
// hold (below 2^40 bytes). Row alignment (16 bytes) is the caller's to check.
inline bool row_chunks_view_applies(int64_t batch, int64_t channels, int64_t length, const int64_t* stride) {
  constexpr int64_t kMaxStride = (int64_t(1) << 39) - 1;  // elements of 2 bytes
  const bool channels_ok = channels == 1 || (stride[1] >= length && stride[1] <= kMaxStride);
  const int64_t batch_min = channels == 1 ? length : channels * stride[1];
  return length % WgmmaToeplitzTile::kChunk == 0 && channels_ok &&
         (batch == 1 || (stride[0] >= batch_min && stride[0] <= kMaxStride));
}

// A block's place in its tile range, row-major over (b, c, tile): divisions once, at its first
// tile; new_row marks the tiles that start a row for the block (its first, and every tile 0).
struct RingWalk {
  int64_t tile, c, b;
  bool new_row;
  __device__ __forceinline__ RingWalk(int64_t work, int64_t tiles_per_row, int64_t channels) {
    const int64_t row = work / tiles_per_row;
    tile = work - row * tiles_per_row;
    b = row / channels;
    c = row - b * channels;
    new_row = true;
  }
  __device__ __forceinline__ void advance(int64_t tiles_per_row, int64_t channels) {
    new_row = ++tile == tiles_per_row;
    if (new_row) {
      tile = 0;
      if (++c == channels) {
        c = 0;
        ++b;
      }
    }
  }
};

// Block k of a persistent grid of G blocks over W tiles: the contiguous range [k W / G, (k + 1) W / G).
// (Tiles k, k + G, ..., neighbouring tiles at work at once and a row change per tile, lost 9-34 % on
// the H200 in the depthwise form, session 28.)
struct BlockTileRange {
  int64_t first, last;
  __device__ __forceinline__ explicit BlockTileRange(int64_t total)
      : first(total * int64_t(blockIdx.x) / int64_t(gridDim.x)),
        last(total * (int64_t(blockIdx.x) + 1) / int64_t(gridDim.x)) {}
};

}  // namespace causalconv::detail
