// Validation of the CUDA causal_conv1d op, run without a GPU: every view claims to be
// on cuda:0 but points at a dummy host buffer that is never dereferenced, because the
// op validates (and throws) before it launches anything. Plus reference-target checks
// of b2b_causal_conv1d.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "causal_conv1d/validate.h"
#include "causalconv/error.h"
#include "causalconv/ops.h"
#include "causalconv/reference.h"
#include "expect_error.h"
#include "host_tensor.h"

namespace {

using causalconv::CausalConv1dForwardArgs;
using causalconv::DeviceKind;
using causalconv::DType;
using causalconv::Error;
using causalconv::ErrorKind;
using causalconv::TensorView;
using causalconv::test::expect_invalid_argument;

// Never read or written: only the pointer value is looked at.
alignas(64) unsigned char dummy_storage[64];

TensorView cuda_view(const std::vector<int64_t>& sizes, DType dtype = DType::f32) {
  TensorView t;
  t.data = dummy_storage;
  t.dtype = dtype;
  t.device = {DeviceKind::cuda, 0};
  t.rank = static_cast<int>(sizes.size());
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.sizes[d] = sizes[d];
    t.strides[d] = stride;
    stride *= sizes[d];
  }
  return t;
}

// Depthwise: x (2, 8, 16), weight (8, 4), bias (8), y (2, 8, 16); float32 unless asked.
CausalConv1dForwardArgs depthwise_args(DType dtype = DType::f32) {
  CausalConv1dForwardArgs a;
  a.x = cuda_view({2, 8, 16}, dtype);
  a.weight = cuda_view({8, 4}, dtype);
  a.bias = cuda_view({8}, dtype);
  a.y = cuda_view({2, 8, 16}, dtype);
  a.groups = 8;
  return a;
}

// Dense: x (2, 4, 16), weight (6, 4, 3), y (2, 6, 16).
CausalConv1dForwardArgs dense_args(DType dtype = DType::f32) {
  CausalConv1dForwardArgs a;
  a.x = cuda_view({2, 4, 16}, dtype);
  a.weight = cuda_view({6, 4, 3}, dtype);
  a.y = cuda_view({2, 6, 16}, dtype);
  return a;
}

void expect_rejected(const CausalConv1dForwardArgs& a, const std::string& arg) {
  expect_invalid_argument([&] { causalconv::causal_conv1d_forward(a, {}, {}); }, "causal_conv1d", arg);
}

// The baselines pass validation, so each rejection below is for the one thing it changes.
// (Checked on validate() directly: the op itself would go on to launch a kernel.)
TEST(CudaValidation, BaselinesAreValid) {
  using causalconv::detail::Target;
  EXPECT_NO_THROW(causalconv::detail::validate(depthwise_args(), Target::cuda));
  EXPECT_NO_THROW(causalconv::detail::validate(depthwise_args(DType::bf16), Target::cuda));
  EXPECT_NO_THROW(causalconv::detail::validate(dense_args(), Target::cuda));
  EXPECT_NO_THROW(causalconv::detail::validate(dense_args(DType::f16), Target::cuda));
}

TEST(CudaValidation, WrongRankOfXRejected) {
  CausalConv1dForwardArgs a = depthwise_args();
  a.x = cuda_view({8, 16});
  expect_rejected(a, "x:");
}

TEST(CudaValidation, Float64InputRejected) {
  expect_rejected(depthwise_args(DType::f64), "x:");
}

TEST(CudaValidation, CpuTensorRejected) {
  CausalConv1dForwardArgs a = depthwise_args();
  a.x.device = {DeviceKind::cpu, 0};
  expect_rejected(a, "x:");
}

TEST(CudaValidation, CpuOutputRejected) {
  CausalConv1dForwardArgs a = dense_args();
  a.y.device = {DeviceKind::cpu, 0};
  expect_rejected(a, "y:");
}

TEST(CudaValidation, WeightDtypeMismatchRejected) {
  CausalConv1dForwardArgs a = depthwise_args();
  a.weight.dtype = DType::bf16;
  expect_rejected(a, "weight:");
}

TEST(CudaValidation, WeightOnOtherDeviceRejected) {
  CausalConv1dForwardArgs a = dense_args();
  a.weight.device.index = 1;
  expect_rejected(a, "weight:");
}

TEST(CudaValidation, BiasWrongShapeRejected) {
  CausalConv1dForwardArgs a = depthwise_args();
  a.bias = cuda_view({9});
  expect_rejected(a, "bias:");
}

TEST(CudaValidation, BiasWrongRankRejected) {
  CausalConv1dForwardArgs a = depthwise_args();
  a.bias = cuda_view({1, 8});
  expect_rejected(a, "bias:");
}

TEST(CudaValidation, OutputWrongShapeRejected) {
  CausalConv1dForwardArgs a = dense_args();
  a.y = cuda_view({2, 4, 16});  // C_out is 6
  expect_rejected(a, "y:");
}

TEST(CudaValidation, DepthwiseWidthBelowEnvelopeRejected) {
  CausalConv1dForwardArgs a = depthwise_args();
  a.weight = cuda_view({8, 1});
  expect_rejected(a, "weight");
}

TEST(CudaValidation, DepthwiseWidthAboveEnvelopeRejected) {
  CausalConv1dForwardArgs a = depthwise_args();
  a.weight = cuda_view({8, causalconv::kMaxDepthwiseWidth + 1});
  expect_rejected(a, "weight");
  a.weight = cuda_view({8, 1, causalconv::kMaxDepthwiseWidth + 1});  // the rank-3 depthwise layout too
  expect_rejected(a, "weight");
}

TEST(CudaValidation, DepthwiseWidthsAtEnvelopeEdgesAccepted) {
  CausalConv1dForwardArgs a = depthwise_args();
  for (int64_t width : {causalconv::kMinDepthwiseWidth, causalconv::kMaxDepthwiseWidth}) {
    a.weight = cuda_view({8, width});
    EXPECT_NO_THROW(causalconv::detail::validate(a, causalconv::detail::Target::cuda)) << width;
  }
}

TEST(CudaValidation, DenseWidthAboveEnvelopeRejected) {
  CausalConv1dForwardArgs a = dense_args();
  a.weight = cuda_view({6, 4, causalconv::kMaxDenseWidth + 1});
  expect_rejected(a, "weight");
}

TEST(CudaValidation, ZeroDilationRejected) {
  CausalConv1dForwardArgs a = depthwise_args();
  a.dilation = 0;
  expect_rejected(a, "dilation:");
}

TEST(CudaValidation, GroupsNotDividingInputChannelsRejected) {
  CausalConv1dForwardArgs a = dense_args();
  a.groups = 3;  // C_in is 4
  expect_rejected(a, "groups:");
}

TEST(CudaValidation, DepthwiseWeightWithWrongGroupsRejected) {
  CausalConv1dForwardArgs a = depthwise_args();
  a.groups = 4;  // a 2-D weight means groups == C_in == 8
  expect_rejected(a, "groups:");
}

TEST(CudaValidation, WeightRank4Rejected) {
  CausalConv1dForwardArgs a = dense_args();
  a.weight = cuda_view({6, 4, 3, 1});
  expect_rejected(a, "weight:");
}

// ---- reference-target validation of b2b_causal_conv1d --------------------------

using causalconv::test::HostTensor;

struct B2BTensors {
  HostTensor x{{1, 6, 5}}, weight_proj{{6, 3}}, weight_mixer{{2, 4}}, skip_bias{{2}}, out{{1, 2, 5}};

  causalconv::B2BCausalConv1dForwardArgs args() const {
    causalconv::B2BCausalConv1dForwardArgs a;
    a.x = x.view();
    a.weight_proj = weight_proj.view();
    a.weight_mixer = weight_mixer.view();
    a.skip_bias = skip_bias.view();
    a.out = out.view();
    return a;
  }
};

void expect_b2b_rejected(const causalconv::B2BCausalConv1dForwardArgs& a, const std::string& arg) {
  expect_invalid_argument([&] { causalconv::reference::b2b_causal_conv1d_forward(a); }, "b2b_causal_conv1d", arg);
}

TEST(ReferenceB2BArgumentValidation, BaselineIsValid) {
  B2BTensors t;
  EXPECT_NO_THROW(causalconv::reference::b2b_causal_conv1d_forward(t.args()));
}

TEST(ReferenceB2BArgumentValidation, ChannelsNotDivisibleBy3Rejected) {
  B2BTensors t;
  HostTensor x({1, 7, 5});
  causalconv::B2BCausalConv1dForwardArgs a = t.args();
  a.x = x.view();
  expect_b2b_rejected(a, "x:");
}

TEST(ReferenceB2BArgumentValidation, WrongMixerShapeRejected) {
  B2BTensors t;
  HostTensor mixer({3, 4});  // D is 2
  causalconv::B2BCausalConv1dForwardArgs a = t.args();
  a.weight_mixer = mixer.view();
  expect_b2b_rejected(a, "weight_mixer:");
}

TEST(ReferenceB2BArgumentValidation, WrongMixerRankRejected) {
  B2BTensors t;
  HostTensor mixer({2, 1, 4});
  causalconv::B2BCausalConv1dForwardArgs a = t.args();
  a.weight_mixer = mixer.view();
  expect_b2b_rejected(a, "weight_mixer:");
}

TEST(ReferenceB2BArgumentValidation, WrongProjectionShapeRejected) {
  B2BTensors t;
  HostTensor proj({3, 3});  // 3*D is 6
  causalconv::B2BCausalConv1dForwardArgs a = t.args();
  a.weight_proj = proj.view();
  expect_b2b_rejected(a, "weight_proj:");
}

}  // namespace
