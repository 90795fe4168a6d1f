#include "common/tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <string>

#include "causalconv/error.h"

namespace causalconv::detail {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

}  // namespace

bool tensor_maps_available() { return tensor_map_encoder() != nullptr; }

CUtensorMap encode_tensor_map(const void* base, DType dtype, int rank, const uint64_t* dims, const uint64_t* strides,
                              const uint32_t* box, const char* what) {
  CUtensorMap map{};
  const uint32_t unit[4] = {1, 1, 1, 1};
  auto encode = tensor_map_encoder();
  const CUresult status =
      encode ? encode(&map,
                      dtype == DType::f32   ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                      : dtype == DType::f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                            : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                      cuuint32_t(rank), const_cast<void*>(base), dims, strides, box, unit,
                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
             : CUDA_ERROR_NOT_FOUND;
  if (status != CUDA_SUCCESS)
    throw Error(ErrorKind::runtime, std::string(what) + ": cuTensorMapEncodeTiled failed (CUresult " +
                                        std::to_string(int(status)) + ")");
  return map;
}

}  // namespace causalconv::detail
