#include "common/cuda_runtime.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "causalconv/error.h"
#include "causalconv/version.h"

#ifndef CAUSALCONV_CUDA_ARCHS
#define CAUSALCONV_CUDA_ARCHS "unknown"
#endif

namespace causalconv::detail {
namespace {

std::string describe_current_gpu() {
  int device = -1;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error we just caused
    return "an unidentified GPU";
  }
  return "GPU " + std::to_string(device) + " '" + prop.name + "' (compute capability " +
         std::to_string(prop.major) + "." + std::to_string(prop.minor) + ")";
}

}  // namespace

void throw_cuda_error(cudaError_t status, const char* op) {
  cudaGetLastError();  // leave no stale error behind for the caller's next launch
  std::string where = std::string(op) + " on " + describe_current_gpu() + ", causalconv " + version();
  if (status == cudaErrorNoKernelImageForDevice || status == cudaErrorInvalidDeviceFunction)
    throw Error(ErrorKind::runtime, where + ": this build has no kernel for this GPU (built for CUDA architectures " +
                                        CAUSALCONV_CUDA_ARCHS + "); rebuild with CMAKE_CUDA_ARCHITECTURES naming it");
  throw Error(ErrorKind::runtime, where + ": CUDA error " + cudaGetErrorName(status) + ": " +
                                      cudaGetErrorString(status));
}

bool device_is_sm90(int device) {
  // A device's compute capability never changes: the dispatchers ask on every call, the driver
  // is asked once per device (0: not yet known, 1: no, 2: yes).
  static std::array<std::atomic<int8_t>, 64> known{};
  const bool cached = device >= 0 && device < int(known.size());
  if (cached) {
    const int8_t k = known[size_t(device)].load(std::memory_order_relaxed);
    if (k != 0) return k == 2;
  }
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;  // not cached: a failed query says nothing about the device
  }
  const bool sm90 = major == 9 && minor == 0;
  if (cached) known[size_t(device)].store(sm90 ? 2 : 1, std::memory_order_relaxed);
  return sm90;
}

int resident_blocks(const void* kernel, int threads, size_t dynamic_shared_bytes, const char* op) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int> known;  // (kernel, device) -> blocks
  int device = 0;
  check_cuda(cudaGetDevice(&device), op);
  const std::pair<const void*, int> key(kernel, device);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = known.find(key); it != known.end()) return it->second;
  }
  int per_sm = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, dynamic_shared_bytes), op);
  const int blocks = std::max(per_sm, 1) * current_device_sm_count(op);
  std::lock_guard<std::mutex> lock(mutex);
  known.emplace(key, blocks);
  return blocks;
}

bool current_device_runs_sm90a() {
#ifdef CAUSALCONV_HAS_SM90A
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return device_is_sm90(device);
#else
  return false;
#endif
}

DeviceGuard::DeviceGuard(int device) {
  int current = -1;
  check_cuda(cudaGetDevice(&current), "selecting the device");
  if (current != device) {
    check_cuda(cudaSetDevice(device), "selecting the device");
    previous_ = current;
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

}  // namespace causalconv::detail
