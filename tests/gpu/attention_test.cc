// weft's SIMT causal attention (grouped KV heads) forward and backward against
// the CPU op. Sequence lengths straddle the 32-row/key tile (1, 31, 33, 70)
// and head dims cover the lane split (D < 32, not a multiple of 32, the 128
// max). The tests pin the SIMT kernels (bf16 would otherwise run through
// cuDNN where it loads); cudnn_attention_test.cc tests cuDNN's.
#ifdef WEFT_HAVE_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/ops.h"

namespace weft::gpu_test {
namespace {

// Runs the SIMT kernels for the scope of a test, then restores the mode.
class SimtAttention {
 public:
  SimtAttention() : before_(cuda::attention_mode()) { cuda::set_attention_mode(cuda::AttentionMode::Simt); }
  ~SimtAttention() { cuda::set_attention_mode(before_); }

 private:
  cuda::AttentionMode before_;
};

TEST(CudaOps, Attention) {
  WEFT_REQUIRE_GPU();
  SimtAttention simt;
  const AttnShape shapes[] = {{1, 1, 1, 1, 16},   {2, 31, 4, 2, 40}, {1, 33, 3, 3, 64},
                              {2, 70, 4, 1, 128}, {1, 129, 2, 1, 8}, {1, 65, 6, 2, 33}};
  for (DType dt : {DType::F32, DType::BF16})
    for (const AttnShape& s : shapes) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + str(s));
      // The GPU backward consumes its own out; the CPU reference's backward
      // gets the CPU out rounded like the GPU's: the same forward state.
      const AttnCase c = cpu_attention_reference(s, dt, 30);
      const Shape &qs = c.qs, &ks = c.ks, &ls = c.ls;
      const auto &q = c.q, &k = c.k, &v = c.v, &dout = c.dout;
      const OwnedTensor &cout_ = c.out, &clse = c.lse, &cdq = c.dq, &cdk = c.dk, &cdv = c.dv;

      OwnedTensor gq = gpu_tensor(q, dt, qs), gk = gpu_tensor(k, dt, ks),
                  gv = gpu_tensor(v, dt, ks);
      OwnedTensor gout = gpu_empty(dt, qs), glse = gpu_empty(DType::F32, ls);
      ops::attention_forward(gout.t, glse.t, gq, gk, gv);
      expect_close("attention out", host_of(cout_.t), download(gout.t), tol_for(dt));
      expect_close("attention lse", host_of(clse.t), download(glse.t), Tol{1e-5, 1e-5});

      OwnedTensor gdq = gpu_empty(dt, qs), gdk = gpu_empty(dt, ks), gdv = gpu_empty(dt, ks);
      ops::attention_backward(gdq.t, gdk.t, gdv.t, gpu_tensor(dout, dt, qs), gq, gk, gv, gout,
                              glse);
      // Gradients sum up to T * group terms in fp32: widen atol for f32.
      Tol tol = tol_for(dt);
      if (dt == DType::F32) tol = Tol{1e-4, 1e-4};
      expect_close("attention dq", host_of(cdq.t), download(gdq.t), tol);
      expect_close("attention dk", host_of(cdk.t), download(gdk.t), tol);
      expect_close("attention dv", host_of(cdv.t), download(gdv.t), tol);
    }
}

// Long sequence: the fused kernels must not need T x T memory. T = 4096 with
// one head would need 64 MiB for a score matrix; the allocator must see only
// the [B, Hq, T] dsum scratch during backward.
TEST(CudaOps, AttentionLongSequenceUsesNoScoreMatrix) {
  WEFT_REQUIRE_GPU();
  SimtAttention simt;
  const int64_t B = 1, T = 4096, H = 1, D = 64;
  const Shape qs{B, T, H, D}, ls{B, H, T};
  auto q = random_normal_f32(qs.numel(), 40), k = random_normal_f32(qs.numel(), 41),
       v = random_normal_f32(qs.numel(), 42);
  OwnedTensor gq = gpu_tensor(q, DType::BF16, qs), gk = gpu_tensor(k, DType::BF16, qs);
  OwnedTensor gv = gpu_tensor(v, DType::BF16, qs), gout = gpu_empty(DType::BF16, qs);
  OwnedTensor glse = gpu_empty(DType::F32, ls), gdo = gpu_tensor(q, DType::BF16, qs);
  OwnedTensor gdq = gpu_empty(DType::BF16, qs), gdk = gpu_empty(DType::BF16, qs),
              gdv = gpu_empty(DType::BF16, qs);
  const auto before = cuda::allocator_stats();
  ops::attention_forward(gout.t, glse.t, gq, gk, gv);
  ops::attention_backward(gdq.t, gdk.t, gdv.t, gdo, gq, gk, gv, gout, glse);
  const auto out = download(gdq.t);
  const auto after = cuda::allocator_stats();
  EXPECT_LE(after.bytes_held - before.bytes_held, size_t{1} << 20);
  for (float x : out) ASSERT_FALSE(std::isnan(x));
}

// Packed documents: each row's document starts at a cut; within a tile, on a
// tile edge, one position long, and (row 1) shifted, so some tiles hold
// several documents and some documents several tiles. Through ops in the
// default mode: bf16 must run the SIMT kernels even where cuDNN loads, and
// mode cudnn is refused by name instead of ignoring the documents.
std::vector<int32_t> packed_starts(int64_t B, int64_t T, const std::vector<int64_t>& cuts) {
  std::vector<int32_t> st(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b) {
    int64_t start = 0;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t c : cuts)
        if (t == c + b) start = t;
      st[b * T + t] = static_cast<int32_t>(start);
    }
  }
  return st;
}

OwnedTensor gpu_i32(const std::vector<int32_t>& x, Shape s) {
  OwnedTensor g(DType::I32, s, Device::CUDA);
  ops::transfer(g.t, Tensor(const_cast<int32_t*>(x.data()), DType::I32, s));
  return g;
}

TEST(CudaOps, AttentionPackedDocuments) {
  WEFT_REQUIRE_GPU();
  const AttnShape shapes[] = {{2, 31, 4, 2, 40}, {1, 70, 4, 1, 128}, {2, 130, 6, 2, 64}, {1, 9, 2, 2, 16}};
  const std::vector<int64_t> cuts = {1, 2, 5, 32, 33, 40, 64, 100, 127};
  const auto before = cuda::attention_mode();
  cuda::set_attention_mode(cuda::AttentionMode::Auto);
  for (DType dt : {DType::F32, DType::BF16})
    for (const AttnShape& s : shapes) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + str(s));
      const std::vector<int32_t> st = packed_starts(s.B, s.T, cuts);
      const AttnCase c = cpu_attention_reference(s, dt, 70, &st);
      OwnedTensor gst = gpu_i32(st, {s.B, s.T});
      OwnedTensor gq = gpu_tensor(c.q, dt, c.qs), gk = gpu_tensor(c.k, dt, c.ks), gv = gpu_tensor(c.v, dt, c.ks);
      OwnedTensor gout = gpu_empty(dt, c.qs), glse = gpu_empty(DType::F32, c.ls);
      ops::attention_forward(gout.t, glse.t, gq, gk, gv, &gst.t);
      expect_close("packed attention out", host_of(c.out.t), download(gout.t), tol_for(dt));
      expect_close("packed attention lse", host_of(c.lse.t), download(glse.t), Tol{1e-5, 1e-5});
      OwnedTensor gdq = gpu_empty(dt, c.qs), gdk = gpu_empty(dt, c.ks), gdv = gpu_empty(dt, c.ks);
      ops::attention_backward(gdq.t, gdk.t, gdv.t, gpu_tensor(c.dout, dt, c.qs), gq, gk, gv, gout, glse, &gst.t);
      Tol tol = tol_for(dt);
      if (dt == DType::F32) tol = Tol{1e-4, 1e-4};
      expect_close("packed attention dq", host_of(c.dq.t), download(gdq.t), tol);
      expect_close("packed attention dk", host_of(c.dk.t), download(gdk.t), tol);
      expect_close("packed attention dv", host_of(c.dv.t), download(gdv.t), tol);
    }
  cuda::set_attention_mode(cuda::AttentionMode::Cudnn);
  EXPECT_EQ(ops::attention_kernel(Device::CUDA, DType::BF16, 1, 9, 2, 2, 16, true).error,
            "train.attention is cudnn but packed documents run on weft's SIMT attention kernels only");
  cuda::set_attention_mode(cuda::AttentionMode::Auto);
  EXPECT_EQ(ops::attention_kernel(Device::CUDA, DType::BF16, 1, 9, 2, 2, 16, true).name, "simt");
  cuda::set_attention_mode(before);
}

// train.attention cudnn with packed documents is refused by the config
// (Rules/BadConfigTest); an op called so anyway ends the process naming why
// (a WEFT_CHECK), it does not run cuDNN without the documents' mask.
TEST(CudaOpsDeathTest, PackedDocumentsUnderCudnnModeAreRefused) {
  WEFT_REQUIRE_GPU();
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_DEATH(
      {
        cuda::set_attention_mode(cuda::AttentionMode::Cudnn);
        OwnedTensor gst = gpu_i32(packed_starts(1, 9, std::vector<int64_t>(3, 4)), Shape{1, 9});
        OwnedTensor gq = gpu_empty(DType::BF16, Shape{1, 9, 2, 16});
        OwnedTensor gout = gpu_empty(DType::BF16, Shape{1, 9, 2, 16});
        OwnedTensor glse = gpu_empty(DType::F32, Shape{1, 2, 9});
        ops::attention_forward(gout.t, glse.t, gq.t, gq.t, gq.t, &gst.t);
      },
      "packed documents run on weft's SIMT attention kernels, not cuDNN");
}

}  // namespace
}  // namespace weft::gpu_test

#else
#include <gtest/gtest.h>
TEST(CudaOps, AttentionNotBuilt) { GTEST_SKIP() << "no CUDA device: weft was built without nvcc"; }
#endif
