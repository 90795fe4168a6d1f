// Does compute-sanitizer racecheck order accesses across __syncthreads when the warpgroups before it
// synchronised on their own named barriers a different number of times? (Session 40: racecheck reported
// hazards across __syncthreads in the fp32 wgmma backward, whose two warpgroups take 3 and 2 lag blocks,
// each behind its own named barrier.) Every kernel below is race-free by the PTX memory model:
// `bar.sync id, 128` on a warpgroup's own id synchronises that warpgroup alone, and the block-wide
// barrier orders the write of s before every read of it.
//
//   nvcc -arch=sm_90a -o /tmp/probe scripts/racecheck_named_barriers.cu
//   compute-sanitizer --tool racecheck /tmp/probe
//
// Each kernel's name carries the number of named-barrier syncs of warpgroup 0 and of warpgroup 1;
// kArrive: warpgroup 1 arrives at a block-wide named barrier (bar.arrive) that warpgroup 0 waits at.
#include <cstdio>

template <int kSyncs0, int kSyncs1, bool kArrive>
__global__ void probe(int* out) {
  __shared__ int s[256];
  const int tid = int(threadIdx.x), group = tid >> 7;
  const int syncs = group == 0 ? kSyncs0 : kSyncs1;
  for (int i = 0; i < syncs; ++i) asm volatile("bar.sync %0, 128;" ::"r"(1 + group) : "memory");
  if (kArrive) {
    if (group == 1)
      asm volatile("bar.arrive 5, 256;" ::: "memory");
    else
      asm volatile("bar.sync 5, 256;" ::: "memory");
  }
  s[tid] = tid;
  __syncthreads();
  out[tid] = s[255 - tid];
}

int main() {
  int* out = nullptr;
  cudaMalloc(&out, 256 * sizeof(int));
  probe<1, 1, false><<<1, 256>>>(out);
  probe<2, 1, false><<<1, 256>>>(out);
  probe<0, 0, true><<<1, 256>>>(out);
  probe<2, 1, true><<<1, 256>>>(out);
  const cudaError_t e = cudaDeviceSynchronize();
  std::printf("probe: %s\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
