// b2b_causal_conv1d through the public CUDA entry points, against the fp64 reference:
// forward and all four gradients, every dtype, padded (non-contiguous) activations and
// transposed weights, outputs poisoned with NaN. Skips without a GPU. (Test names
// contain "Cuda": scripts/gpu-check runs these under compute-sanitizer.)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "b2b_test_data.h"
#include "causalconv/causalconv.h"
#include "device_tensor.h"
#include "expect_error.h"
#include "host_tensor.h"

namespace causalconv {
namespace {

using test::Activation;
using test::HostTensor;
using test::Weight;

using test::dtype_of;

// A device copy of a host buffer (padding included); copy_back() brings it home.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::vector<T>& host) : host_(host) {
    EXPECT_EQ(cudaMalloc(&data_, host.size() * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(data_); }
  void copy_back() {
    EXPECT_EQ(cudaMemcpy(host_.data(), data_, host_.size() * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  }
  T* get() const { return data_; }

 private:
  std::vector<T>& host_;
  T* data_ = nullptr;
};

template <typename T>
TensorView cuda_view(const DeviceBuffer<T>& buffer, std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  TensorView v;
  v.data = buffer.get();
  v.dtype = dtype_of<T>();
  v.device = Device{DeviceKind::cuda, 0};
  v.rank = int(sizes.size());
  for (int d = 0; d < v.rank; ++d) {
    v.sizes[d] = sizes[size_t(d)];
    v.strides[d] = strides[size_t(d)];
  }
  return v;
}

struct Case {
  int64_t batch, dim, length, kp, km;
};

template <typename T>
void check_against_reference(const Case& cs, double bound, double reduction_bound) {
  SCOPED_TRACE(::testing::Message() << "B" << cs.batch << " D" << cs.dim << " L" << cs.length << " Kp" << cs.kp
                                    << " Km" << cs.km);
  const int64_t B = cs.batch, D = cs.dim, L = cs.length, kp = cs.kp, km = cs.km;
  HostTensor x({B, 3 * D, L}), wp({3 * D, kp}), wm({D, km}), skip({D}), dout({B, D, L});
  std::random_device seed;
  for (HostTensor* t : {&x, &wp, &wm, &skip, &dout}) t->fill_uniform(seed());
  Activation<T> x_h(B, 3 * D, L), dout_h(B, D, L), out_h(B, D, L), dx_h(B, 3 * D, L);
  Weight<T> wp_h(3 * D, kp), wm_h(D, km), skip_h(D, 1), dwp_h(3 * D, kp), dwm_h(D, km), dskip_h(D, 1);
  x_h.load(x);
  dout_h.load(dout);
  wp_h.load(wp);
  wm_h.load(wm);
  skip_h.load(skip);

  DeviceBuffer<T> x_d(x_h.data), dout_d(dout_h.data), out_d(out_h.data), dx_d(dx_h.data), wp_d(wp_h.data),
      wm_d(wm_h.data), skip_d(skip_h.data), dwp_d(dwp_h.data), dwm_d(dwm_h.data), dskip_d(dskip_h.data);
  auto act = [](const DeviceBuffer<T>& d, const Activation<T>& h) {
    return cuda_view(d, {h.batch, h.channels, h.length}, {h.stride_b, h.stride_c, 1});
  };
  auto weight = [](const DeviceBuffer<T>& d, const Weight<T>& h) {
    return cuda_view(d, {h.rows, h.cols}, {1, h.rows});
  };
  auto vec = [](const DeviceBuffer<T>& d, const Weight<T>& h) { return cuda_view(d, {h.rows}, {1}); };

  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  B2BCausalConv1dForwardArgs fwd{act(x_d, x_h), weight(wp_d, wp_h), weight(wm_d, wm_h), vec(skip_d, skip_h),
                                 act(out_d, out_h)};
  ASSERT_EQ(b2b_causal_conv1d_forward_workspace_bytes(fwd), 0u);
  b2b_causal_conv1d_forward(fwd, Workspace{}, Stream{stream});

  B2BCausalConv1dBackwardArgs bwd{fwd.x, fwd.weight_proj, fwd.weight_mixer, fwd.skip_bias, act(dout_d, dout_h),
                                  act(dx_d, dx_h), weight(dwp_d, dwp_h), weight(dwm_d, dwm_h),
                                  vec(dskip_d, dskip_h)};
  const size_t ws_bytes = b2b_causal_conv1d_backward_workspace_bytes(bwd);
  void* ws = nullptr;
  if (ws_bytes) ASSERT_EQ(cudaMalloc(&ws, ws_bytes), cudaSuccess);
  if (ws_bytes) ASSERT_EQ(cudaMemset(ws, 0xff, ws_bytes), cudaSuccess);  // NaN: every partial must be written
  b2b_causal_conv1d_backward(bwd, Workspace{ws, ws_bytes}, Stream{stream});
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  cudaFree(ws);
  for (auto* d : {&out_d, &dx_d, &dwp_d, &dwm_d, &dskip_d}) d->copy_back();

  // fp16 also gets an absolute allowance of a few subnormal spacings per element: tiny shapes
  // give products of many factors (~1e-6), where fp16 keeps few bits.
  const double tiny = std::is_same_v<T, __half> ? 4 * 0x1p-24 : 0.0;
  const test::B2BReference ref(x, wp, wm, skip, dout), mag = test::b2b_magnitudes(x, wp, wm, skip, dout);
  test::expect_close(out_h.to_host(), ref.out, mag.out, bound, tiny, "out");
  test::expect_close(dx_h.to_host(), ref.dx, mag.dx, bound, tiny, "dx");
  test::expect_close(dwp_h.to_host(), ref.dwp, mag.dwp, reduction_bound, tiny, "dweight_proj");
  test::expect_close(dwm_h.to_host(), ref.dwm, mag.dwm, reduction_bound, tiny, "dweight_mixer");
  test::expect_close(dskip_h.to_host(true), ref.dskip, mag.dskip, reduction_bound, tiny, "dskip_bias");
  EXPECT_TRUE(std::isnan(test::widen(out_h.data[size_t(L)]))) << "wrote into the padding of out";
  EXPECT_TRUE(std::isnan(test::widen(dx_h.data[size_t(L)]))) << "wrote into the padding of dx";
}

const Case kCases[] = {
    {2, 3, 2500, 3, 7},     // L not a multiple of either tile, odd D
    {1, 1, 1, 2, 2},        // L = 1
    {8, 2, 100, 4, 128},    // L < Km, batch 8
    {1, 2, 9000, 32, 256},  // widest; several tiles per block
    {3, 1, 4100, 2, 255},
};

TEST(B2BCuda, Float32MatchesReference) {
  REQUIRE_GPU();
  for (const Case& c : kCases) check_against_reference<float>(c, 1e-6, 5e-5);  // reductions: see conftest.py
}

TEST(B2BCuda, Float16MatchesReference) {
  REQUIRE_GPU();
  for (const Case& c : kCases) check_against_reference<__half>(c, 2e-3, 2e-3);
}

TEST(B2BCuda, BFloat16MatchesReference) {
  REQUIRE_GPU();
  for (const Case& c : kCases) check_against_reference<__nv_bfloat16>(c, 1e-2, 1e-2);
}

// The chunked backward (Kp <= 4: Km <= 8, <= 16, wide) on both sides of its limits,
// with rows that take vector accesses (the padded row stride L + 3 is a multiple of 4)
// and rows that do not, several tiles walked per block (the next tile's loads in flight).
const Case kChunkedBackwardCases[] = {
    {2, 3, 2501, 4, 16},  // Km = 16, vector rows
    {1, 2, 9001, 3, 7},   // 9 tiles over 3 blocks, vector rows
    {8, 3, 5, 2, 9},      // L < Km, batch 8
    {1, 3, 4098, 4, 8},   // element-wise rows, a partial last group
    {2, 2, 1030, 5, 7},   // Kp = 5: the general kernel
    {1, 3, 1030, 4, 17},  // Km = 17: the wide chunked kernel
    {1, 2, 5001, 3, 128}, // wide, 5 tiles over 2 blocks, vector rows
    {2, 3, 300, 4, 256},  // widest, L < Km
};

TEST(B2BCuda, ChunkedBackwardMatchesReference) {
  REQUIRE_GPU();
  for (const Case& c : kChunkedBackwardCases) {
    check_against_reference<float>(c, 1e-6, 5e-5);  // reductions: see conftest.py
    check_against_reference<__half>(c, 2e-3, 2e-3);
    check_against_reference<__nv_bfloat16>(c, 1e-2, 1e-2);
  }
}

// The short-filter forward (Kp <= 4, Km <= 8, rows of whole 16-byte vectors): the padded
// row stride L + 3 is a multiple of 8 here, so every dtype takes it (partial last vectors,
// several spans per row, L = 5 inside one vector).
const Case kShortForwardCases[] = {
    {2, 3, 2045, 3, 7},  // 2 spans at 16-bit, 4 at fp32
    {1, 2, 8189, 4, 8},  // widest short filters, 8 / 16 spans
    {3, 1, 5, 2, 3},     // one partial vector
};

TEST(B2BCuda, ShortForwardMatchesReference) {
  REQUIRE_GPU();
  for (const Case& c : kShortForwardCases) {
    check_against_reference<float>(c, 1e-6, 5e-5);  // reductions: see conftest.py
    check_against_reference<__half>(c, 2e-3, 2e-3);
    check_against_reference<__nv_bfloat16>(c, 1e-2, 1e-2);
  }
}

// ---- argument checks that need no GPU: nothing is launched when they fail ----

alignas(64) unsigned char dummy_storage[64];  // never dereferenced

TensorView dummy_cuda_view(std::vector<int64_t> sizes) {
  TensorView t;
  t.data = dummy_storage;
  t.device = {DeviceKind::cuda, 0};
  t.rank = int(sizes.size());
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.sizes[d] = sizes[size_t(d)];
    t.strides[d] = stride;
    stride *= sizes[size_t(d)];
  }
  return t;
}

// D = 2, Kp = 3, Km = 4, B = 2, L = 3000.
B2BCausalConv1dBackwardArgs backward_args() {
  return {dummy_cuda_view({2, 6, 3000}), dummy_cuda_view({6, 3}), dummy_cuda_view({2, 4}), dummy_cuda_view({2}),
          dummy_cuda_view({2, 2, 3000}), dummy_cuda_view({2, 6, 3000}), dummy_cuda_view({6, 3}),
          dummy_cuda_view({2, 4}), dummy_cuda_view({2})};
}

TEST(B2BCudaArguments, BackwardWorkspaceIsSizedForThePartials) {
  // The short kernel (Kp <= 4, Km <= 8, fp32 rows of whole 16-byte vectors): one partial per
  // span of 2048 steps, 2 per row (D 2 x B 2 rows); slots 3*Kp + Km + 1 = 14.
  EXPECT_EQ(b2b_causal_conv1d_backward_workspace_bytes(backward_args()), size_t(4 * 2 * 2 * 2 * 14));
  // Rows off the 16-byte grid (L + 1 steps apart) take the short kernel realigned
  // (kB2BShortBackwardRealignedRows), its last span walking the tail: 2 spans a row again.
  B2BCausalConv1dBackwardArgs a = backward_args();
  for (TensorView* t : {&a.x, &a.dout, &a.dx}) t->strides[1] = 3001, t->strides[0] = 3001 * t->sizes[1];
  EXPECT_EQ(b2b_causal_conv1d_backward_workspace_bytes(a), size_t(4 * 2 * 2 * 2 * 14));
  // A mixer past the short kernel's (Km 9, fp32) takes the chunked kernel: 3 tiles of 1024 steps,
  // up to 4 per block: 1 block per row; slots 3*Kp + Km + 1 = 19.
  a.weight_mixer = dummy_cuda_view({2, 9});
  a.dweight_mixer = dummy_cuda_view({2, 9});
  EXPECT_EQ(b2b_causal_conv1d_backward_workspace_bytes(a), size_t(4 * 2 * 2 * 1 * 19));
}

TEST(B2BCudaArguments, BackwardRejectsAShortWorkspace) {
  const B2BCausalConv1dBackwardArgs a = backward_args();
  const size_t needed = b2b_causal_conv1d_backward_workspace_bytes(a);
  test::expect_invalid_argument([&] { b2b_causal_conv1d_backward(a, Workspace{dummy_storage, needed - 4}, {}); },
                                "b2b_causal_conv1d", "workspace");
  test::expect_invalid_argument([&] { b2b_causal_conv1d_backward(a, Workspace{nullptr, needed}, {}); },
                                "b2b_causal_conv1d", "workspace");
}

TEST(B2BCudaArguments, RowsNeedUnitTimeStride) {
  B2BCausalConv1dBackwardArgs a = backward_args();
  a.dout.strides[2] = 2;
  test::expect_invalid_argument([&] { b2b_causal_conv1d_backward_workspace_bytes(a); }, "b2b_causal_conv1d",
                                "dout");
  B2BCausalConv1dForwardArgs f{dummy_cuda_view({2, 6, 3000}), dummy_cuda_view({6, 3}), dummy_cuda_view({2, 4}),
                               dummy_cuda_view({2}), dummy_cuda_view({2, 2, 3000})};
  f.x.strides[2] = 3;
  test::expect_invalid_argument([&] { b2b_causal_conv1d_forward(f, {}, {}); }, "b2b_causal_conv1d", "x");
}

TEST(B2BCudaArguments, WidthsOutsideTheEnvelopeRejected) {
  B2BCausalConv1dForwardArgs f{dummy_cuda_view({2, 6, 30}), dummy_cuda_view({6, 33}), dummy_cuda_view({2, 4}),
                               dummy_cuda_view({2}), dummy_cuda_view({2, 2, 30})};
  test::expect_invalid_argument([&] { b2b_causal_conv1d_forward(f, {}, {}); }, "b2b_causal_conv1d",
                                "weight_proj.shape[1] (Kp)");
  f.weight_proj = dummy_cuda_view({6, 3});
  f.weight_mixer = dummy_cuda_view({2, 257});
  test::expect_invalid_argument([&] { b2b_causal_conv1d_forward(f, {}, {}); }, "b2b_causal_conv1d",
                                "weight_mixer.shape[1] (Km)");
  f.weight_mixer = dummy_cuda_view({2, 1});
  test::expect_invalid_argument([&] { b2b_causal_conv1d_forward(f, {}, {}); }, "b2b_causal_conv1d",
                                "weight_mixer.shape[1] (Km)");
  f.weight_mixer = dummy_cuda_view({2, 4});
  f.x.dtype = DType::f64;
  f.weight_proj.dtype = f.weight_mixer.dtype = f.skip_bias.dtype = f.out.dtype = DType::f64;
  test::expect_invalid_argument([&] { b2b_causal_conv1d_forward(f, {}, {}); }, "b2b_causal_conv1d", "x");
}

}  // namespace
}  // namespace causalconv
