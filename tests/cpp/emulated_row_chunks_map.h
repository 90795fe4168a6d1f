// An emulated tensor map (common/sm90_primitives.cuh's EmulatedTensorMap) of the streaming kernels'
// row-chunk view of an activation (common/tile_ring.cuh), as their launchers encode it. Include
// after cuda_emulation.h and a kernel header that brings common/tile_ring.cuh.
#pragma once

#include <cstdint>

namespace causalconv::test {

inline CUtensorMap row_chunks_map(const void* base, int64_t B, int64_t C, int64_t L, const int64_t* stride,
                                  int box_chunks) {
  const detail::RowChunksView v = detail::row_chunks_view(B, C, L, stride, box_chunks);
  detail::sm90::EmulatedTensorMap m{};
  m.base = base;
  m.rank = 4;
  m.swizzle_128b = true;
  for (int d = 0; d < 4; ++d) {
    m.dims[d] = v.dims[d];
    m.box[d] = v.box[d];
  }
  for (int d = 0; d < 3; ++d) m.strides[d] = v.strides[d];
  return detail::sm90::emulated_tensor_map(m);
}

}  // namespace causalconv::test
