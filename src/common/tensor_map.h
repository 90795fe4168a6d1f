// TMA tensor maps for the sm_90a kernels, encoded through the driver's cuTensorMapEncodeTiled
// (reached through the runtime, so the library links no libcuda).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "causalconv/tensor.h"

namespace causalconv::detail {

// Whether the driver offers cuTensorMapEncodeTiled (asked once).
bool tensor_maps_available();

// A tiled map over a 16-bit or fp32 tensor (dims innermost first, strides in bytes for dims
// 1..rank-1), 128-byte swizzle, zero fill out of bounds. Throws a RuntimeError-kind Error naming
// `what` if the driver rejects it.
CUtensorMap encode_tensor_map(const void* base, DType dtype, int rank, const uint64_t* dims, const uint64_t* strides,
                              const uint32_t* box, const char* what);

}  // namespace causalconv::detail
