// cuDNN's fused flash attention (kernels/cuda/cudnn_attention.h) against the
// CPU op and against weft's SIMT kernels: forward and backward, causal, GQA
// and MHA, sequence lengths that are not multiples of 64. On the GPU machine
// cuDNN must load (tests/gpu/gpu_checks.sh puts PyTorch's libcudnn.so.9 on
// LD_LIBRARY_PATH): a missing cuDNN fails here rather than skipping, so a run
// cannot pass without exercising it.
#ifdef WEFT_HAVE_CUDA

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/ops.h"

namespace weft::gpu_test {
namespace {

// cuDNN rounds the probabilities and dS to bf16 before its matmuls (the SIMT
// kernels keep them f32), so its gradients get twice the bf16 tolerance.
constexpr Tol kCudnnTol{2e-2, 2e-2};

void require_cudnn() {
  std::string why;
  ASSERT_FALSE(cuda::cudnn_version(&why).empty()) << "cuDNN did not load: " << why;
}

// No GPU needed: the mode passed in (train.attention, which WEFT_ATTENTION
// overrides in the config) decides before anything touches a device; the
// kernels read no environment.
TEST(CudnnAttention, TheModeIsPassedInNotReadFromTheEnvironment) {
  const auto before = ops::attention_mode();
  ASSERT_EQ(setenv("WEFT_ATTENTION", "cudnn", 1), 0);
  ops::set_attention_mode(ops::AttentionMode::Simt);
  const auto k = ops::attention_kernel(Device::CUDA, DType::BF16, 1, 8, 2, 2, 64);
  unsetenv("WEFT_ATTENTION");
  EXPECT_EQ(k.name, "simt");
  EXPECT_EQ(k.detail, "train.attention simt");
  EXPECT_EQ(k.error, "");
  ops::set_attention_mode(before);
}

TEST(CudnnAttention, ChoosesCudnnForBf16AndSimtOtherwise) {
  WEFT_REQUIRE_GPU();
  require_cudnn();
  const auto before = cuda::attention_mode();
  cuda::set_attention_mode(cuda::AttentionMode::Auto);
  auto k = ops::attention_kernel(Device::CUDA, DType::BF16, 2, 70, 4, 2, 64);
  EXPECT_EQ(k.name, "cudnn") << k.detail;
  EXPECT_NE(k.detail.find("cuDNN 9."), std::string::npos) << k.detail;
  k = ops::attention_kernel(Device::CUDA, DType::F32, 2, 70, 4, 2, 64);
  EXPECT_EQ(k.name, "simt");
  EXPECT_NE(k.detail.find("bf16"), std::string::npos) << k.detail;
  EXPECT_EQ(ops::attention_kernel(Device::CPU, DType::BF16, 2, 70, 4, 2, 64).name, "cpu");
  cuda::set_attention_mode(cuda::AttentionMode::Simt);
  EXPECT_EQ(ops::attention_kernel(Device::CUDA, DType::BF16, 2, 70, 4, 2, 64).name, "simt");
  cuda::set_attention_mode(before);
}

TEST(CudnnAttention, MatchesTheCpuOpAndTheSimtKernels) {
  WEFT_REQUIRE_GPU();
  require_cudnn();
  const DType dt = DType::BF16;
  // GQA (groups of 2 and 4) and MHA; T = 33, 70, 129, 1000: not multiples of 64.
  const AttnShape shapes[] = {{2, 70, 4, 2, 64}, {1, 129, 4, 4, 128}, {2, 33, 8, 2, 32}, {1, 1000, 4, 1, 64}};
  for (const AttnShape& s : shapes) {
    SCOPED_TRACE(str(s));
    // CPU reference in f32 on the same (bf16-rounded) inputs.
    const AttnCase c = cpu_attention_reference(s, dt, 50);
    const Shape &qs = c.qs, &ks = c.ks, &ls = c.ls;
    const auto &q = c.q, &k = c.k, &v = c.v, &dout = c.dout;
    const OwnedTensor &cout_ = c.out, &clse = c.lse, &cdq = c.dq, &cdk = c.dk, &cdv = c.dv;

    OwnedTensor gq = gpu_tensor(q, dt, qs), gk = gpu_tensor(k, dt, ks), gv = gpu_tensor(v, dt, ks);
    OwnedTensor gdo = gpu_tensor(dout, dt, qs);
    OwnedTensor out = gpu_empty(dt, qs), lse = gpu_empty(DType::F32, ls);
    ASSERT_TRUE(cuda::cudnn_attention_forward(out.t, lse.t, gq, gk, gv)) << "cuDNN refused the shape";
    expect_close("cudnn out", host_of(cout_.t), download(out.t), tol_for(dt));
    // The statistic is the log-sum-exp of the scaled scores, as the SIMT kernels write it.
    expect_close("cudnn lse", host_of(clse.t), download(lse.t), Tol{1e-4, 1e-4});

    OwnedTensor dq = gpu_empty(dt, qs), dk = gpu_empty(dt, ks), dv = gpu_empty(dt, ks);
    ASSERT_TRUE(cuda::cudnn_attention_backward(dq.t, dk.t, dv.t, gdo, gq, gk, gv, out, lse));
    const auto cudnn_dq = download(dq.t), cudnn_dk = download(dk.t), cudnn_dv = download(dv.t);
    expect_close("cudnn dq", host_of(cdq.t), cudnn_dq, kCudnnTol);
    expect_close("cudnn dk", host_of(cdk.t), cudnn_dk, kCudnnTol);
    expect_close("cudnn dv", host_of(cdv.t), cudnn_dv, kCudnnTol);

    // The SIMT kernels on the same inputs agree with cuDNN's, and the SIMT
    // backward runs from cuDNN's forward (out, lse): the two paths mix.
    OwnedTensor sout = gpu_empty(dt, qs), slse = gpu_empty(DType::F32, ls);
    cuda::simt_attention_forward(sout.t, slse.t, gq, gk, gv);
    expect_close("simt vs cudnn out", download(sout.t), download(out.t), tol_for(dt));
    expect_close("simt vs cudnn lse", download(slse.t), download(lse.t), Tol{1e-4, 1e-4});
    OwnedTensor sdq = gpu_empty(dt, qs), sdk = gpu_empty(dt, ks), sdv = gpu_empty(dt, ks);
    cuda::simt_attention_backward(sdq.t, sdk.t, sdv.t, gdo, gq, gk, gv, out, lse);
    expect_close("simt-from-cudnn dq", download(sdq.t), cudnn_dq, kCudnnTol);
    expect_close("simt-from-cudnn dk", download(sdk.t), cudnn_dk, kCudnnTol);
    expect_close("simt-from-cudnn dv", download(sdv.t), cudnn_dv, kCudnnTol);
  }
}

// ops::attention_* take cuDNN by default for bf16, and its backward plan is
// deterministic where it says so: two backward passes agree bit for bit.
TEST(CudnnAttention, OpsRunCudnnAndItsDeterministicBackwardRepeats) {
  WEFT_REQUIRE_GPU();
  require_cudnn();
  const auto before = cuda::attention_mode();
  cuda::set_attention_mode(cuda::AttentionMode::Cudnn);  // aborts rather than fall back
  const AttnShape s{2, 256, 8, 2, 64};
  const DType dt = DType::BF16;
  const Shape qs{s.B, s.T, s.Hq, s.D}, ks{s.B, s.T, s.Hkv, s.D}, ls{s.B, s.Hq, s.T};
  OwnedTensor gq = gpu_tensor(random_normal_f32(qs.numel(), 60), dt, qs);
  OwnedTensor gk = gpu_tensor(random_normal_f32(ks.numel(), 61), dt, ks);
  OwnedTensor gv = gpu_tensor(random_normal_f32(ks.numel(), 62), dt, ks);
  OwnedTensor gdo = gpu_tensor(random_normal_f32(qs.numel(), 63), dt, qs);
  OwnedTensor out = gpu_empty(dt, qs), lse = gpu_empty(DType::F32, ls);
  ops::attention_forward(out.t, lse.t, gq, gk, gv);
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    OwnedTensor dq = gpu_empty(dt, qs), dk = gpu_empty(dt, ks), dv = gpu_empty(dt, ks);
    ops::attention_backward(dq.t, dk.t, dv.t, gdo, gq, gk, gv, out, lse);
    auto got = download(dq.t);
    if (run == 0) first = got;
    const std::string detail = ops::attention_kernel(Device::CUDA, dt, s.B, s.T, s.Hq, s.Hkv, s.D).detail;
    if (run == 1 && detail.find("non-deterministic") == std::string::npos) {
      EXPECT_EQ(got, first) << detail;
    }
  }
  cuda::set_attention_mode(before);
}

}  // namespace
}  // namespace weft::gpu_test

#endif
