// What the dense Hopper kernels rely on beyond aligned tiles, checked on the GPU (sm_90a), with
// the semantics the host emulation (common/sm90_primitives.cuh) assumes:
//  * a wgmma B operand that starts at row r of a 128-byte-swizzled tile (r % 8 != 0 included)
//    with a zero descriptor base offset: the swizzle follows absolute address bits
//    (dense_wgmma_conv_rows reads every tap's operand that way, from one window). Measured on
//    the H200: setting the base offset to the period's phase, r % 8, reads the wrong rows;
//  * the same for an N-major B operand (rows = reduction index), as the weight-gradient kernel
//    reads x rows from its window (not yet run on a GPU when written);
//  * an N-major B operand 256 wide whose four 64-wide groups lie the descriptor's leading byte
//    offset apart (the weight gradient's source-wide CTAs: four TMA boxes of 64 channels; written
//    in session 15, not yet run on a GPU);
//  * ldmatrix.trans + stmatrix turning a channel-row tile into a step-row tile, both swizzled;
//  * both operands MN-major (M-major A, N-major B), as the b2b wgmma backward's weight
//    gradients read two staged rows along time;
//  * an unswizzled K-major B operand of 8 x 8 core matrices: the descriptor's leading byte offset
//    steps along the reduction, its stride along N (b2b_forward_wgmma_kernel's Hankel tables).
//  * the tf32 wgmma with A from registers in mma.sync's m16n8k8 tf32 layout and B a k8 slice of a
//    swizzled tile of fp32 rows (32 values a 128-byte row), 32 bytes a slice, from any row
//    (common/toeplitz_wgmma_tf32.cuh; passed on the H100 in session 33);
//  * descriptor_plus: a descriptor stepped by an offset is bitwise the descriptor of the sum.
// Skipped without a GPU, on other architectures, and in builds without sm_90a code.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "common/sm90_primitives.cuh"
#include "device_tensor.h"

namespace causalconv {
namespace {

namespace sm90 = detail::sm90;

constexpr int kARows = 64, kBRows = 272;

// Small integers: every product and sum below is exact in fp32.
__host__ __device__ inline float a_value(int r, int c) { return float((r * 3 + c) % 7 - 3); }
__host__ __device__ inline float b_value(int r, int c) { return float((r * 5 + c * 3) % 9 - 4); }

// Byte offset of element (r, c) of a tile of 64-value rows under the 128-byte swizzle.
[[maybe_unused]] __host__ __device__ inline uint32_t swizzled_offset(int r, int c) {
  return uint32_t(r) * 128 + uint32_t(((c / 8) ^ (r % 8)) * 16 + (c % 8) * 2);
}

[[maybe_unused]] __device__ inline uint8_t* aligned_shared() {
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(sm90::dynamic_shared()) + 1023) & ~uintptr_t(1023));
}

// The A tile (kARows rows) and the B tile (kBRows rows) of a_value / b_value in bf16, swizzled,
// visible to wgmma.
[[maybe_unused]] __device__ inline void fill_operands(uint8_t* a, uint8_t* b) {
  for (int i = threadIdx.x; i < kARows * 64; i += blockDim.x)
    *reinterpret_cast<__nv_bfloat16*>(a + swizzled_offset(i / 64, i % 64)) = __float2bfloat16(a_value(i / 64, i % 64));
  for (int i = threadIdx.x; i < kBRows * 64; i += blockDim.x)
    *reinterpret_cast<__nv_bfloat16*>(b + swizzled_offset(i / 64, i % 64)) = __float2bfloat16(b_value(i / 64, i % 64));
  sm90::fence_proxy_async_shared();
  __syncthreads();
}

// The accumulators zeroed before a product, and after it (committed, waited for) written out as
// out[thread][i], with *ran set: the tail every product kernel below shares.
template <int N>
[[maybe_unused]] __device__ inline void zero_accumulators(float (&acc)[N]) {
  for (int i = 0; i < N; ++i) acc[i] = 0.0f;
  sm90::fence_registers(acc);
}

template <int N>
[[maybe_unused]] __device__ inline void store_accumulators(float (&acc)[N], float* out, int* ran) {
  sm90::wgmma_commit();
  sm90::wgmma_wait<0>();
  sm90::fence_registers(acc);
  for (int i = 0; i < N; ++i) out[threadIdx.x * N + i] = acc[i];
  if (threadIdx.x == 0) *ran = 1;
}

// D[64 x 256] = A[64 x 16] B[r0 .. r0+255, 0..16)^T, both K-major swizzled tiles.
__global__ void wgmma_from_row_kernel(int r0, float* out, int* ran) {
#ifdef CAUSALCONV_SM90A
  uint8_t* const a = aligned_shared();
  uint8_t* const b = a + kARows * 128;
  fill_operands(a, b);
  float acc[128];
  zero_accumulators(acc);
  const uint32_t b_start = sm90::smem_u32(b) + uint32_t(r0) * 128;
  const uint64_t da = sm90::smem_descriptor(sm90::smem_u32(a), 16, 1024);
  const uint64_t db = sm90::smem_descriptor(b_start, 16, 1024);
  sm90::wgmma_fence();
  sm90::wgmma_m64n256k16<__nv_bfloat16>(acc, da, db, 0);
  store_accumulators(acc, out, ran);
#endif
}

// D[64 x kN] = A[64 x 16] B[16 x kN] with B N-major: reduction rows r0 .. r0+15 of a swizzled
// tile of 64-value rows (dense_wgmma_weight_grad reads each tap's x rows this way), its 64-wide
// group j (kN = 256) starting 64 j rows (8 KiB, the descriptor's leading byte offset) later.
template <int kN>
__global__ void wgmma_n_major_from_row_kernel(int r0, float* out, int* ran) {
#ifdef CAUSALCONV_SM90A
  uint8_t* const a = aligned_shared();
  uint8_t* const b = a + kARows * 128;
  fill_operands(a, b);
  float acc[kN / 2];
  zero_accumulators(acc);
  const uint64_t da = sm90::smem_descriptor(sm90::smem_u32(a), 16, 1024);
  const uint64_t db = sm90::smem_descriptor(sm90::smem_u32(b) + uint32_t(r0) * 128, 8192, 1024);
  sm90::wgmma_fence();
  if constexpr (kN == 64)
    sm90::wgmma_m64n64k16_bt<__nv_bfloat16>(acc, da, db, 0);
  else
    sm90::wgmma_m64n256k16_bt<__nv_bfloat16>(acc, da, db, 0);
  store_accumulators(acc, out, ran);
#endif
}

// D[64 x 64] = A[64 x 16] B[16 x 64] with both operands MN-major: A[m][k] = row ra0 + k, column m
// of the A tile, B[k][n] = row rb0 + k, column n of the B tile (the b2b wgmma backward's weight
// gradients: both operands rows of a staged tile, read along time).
__global__ void wgmma_mn_major_kernel(int ra0, int rb0, float* out, int* ran) {
#ifdef CAUSALCONV_SM90A
  uint8_t* const a = aligned_shared();
  uint8_t* const b = a + kARows * 128;
  fill_operands(a, b);
  float acc[32];
  zero_accumulators(acc);
  const uint64_t da = sm90::smem_descriptor(sm90::smem_u32(a) + uint32_t(ra0) * 128, 8192, 1024);
  const uint64_t db = sm90::smem_descriptor(sm90::smem_u32(b) + uint32_t(rb0) * 128, 8192, 1024);
  sm90::wgmma_fence();
  sm90::wgmma_m64n64k16_tt<__nv_bfloat16>(acc, da, db, 0);
  store_accumulators(acc, out, ran);
#endif
}

// D[64 x 64] = A[64 x 16] B[16 x 64] with B K-major and unswizzled: 8 x 8 core matrices of 8 N
// rows x 16 bytes, `leading` bytes apart along the reduction and `stride` bytes apart along N (the
// Hankel tables of b2b_forward_wgmma_kernel point both strides at 128 bytes).
__global__ void wgmma_unswizzled_kernel(int leading, int stride, float* out, int* ran) {
#ifdef CAUSALCONV_SM90A
  uint8_t* const a = aligned_shared();
  uint8_t* const b = a + kARows * 128;
  fill_operands(a, b);
  uint8_t* const cores = b + kBRows * 128;
  for (int i = threadIdx.x; i < 64 * 16; i += blockDim.x) {
    const int n = i / 16, k = i % 16;
    *reinterpret_cast<__nv_bfloat16*>(cores + (n / 8) * stride + (k / 8) * leading + (n % 8) * 16 + (k % 8) * 2) =
        __float2bfloat16(b_value(n, k));
  }
  sm90::fence_proxy_async_shared();
  __syncthreads();
  float acc[32];
  zero_accumulators(acc);
  const uint64_t da = sm90::smem_descriptor(sm90::smem_u32(a), 16, 1024);
  const uint64_t db = sm90::smem_descriptor_unswizzled(sm90::smem_u32(cores), uint32_t(leading), uint32_t(stride));
  sm90::wgmma_fence();
  sm90::wgmma_m64n64k16<__nv_bfloat16>(acc, da, db, 0);
  store_accumulators(acc, out, ran);
#endif
}

// One warp: a 64 x 64 tile (rows = channels, 64 steps each) -> its transpose (rows = steps), both
// swizzled, as dense_wgmma_conv_rows's transposers do: 32 channels x 8 steps per instruction pair.
__global__ void transpose_kernel(const uint16_t* in, uint16_t* out, int* ran) {
#ifdef CAUSALCONV_SM90A
  uint8_t* const src = aligned_shared();
  uint8_t* const dst = src + 64 * 128;
  const int lane = threadIdx.x, i = lane / 8, j = lane % 8;
  for (int e = lane; e < 64 * 64; e += 32)
    *reinterpret_cast<uint16_t*>(src + swizzled_offset(e / 64, e % 64)) = in[e];
  __syncwarp();
  for (int job = 0; job < 16; ++job) {
    const int sg = job / 2, cg = (job % 2) * 4 + i;
    uint32_t r[4];
    sm90::ldmatrix_x4_trans(r, sm90::smem_u32(src) + (8 * cg + j) * 128 + ((sg ^ j) << 4));
    sm90::stmatrix_x4(sm90::smem_u32(dst) + (8 * sg + j) * 128 + ((cg ^ j) << 4), r);
  }
  __syncwarp();
  for (int e = lane; e < 64 * 64; e += 32) out[e] = *reinterpret_cast<const uint16_t*>(dst + swizzled_offset(e / 64, e % 64));
  if (lane == 0) *ran = 1;
#endif
}

// D[64 x 64] = A[64 x 8] B[r0 .. r0 + 63][8 ks .. 8 ks + 7]^T on tf32: A from registers (a_value in
// m16n8k8's tf32 A layout), B a K-major tile of 32-value fp32 rows of b_value under the 128-byte
// swizzle, slice ks at byte 32 ks.
__global__ void wgmma_tf32_registers_kernel(int r0, int ks, float* out, int* ran) {
#ifdef CAUSALCONV_SM90A
  uint8_t* const b = aligned_shared();
  for (int i = threadIdx.x; i < kBRows * 32; i += blockDim.x) {
    const int r = i / 32, k = i % 32;
    *reinterpret_cast<float*>(b + r * 128 + ((k / 4) ^ (r % 8)) * 16 + (k % 4) * 4) = b_value(r, k);
  }
  sm90::fence_proxy_async_shared();
  __syncthreads();
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32, g = lane / 4, q = lane % 4;
  uint32_t a[4];
  for (int reg = 0; reg < 4; ++reg)
    a[reg] = __float_as_uint(a_value(16 * warp + g + 8 * (reg & 1), q + 4 * (reg >> 1)));
  float acc[32];
  zero_accumulators(acc);
  sm90::wgmma_fence();
  const uint64_t db = sm90::smem_descriptor(sm90::smem_u32(b) + uint32_t(r0) * 128 + 32 * uint32_t(ks), 16, 1024);
  sm90::wgmma_m64n64k8_tf32_rs(acc, a, db, 0);
  store_accumulators(acc, out, ran);
#endif
}

// descriptor_plus against descriptors built from the address itself: thread t takes the operand
// start 16 t (every 16-byte start below 2^18, the shared window), each offset that keeps the sum
// below 2^18, both layouts; counts the descriptors that differ in any bit.
__global__ void descriptor_plus_kernel(int* bad) {
  const uint32_t start = 16 * (blockIdx.x * blockDim.x + threadIdx.x);
  int mismatches = 0;
  for (uint32_t offset : {16u, 32u, 96u, 128u, 2048u, 6144u, 8192u, 65536u, 131072u, 262128u}) {
    if (start + offset >= (1u << 18)) continue;
    mismatches += sm90::descriptor_plus(sm90::smem_descriptor(start, 16, 1024), offset) !=
                  sm90::smem_descriptor(start + offset, 16, 1024);
    mismatches += sm90::descriptor_plus(sm90::smem_descriptor(start, 8192, 1024), offset) !=
                  sm90::smem_descriptor(start + offset, 8192, 1024);
    mismatches += sm90::descriptor_plus(sm90::smem_descriptor_unswizzled(start, 128, 128), offset) !=
                  sm90::smem_descriptor_unswizzled(start + offset, 128, 128);
  }
  if (mismatches) atomicAdd(bad, mismatches);
}

// Skips unless the device is compute capability 9.0.
#define REQUIRE_SM90()                                                                       \
  REQUIRE_GPU();                                                                             \
  {                                                                                          \
    int major = 0, minor = 0;                                                                \
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);                    \
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);                    \
    if (major != 9 || minor != 0) GTEST_SKIP() << "needs a compute capability 9.0 GPU (wgmma)"; \
  }                                                                                          \
  static_assert(true)

struct DeviceBuffers {
  float* out = nullptr;
  int* ran = nullptr;
  ~DeviceBuffers() {
    cudaFree(out);
    cudaFree(ran);
  }
};

// Runs `launch(out, ran)` (one block of 128 threads writing per_thread accumulators each) and
// counts the results that differ from want(m, col), element 4 jn + 2 h + e of thread t being row
// m = 16 w + l / 4 + 8 h, column col = 8 jn + 2 (l % 4) + e of the product (w = t / 32, l = t % 32).
template <typename Launch, typename Want>
int64_t product_mismatches(int per_thread, bool& ran, Launch launch, Want want) {
  DeviceBuffers d;
  EXPECT_EQ(cudaMalloc(&d.out, 128 * per_thread * sizeof(float)), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&d.ran, sizeof(int)), cudaSuccess);
  EXPECT_EQ(cudaMemset(d.ran, 0, sizeof(int)), cudaSuccess);
  launch(d.out, d.ran);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> got(size_t(128) * per_thread);
  int flag = 0;
  EXPECT_EQ(cudaMemcpy(got.data(), d.out, got.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(&flag, d.ran, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  ran = flag == 1;
  int64_t bad = 0;
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < per_thread; ++i) {
      const int w = t / 32, l = t % 32, jn = i / 4, h = (i / 2) % 2, e = i % 2;
      bad += got[size_t(t) * per_thread + i] != want(16 * w + l / 4 + 8 * h, 8 * jn + 2 * (l % 4) + e);
    }
  return bad;
}

// Mismatches of the wgmma result against the exact product, for operand start row r0.
// n_major: the m64n64 product with B N-major (reduction rows from r0); else m64n256, B K-major
// (output columns from row r0). unswizzled_cores (leading, stride): the m64n64 product of
// wgmma_unswizzled_kernel (r0 = 0).
struct UnswizzledCores {
  int leading = 0, stride = 0;
};
int64_t wgmma_mismatches(int r0, bool& ran, bool n_major = false, UnswizzledCores unswizzled_cores = {}) {
  const bool unswizzled = unswizzled_cores.leading > 0;
  const int n = n_major || unswizzled ? 64 : 256;
  const size_t smem = 1024 + (kARows + kBRows) * 128 + 4096;
  auto launch = [&](float* out, int* ran_flag) {
    if (unswizzled)
      wgmma_unswizzled_kernel<<<1, 128, smem>>>(unswizzled_cores.leading, unswizzled_cores.stride, out, ran_flag);
    else if (n_major)
      wgmma_n_major_from_row_kernel<64><<<1, 128, smem>>>(r0, out, ran_flag);
    else
      wgmma_from_row_kernel<<<1, 128, smem>>>(r0, out, ran_flag);
  };
  return product_mismatches(n / 2, ran, launch, [&](int m, int col) {
    float want = 0.0f;
    for (int k = 0; k < 16; ++k) want += a_value(m, k) * (n_major ? b_value(r0 + k, col) : b_value(r0 + col, k));
    return want;
  });
}

TEST(Sm90PrimitivesCuda, WgmmaReadsAnOperandStartingInsideASwizzlePeriod) {
  REQUIRE_SM90();
  for (int r0 : {0, 1, 3, 5, 8, 13}) {
    bool ran = false;
    const int64_t bad = wgmma_mismatches(r0, ran);
    if (!ran) GTEST_SKIP() << "this build has no sm_90a code (CMAKE_CUDA_ARCHITECTURES without 90a)";
    EXPECT_EQ(bad, 0) << "operand from row " << r0;
  }
}

TEST(Sm90PrimitivesCuda, WgmmaReadsAnNMajorOperandStartingInsideASwizzlePeriod) {
  REQUIRE_SM90();
  for (int r0 : {0, 1, 3, 7, 8, 13, 57}) {
    bool ran = false;
    const int64_t bad = wgmma_mismatches(r0, ran, true);
    if (!ran) GTEST_SKIP() << "this build has no sm_90a code (CMAKE_CUDA_ARCHITECTURES without 90a)";
    EXPECT_EQ(bad, 0) << "N-major operand from reduction row " << r0;
  }
}

TEST(Sm90PrimitivesCuda, WgmmaReadsAWideNMajorOperandWhoseGroupsAreTheLeadingOffsetApart) {
  REQUIRE_SM90();
  for (int r0 : {0, 3, 8, 57}) {
    bool ran = false;
    auto launch = [&](float* out, int* ran_flag) {
      wgmma_n_major_from_row_kernel<256><<<1, 128, 1024 + (kARows + kBRows) * 128>>>(r0, out, ran_flag);
    };
    const int64_t bad = product_mismatches(128, ran, launch, [&](int m, int col) {
      float want = 0.0f;
      for (int k = 0; k < 16; ++k) want += a_value(m, k) * b_value(r0 + 64 * (col / 64) + k, col % 64);
      return want;
    });
    if (!ran) GTEST_SKIP() << "this build has no sm_90a code (CMAKE_CUDA_ARCHITECTURES without 90a)";
    EXPECT_EQ(bad, 0) << "N-major operand from reduction row " << r0;
  }
}

// Mismatches of wgmma_mn_major_kernel's product against the exact one.
int64_t wgmma_mn_major_mismatches(int ra0, int rb0, bool& ran) {
  auto launch = [&](float* out, int* ran_flag) {
    wgmma_mn_major_kernel<<<1, 128, 1024 + (kARows + kBRows) * 128>>>(ra0, rb0, out, ran_flag);
  };
  return product_mismatches(32, ran, launch, [&](int m, int col) {
    float want = 0.0f;
    for (int k = 0; k < 16; ++k) want += a_value(ra0 + k, m) * b_value(rb0 + k, col);
    return want;
  });
}

TEST(Sm90PrimitivesCuda, WgmmaReadsMMajorAAndNMajorBOperandsStartingInsideASwizzlePeriod) {
  REQUIRE_SM90();
  for (auto [ra0, rb0] : {std::pair{0, 0}, {16, 3}, {5, 13}, {45, 64}}) {
    bool ran = false;
    const int64_t bad = wgmma_mn_major_mismatches(ra0, rb0, ran);
    if (!ran) GTEST_SKIP() << "this build has no sm_90a code (CMAKE_CUDA_ARCHITECTURES without 90a)";
    EXPECT_EQ(bad, 0) << "A from row " << ra0 << ", B from row " << rb0;
  }
}

TEST(Sm90PrimitivesCuda, WgmmaReadsAnUnswizzledOperandWithLeadingAlongKAndStrideAlongN) {
  REQUIRE_SM90();
  for (UnswizzledCores cores : {UnswizzledCores{128, 256}, UnswizzledCores{1024, 128}}) {
    bool ran = false;
    const int64_t bad = wgmma_mismatches(0, ran, false, cores);
    if (!ran) GTEST_SKIP() << "this build has no sm_90a code (CMAKE_CUDA_ARCHITECTURES without 90a)";
    EXPECT_EQ(bad, 0) << "cores " << cores.leading << " bytes apart along K, " << cores.stride << " along N";
  }
}

TEST(Sm90PrimitivesCuda, Tf32WgmmaTakesRegisterAAndASwizzledSliceOfFp32Rows) {
  REQUIRE_SM90();
  for (int r0 : {0, 3, 8, 13})
    for (int ks : {0, 1, 3}) {
      bool ran = false;
      const int64_t bad = product_mismatches(
          32, ran,
          [&](float* out, int* ran_flag) {
            wgmma_tf32_registers_kernel<<<1, 128, 1024 + kBRows * 128>>>(r0, ks, out, ran_flag);
          },
          [&](int m, int col) {
            float want = 0.0f;
            for (int k = 0; k < 8; ++k) want += a_value(m, k) * b_value(r0 + col, 8 * ks + k);
            return want;
          });
      if (!ran) GTEST_SKIP() << "this build has no sm_90a code (CMAKE_CUDA_ARCHITECTURES without 90a)";
      EXPECT_EQ(bad, 0) << "operand from row " << r0 << ", slice " << ks;
    }
}

// The kernels build each operand's descriptor once and step it with descriptor_plus: it must give
// bitwise the descriptor of the address it points at (any GPU: no wgmma runs).
TEST(Sm90PrimitivesCuda, DescriptorPlusEqualsTheDescriptorOfTheSum) {
  REQUIRE_GPU();
  int* d_bad = nullptr;
  ASSERT_EQ(cudaMalloc(&d_bad, sizeof(int)), cudaSuccess);
  cudaMemset(d_bad, 0, sizeof(int));
  descriptor_plus_kernel<<<(1 << 14) / 128, 128>>>(d_bad);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  int bad = -1;
  cudaMemcpy(&bad, d_bad, sizeof(int), cudaMemcpyDeviceToHost);
  cudaFree(d_bad);
  EXPECT_EQ(bad, 0);
}

TEST(Sm90PrimitivesCuda, LdmatrixTransStmatrixTransposeASwizzledTile) {
  REQUIRE_SM90();
  std::vector<uint16_t> in(64 * 64), out(64 * 64, 0);
  for (int e = 0; e < 64 * 64; ++e) in[e] = uint16_t(e * 7 + 3);
  uint16_t *d_in = nullptr, *d_out = nullptr;
  int* d_ran = nullptr;
  ASSERT_EQ(cudaMalloc(&d_in, in.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_out, out.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_ran, sizeof(int)), cudaSuccess);
  cudaMemcpy(d_in, in.data(), in.size() * 2, cudaMemcpyHostToDevice);
  cudaMemset(d_ran, 0, sizeof(int));
  transpose_kernel<<<1, 32, 1024 + 2 * 64 * 128>>>(d_in, d_out, d_ran);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  int ran = 0;
  cudaMemcpy(out.data(), d_out, out.size() * 2, cudaMemcpyDeviceToHost);
  cudaMemcpy(&ran, d_ran, sizeof(int), cudaMemcpyDeviceToHost);
  cudaFree(d_in);
  cudaFree(d_out);
  cudaFree(d_ran);
  if (ran != 1) GTEST_SKIP() << "this build has no sm_90a code (CMAKE_CUDA_ARCHITECTURES without 90a)";
  int64_t bad = 0;
  for (int s = 0; s < 64; ++s)
    for (int c = 0; c < 64; ++c) bad += out[s * 64 + c] != in[c * 64 + s];
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace causalconv
