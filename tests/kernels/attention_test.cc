// Causal grouped-KV attention: the double kernel against an explicit [T, T]
// softmax, the fp32 ops:: dispatch against the double kernel, and dq/dk/dv
// against central finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace weft {
namespace {

using test::expect_all_close;
using test::expect_gradient;
using test::random_normal;

struct Dims {
  int64_t B, T, Hq, Hkv, D;
  size_t q_numel() const { return static_cast<size_t>(B * T * Hq * D); }
  size_t kv_numel() const { return static_cast<size_t>(B * T * Hkv * D); }
  size_t lse_numel() const { return static_cast<size_t>(B * Hq * T); }
};

// Literal definition: masked [T, T] score matrix per (b, h), row softmax.
void naive_attention(const Dims& d, const std::vector<double>& q, const std::vector<double>& k,
                     const std::vector<double>& v, std::vector<double>& out,
                     std::vector<double>& lse) {
  out.assign(d.q_numel(), 0.0);
  lse.assign(d.lse_numel(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d.D));
  const int64_t G = d.Hq / d.Hkv;
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.Hq; ++h) {
      const int64_t kvh = h / G;
      std::vector<double> s(static_cast<size_t>(d.T * d.T), -INFINITY);
      for (int64_t i = 0; i < d.T; ++i)
        for (int64_t j = 0; j <= i; ++j) {
          double acc = 0;
          for (int64_t x = 0; x < d.D; ++x)
            acc += q[((b * d.T + i) * d.Hq + h) * d.D + x] * k[((b * d.T + j) * d.Hkv + kvh) * d.D + x];
          s[i * d.T + j] = acc * scale;
        }
      for (int64_t i = 0; i < d.T; ++i) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < d.T; ++j) mx = std::max(mx, s[i * d.T + j]);
        for (int64_t j = 0; j < d.T; ++j) sum += std::exp(s[i * d.T + j] - mx);
        const double l = mx + std::log(sum);
        lse[(b * d.Hq + h) * d.T + i] = l;
        for (int64_t j = 0; j < d.T; ++j) {
          const double p = std::exp(s[i * d.T + j] - l);
          for (int64_t x = 0; x < d.D; ++x)
            out[((b * d.T + i) * d.Hq + h) * d.D + x] += p * v[((b * d.T + j) * d.Hkv + kvh) * d.D + x];
        }
      }
    }
}

void kernel_forward(const Dims& d, const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v, std::vector<double>& out,
                    std::vector<double>& lse) {
  out.assign(d.q_numel(), NAN);
  lse.assign(d.lse_numel(), NAN);
  cpu::attention_forward<double>(out.data(), lse.data(), q.data(), k.data(), v.data(), d.B, d.T,
                                 d.Hq, d.Hkv, d.D);
}

class AttentionTest : public ::testing::TestWithParam<Dims> {};

TEST_P(AttentionTest, ForwardMatchesExplicitSoftmax) {
  const Dims d = GetParam();
  auto q = random_normal(d.q_numel(), 1), k = random_normal(d.kv_numel(), 2),
       v = random_normal(d.kv_numel(), 3);
  std::vector<double> out, lse, ref_out, ref_lse;
  kernel_forward(d, q, k, v, out, lse);
  naive_attention(d, q, k, v, ref_out, ref_lse);
  expect_all_close("out", ref_out, out, 1e-12, 1e-12);
  expect_all_close("lse", ref_lse, lse, 1e-12, 1e-12);
}

TEST_P(AttentionTest, Fp32DispatchMatchesDoubleKernel) {
  const Dims d = GetParam();
  auto q = random_normal(d.q_numel(), 4), k = random_normal(d.kv_numel(), 5),
       v = random_normal(d.kv_numel(), 6), dout = random_normal(d.q_numel(), 7);
  std::vector<double> out, lse;
  kernel_forward(d, q, k, v, out, lse);
  std::vector<double> dq(d.q_numel()), dk(d.kv_numel()), dv(d.kv_numel());
  cpu::attention_backward<double>(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                                  v.data(), out.data(), lse.data(), d.B, d.T, d.Hq, d.Hkv, d.D);

  auto qf = test::to_f32(q), kf = test::to_f32(k), vf = test::to_f32(v),
       doutf = test::to_f32(dout);
  std::vector<float> outf(d.q_numel()), lsef(d.lse_numel()), dqf(d.q_numel()),
      dkf(d.kv_numel()), dvf(d.kv_numel());
  Tensor tq = Tensor::f32(qf.data(), {d.B, d.T, d.Hq, d.D});
  Tensor tk = Tensor::f32(kf.data(), {d.B, d.T, d.Hkv, d.D});
  Tensor tv = Tensor::f32(vf.data(), {d.B, d.T, d.Hkv, d.D});
  Tensor tout = Tensor::f32(outf.data(), tq.shape);
  Tensor tlse = Tensor::f32(lsef.data(), {d.B, d.Hq, d.T});
  ops::attention_forward(tout, tlse, tq, tk, tv);
  ops::attention_backward(Tensor::f32(dqf.data(), tq.shape), Tensor::f32(dkf.data(), tk.shape),
                          Tensor::f32(dvf.data(), tk.shape), Tensor::f32(doutf.data(), tq.shape),
                          tq, tk, tv, tout, tlse);
  expect_all_close("out f32", out, test::to_f64(outf), 1e-5, 1e-5);
  expect_all_close("lse f32", lse, test::to_f64(lsef), 1e-5, 1e-5);
  expect_all_close("dq f32", dq, test::to_f64(dqf), 1e-4, 1e-5);
  expect_all_close("dk f32", dk, test::to_f64(dkf), 1e-4, 1e-5);
  expect_all_close("dv f32", dv, test::to_f64(dvf), 1e-4, 1e-5);
}

TEST_P(AttentionTest, BackwardMatchesFiniteDifferences) {
  const Dims d = GetParam();
  auto q = random_normal(d.q_numel(), 8), k = random_normal(d.kv_numel(), 9),
       v = random_normal(d.kv_numel(), 10), r = random_normal(d.q_numel(), 11);
  std::vector<double> out, lse;
  kernel_forward(d, q, k, v, out, lse);
  // Garbage in the outputs proves they are overwritten, not accumulated.
  std::vector<double> dq(d.q_numel(), 7.0), dk(d.kv_numel(), 7.0), dv(d.kv_numel(), 7.0);
  cpu::attention_backward<double>(dq.data(), dk.data(), dv.data(), r.data(), q.data(), k.data(),
                                  v.data(), out.data(), lse.data(), d.B, d.T, d.Hq, d.Hkv, d.D);
  auto loss = [&] {
    std::vector<double> o, l;
    kernel_forward(d, q, k, v, o, l);
    return test::weighted_sum(o, r);
  };
  // With T = 1 every row attends to itself only: out = v, dq = dk = 0.
  const bool single = d.T == 1;
  expect_gradient("dq", q, dq, loss, 96, 1e-6, 1e-6, single);
  expect_gradient("dk", k, dk, loss, 96, 1e-6, 1e-6, single);
  expect_gradient("dv", v, dv, loss);
  if (single) {
    for (double g : dq) EXPECT_NEAR(g, 0.0, 1e-14);
    for (double g : dk) EXPECT_NEAR(g, 0.0, 1e-14);
  }
}

// Hq=4/Hkv=2 and Hq=4/Hkv=1 are grouped; T=1 and T=7 are edge sizes; T=70
// crosses the kernel's 64-row block; D=2 is the smallest even head.
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(Dims{2, 7, 4, 2, 8}, Dims{1, 7, 3, 3, 4},
                                           Dims{2, 1, 4, 2, 4}, Dims{1, 5, 4, 1, 2},
                                           Dims{1, 70, 4, 2, 4}),
                         [](const auto& info) {
                           const Dims& d = info.param;
                           return "B" + std::to_string(d.B) + "T" + std::to_string(d.T) + "Hq" +
                                  std::to_string(d.Hq) + "Hkv" + std::to_string(d.Hkv) + "D" +
                                  std::to_string(d.D);
                         });

// Packed documents: with each query's document start, attention over a row
// of several documents is attention over each document as a sequence of its
// own (out, lse, dq, dk, dv), in double and through the f32 dispatch.
TEST(AttentionDocuments, PackedRowIsEachDocumentAlone) {
  const int64_t B = 2, T = 11, Hq = 4, Hkv = 2, D = 8;
  const Dims d{B, T, Hq, Hkv, D};
  // Row 0: documents [0, 4), [4, 5), [5, 11); row 1: [0, 7), [7, 11).
  const std::vector<std::vector<int64_t>> bounds = {{0, 4, 5, 11}, {0, 7, 11}};
  std::vector<int32_t> starts(B * T);
  for (int64_t b = 0; b < B; ++b)
    for (size_t k = 0; k + 1 < bounds[b].size(); ++k)
      for (int64_t t = bounds[b][k]; t < bounds[b][k + 1]; ++t) starts[b * T + t] = int32_t(bounds[b][k]);
  auto q = random_normal(d.q_numel(), 21), k = random_normal(d.kv_numel(), 22), v = random_normal(d.kv_numel(), 23),
       dout = random_normal(d.q_numel(), 24);
  std::vector<double> out(d.q_numel()), lse(d.lse_numel()), dq(d.q_numel()), dk(d.kv_numel()), dv(d.kv_numel());
  cpu::attention_forward<double>(out.data(), lse.data(), q.data(), k.data(), v.data(), B, T, Hq, Hkv, D,
                                 starts.data());
  cpu::attention_backward<double>(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                                  out.data(), lse.data(), B, T, Hq, Hkv, D, starts.data());
  std::vector<double> want_out(out.size()), want_lse(lse.size()), want_dq(dq.size()), want_dk(dk.size()),
      want_dv(dv.size());
  for (int64_t b = 0; b < B; ++b)
    for (size_t j = 0; j + 1 < bounds[b].size(); ++j) {
      const int64_t s = bounds[b][j], L = bounds[b][j + 1] - s;
      const size_t qo = size_t((b * T + s) * Hq * D), kvo = size_t((b * T + s) * Hkv * D);
      std::vector<double> l(size_t(Hq * L));
      cpu::attention_forward<double>(want_out.data() + qo, l.data(), q.data() + qo, k.data() + kvo, v.data() + kvo, 1,
                                     L, Hq, Hkv, D);
      cpu::attention_backward<double>(want_dq.data() + qo, want_dk.data() + kvo, want_dv.data() + kvo,
                                      dout.data() + qo, q.data() + qo, k.data() + kvo, v.data() + kvo,
                                      want_out.data() + qo, l.data(), 1, L, Hq, Hkv, D);
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t t = 0; t < L; ++t) want_lse[size_t((b * Hq + h) * T + s + t)] = l[size_t(h * L + t)];
    }
  expect_all_close("out", want_out, out, 1e-12, 1e-12);
  expect_all_close("lse", want_lse, lse, 1e-12, 1e-12);
  expect_all_close("dq", want_dq, dq, 1e-12, 1e-12);
  expect_all_close("dk", want_dk, dk, 1e-12, 1e-12);
  expect_all_close("dv", want_dv, dv, 1e-12, 1e-12);
  // Without the starts the row is one causal sequence: different.
  std::vector<double> whole(out.size()), whole_lse(lse.size());
  cpu::attention_forward<double>(whole.data(), whole_lse.data(), q.data(), k.data(), v.data(), B, T, Hq, Hkv, D);
  double diff = 0;
  for (size_t i = 0; i < out.size(); ++i) diff = std::max(diff, std::fabs(whole[i] - out[i]));
  EXPECT_GT(diff, 1e-3);

  // The f32 dispatch with the starts as an I32 tensor.
  auto qf = test::to_f32(q), kf = test::to_f32(k), vf = test::to_f32(v), df = test::to_f32(dout);
  std::vector<float> of(out.size()), lf(lse.size()), dqf(dq.size()), dkf(dk.size()), dvf(dv.size());
  Tensor st = Tensor::i32(starts.data(), {B, T});
  const Tensor tq = Tensor::f32(qf.data(), {B, T, Hq, D}), tk = Tensor::f32(kf.data(), {B, T, Hkv, D}),
               tv = Tensor::f32(vf.data(), {B, T, Hkv, D}), to = Tensor::f32(of.data(), {B, T, Hq, D}),
               tl = Tensor::f32(lf.data(), {B, Hq, T});
  ops::attention_forward(to, tl, tq, tk, tv, &st);
  ops::attention_backward(Tensor::f32(dqf.data(), {B, T, Hq, D}), Tensor::f32(dkf.data(), {B, T, Hkv, D}),
                          Tensor::f32(dvf.data(), {B, T, Hkv, D}), Tensor::f32(df.data(), {B, T, Hq, D}), tq, tk, tv,
                          to, tl, &st);
  expect_all_close("out f32", want_out, test::to_f64(of), 1e-5, 1e-5);
  expect_all_close("dq f32", want_dq, test::to_f64(dqf), 1e-4, 1e-5);
  expect_all_close("dk f32", want_dk, test::to_f64(dkf), 1e-4, 1e-5);
  expect_all_close("dv f32", want_dv, test::to_f64(dvf), 1e-4, 1e-5);
}

TEST(AttentionOps, RejectsBadShapes) {
  test::use_threadsafe_death_tests();
  std::vector<float> buf(4096);
  Tensor q = Tensor::f32(buf.data(), {1, 4, 3, 8});
  Tensor k = Tensor::f32(buf.data(), {1, 4, 2, 8});
  Tensor lse = Tensor::f32(buf.data(), {1, 3, 4});
  EXPECT_DEATH(ops::attention_forward(q, lse, q, k, k),
               "attention_forward: query heads 3 .* not a multiple of kv heads 2");
  Tensor k3 = Tensor::f32(buf.data(), {1, 4, 3, 8});
  Tensor bad_lse = Tensor::f32(buf.data(), {1, 4, 3});
  EXPECT_DEATH(ops::attention_forward(q, bad_lse, q, k3, k3),
               "attention_forward: lse expected shape \\[1, 3, 4\\], got \\[1, 4, 3\\]");
  Tensor short_v = Tensor::f32(buf.data(), {1, 3, 3, 8});
  EXPECT_DEATH(ops::attention_forward(q, lse, q, k3, short_v),
               "attention_forward: v expected shape \\[1, 4, 3, 8\\], got \\[1, 3, 3, 8\\]");
}

}  // namespace
}  // namespace weft
