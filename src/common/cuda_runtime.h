// CUDA error handling and device scoping for the op dispatchers.
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace causalconv::detail {

// Throws a RuntimeError-kind Error naming the op, the GPU, its compute
// capability and the library version. A missing kernel image gets its own
// message listing the architectures this build carries.
void throw_cuda_error(cudaError_t status, const char* op);

inline void check_cuda(cudaError_t status, const char* op) {
  if (status != cudaSuccess) throw_cuda_error(status, op);
}

// Call right after a kernel launch: launch-configuration errors and missing images surface here.
inline void check_launch(const char* op) { check_cuda(cudaGetLastError(), op); }

// Lets `kernel` launch with `bytes` of dynamic shared memory: past the default 48 KB a kernel
// has to opt in. The default counts static shared memory too, so a kernel with static
// __shared__ arrays must not come here (none of the launchers' kernels has any).
template <typename Kernel>
void allow_dynamic_shared_memory(Kernel kernel, size_t bytes, const char* op) {
  if (bytes > 48 * 1024)
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)), op);
}

// Streaming multiprocessors of the current device (for grids of one wave).
inline int current_device_sm_count(const char* op) {
  int device = 0, sms = 0;
  check_cuda(cudaGetDevice(&device), op);
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), op);
  return sms;
}

// Blocks of `kernel` resident at once on the current device: blocks per SM at `threads` threads
// and `dynamic_shared_bytes` (at least 1: a kernel that fits none fails at its launch) times the
// SMs. A property of the kernel and the device, asked of the runtime once per (kernel, device): a
// kernel is launched with the same threads and shared memory each time.
int resident_blocks(const void* kernel, int threads, size_t dynamic_shared_bytes, const char* op);
template <typename Kernel>
int resident_blocks(Kernel* kernel, int threads, size_t dynamic_shared_bytes, const char* op) {
  return resident_blocks(reinterpret_cast<const void*>(kernel), threads, dynamic_shared_bytes, op);
}

// Compute capability 9.0 (Hopper), where the sm_90a kernels run (false when the query fails);
// asked of the driver once per device.
bool device_is_sm90(int device);

// Whether the sm_90a kernels can serve the current device (the op's: DeviceGuard has made it
// current): this build has an sm_90a image and the device is compute capability 9.0. False without
// a device (a machine with no GPU asking which kernel would serve a call, e.g. for its workspace).
bool current_device_runs_sm90a();

// Makes `device` current for the scope (ops run on the device of their tensors).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace causalconv::detail
