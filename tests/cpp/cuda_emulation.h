// A small CPU emulation of the CUDA execution model, to run kernels written for the
// GPU on a machine without one and check their index math, halos and reductions.
//
// Include this header before anything else in a host-compiled test, then the
// kernel headers. Blocks run one after another; the threads of a block run as OS
// threads, __syncthreads() is a barrier of the block and warp shuffles exchange
// values through a barrier of the warp. Dynamic shared memory is a fresh heap
// buffer of exactly the launch's size, filled with NaN: reading a slot nothing
// wrote shows up as NaN in the results, and under AddressSanitizer an index past
// the end is reported. Only what the b2b kernels use is emulated.
#pragma once

#define CAUSALCONV_CUDA_EMULATION 1
// Plain host functions: defined before the CUDA headers so they keep these.
#define __host__
#define __device__
#define __global__
// A kernel's static __shared__ arrays: one copy that all threads of a block see (blocks run one
// after another), as on the device. (Dynamic shared memory comes from the launch, below.)
#define __shared__ static
#define __noinline__  // (empty: libstdc++'s own __attribute__((__noinline__)) stays valid)

#include <math.h>  // fmaf, expf: the host versions

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __grid_constant__
#define __grid_constant__

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include <pthread.h>

namespace causalconv::emulation {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}
  void wait() { wait_or(false); }
  // The barrier, returning whether any of its threads passed `vote` (__syncthreads_or,
  // bar.red.or.pred). A round's result stays until every thread of it has read it: the next
  // round cannot complete without them.
  bool wait_or(bool vote) {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t generation = generation_;
    votes_ = votes_ || vote;
    if (count_in()) return result_;
    cv_.wait(lock, [&] { return generation_ != generation; });
    return result_;
  }
  // bar.arrive: counts this thread towards the round without waiting for it.
  void arrive() {
    std::lock_guard<std::mutex> lock(mutex_);
    count_in();
  }

 private:
  // One more thread in this round (mutex_ held); the last completes it. Returns whether it did.
  bool count_in() {
    if (++arrived_ != count_) return false;
    arrived_ = 0;
    result_ = votes_;
    votes_ = false;
    ++generation_;
    cv_.notify_all();
    return true;
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  int count_, arrived_ = 0;
  bool votes_ = false, result_ = false;
  uint64_t generation_ = 0;
};

struct BlockState {
  std::unique_ptr<Barrier> block;
  std::vector<std::unique_ptr<Barrier>> warps;
  std::vector<float> exchange;     // one slot per thread, for shuffles
  std::vector<uint32_t> exchange_bits;  // the same for 32-bit words (raw vectors)
  std::vector<float> shared;    // dynamic shared memory
  std::mutex named_mutex;       // guards `named`
  std::map<uint32_t, std::unique_ptr<Barrier>> named;  // bar.sync id, count: made at first use
};

inline Dim3 gridDim, blockIdx, blockDim;
inline thread_local Dim3 threadIdx;
inline BlockState* block_state = nullptr;

// Runs kernel() for every thread of every block of grid, one block at a time.
// Runs each body on its own OS thread and joins them all. The stacks are sized explicitly:
// kernels keep large register arrays, and the default thread stack follows the host's
// ulimit, which differs between machines.
inline void run_threads(std::vector<std::function<void()>>& bodies) {
  constexpr size_t kStackBytes = size_t(32) << 20;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kStackBytes);
  std::vector<pthread_t> ids(bodies.size());
  auto trampoline = [](void* body) -> void* {
    (*static_cast<std::function<void()>*>(body))();
    return nullptr;
  };
  for (size_t i = 0; i < bodies.size(); ++i)
    if (pthread_create(&ids[i], &attr, trampoline, &bodies[i]) != 0)
      throw std::runtime_error("emulation: cannot start a thread");
  pthread_attr_destroy(&attr);
  for (pthread_t id : ids) pthread_join(id, nullptr);
}

// Blocks run one after another, in grid order at one launch and in reverse order at the next: a
// block that writes outside its own part of an output (which the block that owns it overwrites
// when it runs later) is caught at one of the two.
inline void launch(Dim3 grid, unsigned threads, size_t shared_bytes, const std::function<void()>& kernel) {
  static std::atomic<unsigned> launches{0};
  const bool reverse = (launches++ & 1) != 0;
  gridDim = grid;
  blockDim = Dim3{threads, 1, 1};
  for (unsigned i = 0; i < grid.y; ++i)
    for (unsigned j = 0; j < grid.x; ++j) {
      const unsigned by = reverse ? grid.y - 1 - i : i, bx = reverse ? grid.x - 1 - j : j;
      BlockState state;
      state.block = std::make_unique<Barrier>(int(threads));
      for (unsigned w = 0; w < (threads + 31) / 32; ++w) state.warps.push_back(std::make_unique<Barrier>(32));
      state.exchange.assign(threads, 0.0f);
      state.exchange_bits.assign(threads, 0u);
      state.shared.assign(shared_bytes / sizeof(float), std::numeric_limits<float>::quiet_NaN());
      state.shared.shrink_to_fit();
      block_state = &state;
      blockIdx = Dim3{bx, by, 0};
      std::vector<std::function<void()>> bodies;
      for (unsigned t = 0; t < threads; ++t)
        bodies.emplace_back([t, &kernel] {
          threadIdx = Dim3{t, 0, 0};
          kernel();
        });
      run_threads(bodies);
      block_state = nullptr;
    }
}

inline void syncthreads() { block_state->block->wait(); }
inline bool syncthreads_or(bool vote) { return block_state->block->wait_or(vote); }

// bar.sync id, threads: a barrier of the `threads` threads that use `id` (the same count each time).
// bar.red.or.pred id, threads: the same, returning whether any of them passed `vote`.
inline Barrier& named_barrier_slot(uint32_t id, uint32_t threads) {
  std::lock_guard<std::mutex> lock(block_state->named_mutex);
  auto& slot = block_state->named[id];
  if (!slot) slot = std::make_unique<Barrier>(int(threads));
  return *slot;
}
inline bool named_barrier_or(uint32_t id, uint32_t threads, bool vote) {
  return named_barrier_slot(id, threads).wait_or(vote);
}
inline void named_barrier(uint32_t id, uint32_t threads) { named_barrier_or(id, threads, false); }
// bar.arrive id, threads: counts towards the barrier's round without waiting for it.
inline void named_barrier_arrive(uint32_t id, uint32_t threads) { named_barrier_slot(id, threads).arrive(); }

// A 16-byte global or shared access must be 16-byte aligned on the GPU; x86 would not notice.
inline void require_aligned16(const void* p) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) throw std::logic_error("emulation: a 16-byte access not 16-byte aligned");
}

inline float shfl_xor(float v, int offset) {
  const unsigned t = threadIdx.x;
  Barrier& warp = *block_state->warps[t / 32];
  block_state->exchange[t] = v;
  warp.wait();
  const float other = block_state->exchange[t ^ unsigned(offset)];
  warp.wait();
  return other;
}

// Word of lane src_lane (mod 32) of this thread's warp; every lane of the warp must call it.
inline uint32_t shfl_index(uint32_t v, int src_lane) {
  const unsigned t = threadIdx.x;
  Barrier& warp = *block_state->warps[t / 32];
  block_state->exchange_bits[t] = v;
  warp.wait();
  const uint32_t other = block_state->exchange_bits[(t & ~31u) + (unsigned(src_lane) & 31u)];
  warp.wait();
  return other;
}

// A tf32 operand as the tensor core reads it: the upper 19 bits of the fp32 pattern (mma.sync's
// m16n8k8 and wgmma's tf32 forms).
inline float tf32_operand(uint32_t bits) {
  const uint32_t kept = bits & 0xffffe000u;
  float v;
  std::memcpy(&v, &kept, 4);
  return v;
}

}  // namespace causalconv::emulation

using causalconv::emulation::blockDim;
using causalconv::emulation::blockIdx;
using causalconv::emulation::gridDim;
using causalconv::emulation::threadIdx;

inline void __syncthreads() { causalconv::emulation::syncthreads(); }
inline int __syncthreads_or(int vote) { return causalconv::emulation::syncthreads_or(vote != 0) ? 1 : 0; }
inline float __shfl_xor_sync(unsigned /*mask*/, float v, int offset) {
  return causalconv::emulation::shfl_xor(v, offset);
}
inline int min(int a, int b) { return a < b ? a : b; }  // the device library's int min
inline void __syncwarp(unsigned /*mask*/ = 0xffffffffu) {
  causalconv::emulation::block_state->warps[threadIdx.x / 32]->wait();
}
inline unsigned __shfl_sync(unsigned /*mask*/, unsigned v, int src_lane) {
  return causalconv::emulation::shfl_index(v, src_lane);
}
inline unsigned __shfl_xor_sync(unsigned /*mask*/, unsigned v, int offset) {
  return causalconv::emulation::shfl_index(v, int(threadIdx.x % 32) ^ offset);
}
// The device's fast exponential (MUFU.EX2 after a multiply: ~2 + 1.2|v| ulp); here the host's expf.
inline float __expf(float v) { return expf(v); }
// The device's fast division: a / b within 2 ulp (here exact), 0 for 2^126 < |b| < 2^128.
inline float __fdividef(float a, float b) {
  const float m = fabsf(b);
  return m > 0x1p126f && m <= 0x1.fffffep127f ? 0.0f : a / b;
}
inline float __uint_as_float(unsigned bits) {
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}
inline unsigned __float_as_uint(float v) {
  unsigned bits;
  std::memcpy(&bits, &v, 4);
  return bits;
}
inline float __shfl_sync(unsigned /*mask*/, float v, int src_lane) {  // the bits, as the device moves them
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits = causalconv::emulation::shfl_index(bits, src_lane);
  std::memcpy(&v, &bits, 4);
  return v;
}

namespace causalconv::detail {
inline float* b2b_shared_floats() { return causalconv::emulation::block_state->shared.data(); }
}  // namespace causalconv::detail

// Asynchronous copies (common/async_copy.cuh): copy_async16's complete at once on the CPU.
namespace causalconv::detail {
inline void copy_async16(void* dst, const void* src) { std::memcpy(dst, src, 16); }
inline void copy_async_wait_all() {}

// cp_async16's copies happen only at the wait that retires their group, so a read of shared
// memory before that wait sees the old contents (NaN at first), as it may on the GPU.
struct AsyncCopy {
  void* dst;
  const void* src;
  int bytes;
};
inline thread_local std::vector<AsyncCopy> async_open_group;  // this thread's open group
inline thread_local std::vector<std::vector<AsyncCopy>> async_pending_groups;  // committed, unretired
inline void cp_async16(void* dst_shared, const void* src, int bytes) {
  async_open_group.push_back({dst_shared, src, bytes});
}
inline void cp_async_commit() {
  async_pending_groups.push_back(std::move(async_open_group));
  async_open_group.clear();
}
template <int kPending>
inline void cp_async_wait() {
  while (async_pending_groups.size() > size_t(kPending)) {
    for (const AsyncCopy& c : async_pending_groups.front()) {
      std::memset(c.dst, 0, 16);
      std::memcpy(c.dst, c.src, size_t(c.bytes));
    }
    async_pending_groups.erase(async_pending_groups.begin());
  }
}
}  // namespace causalconv::detail

namespace causalconv::detail {
inline float* channel_last_shared() { return causalconv::emulation::block_state->shared.data(); }
inline float* tiled_shared() { return causalconv::emulation::block_state->shared.data(); }
inline uint4* window_ring_shared() { return reinterpret_cast<uint4*>(causalconv::emulation::block_state->shared.data()); }
}  // namespace causalconv::detail
