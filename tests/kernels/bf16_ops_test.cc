// bf16 operands on the CPU: every op with bf16 support runs on bf16 tensors
// and on f32 tensors holding the same (bf16-exact) values. The CPU computes
// bf16 ops in f32 and rounds each output once, so the checks are exact: a bf16
// output equals the f32 result rounded to nearest even, an f32 output (rstd,
// lse, losses, accumulators) equals the f32 result bit for bit. Also: the
// aliasing cases, the dtype rules (shared with CUDA, docs/cuda.md) and
// ops::transfer between host tensors.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"
#include "support/random.h"
#include "tensor/bf16.h"

namespace weft {
namespace {

using ::weft::testing::random_normal_f32;
using ::weft::testing::random_tokens;

// One operand held twice: bf16 bits for the bf16 run, their exact f32 values
// for the f32 run. Outputs start as NaN on both sides.
struct Pair {
  Shape s;
  std::vector<uint16_t> h;
  std::vector<float> f;

  static Pair random(Shape s, uint64_t seed, float stddev = 1.0f) {
    Pair p{s, {}, random_normal_f32(static_cast<size_t>(s.numel()), seed, stddev)};
    for (float& v : p.f) {
      p.h.push_back(f32_to_bf16(v));
      v = bf16_to_f32(p.h.back());
    }
    return p;
  }
  static Pair nan(Shape s) {
    const size_t n = static_cast<size_t>(s.numel());
    return Pair{s, std::vector<uint16_t>(n, 0xffff),
                std::vector<float>(n, std::numeric_limits<float>::quiet_NaN())};
  }
  Tensor bf() { return Tensor(h.data(), DType::BF16, s); }
  Tensor f32() { return Tensor::f32(f.data(), s); }
};

// The bf16 run's output equals the f32 run's output rounded once.
void expect_rounded(const std::string& what, const Pair& p) {
  for (size_t i = 0; i < p.h.size(); ++i)
    ASSERT_EQ(p.h[i], f32_to_bf16(p.f[i]))
        << what << " element " << i << ": bf16 run " << bf16_to_f32(p.h[i]) << ", f32 run "
        << p.f[i];
}

// Two f32 outputs (one per run) must agree bit for bit.
struct F32Pair {
  Shape s;
  std::vector<float> a, b;  // a: f32 run, b: bf16 run
  static F32Pair filled(Shape s, std::vector<float> init) { return F32Pair{s, init, init}; }
  static F32Pair nan(Shape s) {
    return filled(s, std::vector<float>(static_cast<size_t>(s.numel()),
                                         std::numeric_limits<float>::quiet_NaN()));
  }
  Tensor ref() { return Tensor::f32(a.data(), s); }
  Tensor got() { return Tensor::f32(b.data(), s); }
};

void expect_same(const std::string& what, const F32Pair& p) {
  ASSERT_EQ(0, std::memcmp(p.a.data(), p.b.data(), p.a.size() * sizeof(float))) << what;
}

TEST(Bf16Ops, Matmul) {
  const int64_t M = 17, N = 33, K = 65;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      SCOPED_TRACE("ta" + std::to_string(ta) + " tb" + std::to_string(tb));
      Pair a = Pair::random(ta ? Shape{K, M} : Shape{M, K}, 1);
      Pair b = Pair::random(tb ? Shape{N, K} : Shape{K, N}, 2);
      // bf16 c, overwritten and accumulated (beta != 0 reads the widened c).
      Pair c = Pair::nan({M, N});
      ops::matmul(c.f32(), a.f32(), b.f32(), ta, tb, 0.5f, 0.0f);
      ops::matmul(c.bf(), a.bf(), b.bf(), ta, tb, 0.5f, 0.0f);
      expect_rounded("matmul bf16 c", c);
      Pair cacc = Pair::random({M, N}, 3);
      ops::matmul(cacc.f32(), a.f32(), b.f32(), ta, tb, 0.5f, 0.75f);
      ops::matmul(cacc.bf(), a.bf(), b.bf(), ta, tb, 0.5f, 0.75f);
      expect_rounded("matmul bf16 c, beta 0.75", cacc);
      // bf16 a and b into an f32 c with beta = 1: the weight-gradient path.
      F32Pair c32 = F32Pair::filled({M, N}, random_normal_f32(M * N, 4));
      ops::matmul(c32.ref(), a.f32(), b.f32(), ta, tb, 1.0f, 1.0f);
      ops::matmul(c32.got(), a.bf(), b.bf(), ta, tb, 1.0f, 1.0f);
      expect_same("matmul f32 c += bf16 a b", c32);
    }
}

TEST(Bf16Ops, Embedding) {
  const int64_t N = 300, V = 23, C = 70;  // N > V: tokens repeat, backward accumulates
  auto tok = random_tokens(N, V, 5);
  Tensor tokens = Tensor::i32(tok.data(), {N});
  Pair w = Pair::random({V, C}, 6), out = Pair::nan({N, C});
  ops::embedding_forward(out.f32(), tokens, w.f32());
  ops::embedding_forward(out.bf(), tokens, w.bf());
  expect_rounded("embedding_forward", out);
  Pair dout = Pair::random({N, C}, 7);
  F32Pair dw = F32Pair::filled({V, C}, random_normal_f32(V * C, 8));
  ops::embedding_backward(dw.ref(), tokens, dout.f32());
  ops::embedding_backward(dw.got(), tokens, dout.bf());
  expect_same("embedding_backward f32 dweight += bf16 dout", dw);
}

TEST(Bf16Ops, RmsNorm) {
  const int64_t N = 37, C = 130;
  Pair x = Pair::random({N, C}, 9), w = Pair::random({C}, 10), out = Pair::nan({N, C});
  F32Pair rstd = F32Pair::nan({N});
  ops::rmsnorm_forward(out.f32(), rstd.ref(), x.f32(), w.f32(), 1e-5f);
  ops::rmsnorm_forward(out.bf(), rstd.got(), x.bf(), w.bf(), 1e-5f);
  expect_rounded("rmsnorm out", out);
  expect_same("rmsnorm rstd", rstd);

  Pair dout = Pair::random({N, C}, 11), dx = Pair::nan({N, C});
  const auto dw0 = random_normal_f32(C, 12);
  F32Pair dw = F32Pair::filled({C}, dw0);
  ops::rmsnorm_backward(dx.f32(), dw.ref(), dout.f32(), x.f32(), w.f32(), rstd.ref());
  ops::rmsnorm_backward(dx.bf(), dw.got(), dout.bf(), x.bf(), w.bf(), rstd.ref());
  expect_rounded("rmsnorm dx", dx);
  expect_same("rmsnorm dw_acc", dw);

  // dx aliasing dout, then dx aliasing x: the same bits as a separate dx.
  for (int alias_x = 0; alias_x < 2; ++alias_x) {
    Pair in_place = alias_x ? x : dout;
    std::vector<float> dw2 = dw0;
    Tensor d = in_place.bf();
    ops::rmsnorm_backward(d, Tensor::f32(dw2.data(), {C}), alias_x ? dout.bf() : d,
                          alias_x ? d : x.bf(), w.bf(), rstd.ref());
    EXPECT_EQ(in_place.h, dx.h) << (alias_x ? "dx aliasing x" : "dx aliasing dout");
    EXPECT_EQ(dw2, dw.b);
  }
}

TEST(Bf16Ops, Rope) {
  const Shape sh{2, 9, 3, 10};
  for (int64_t pos0 : {0, 5}) {
    SCOPED_TRACE("pos0 " + std::to_string(pos0));
    Pair x = Pair::random(sh, 13), y = Pair::nan(sh), dx = Pair::nan(sh);
    ops::rope_forward(y.f32(), x.f32(), 10000.0f, pos0);
    ops::rope_forward(y.bf(), x.bf(), 10000.0f, pos0);
    expect_rounded("rope_forward", y);
    ops::rope_backward(dx.f32(), x.f32(), 10000.0f, pos0);
    ops::rope_backward(dx.bf(), x.bf(), 10000.0f, pos0);
    expect_rounded("rope_backward", dx);
    Pair fwd = x, bwd = x;
    ops::rope_forward(fwd.bf(), fwd.bf(), 10000.0f, pos0);
    ops::rope_backward(bwd.bf(), bwd.bf(), 10000.0f, pos0);
    EXPECT_EQ(fwd.h, y.h) << "rope_forward in place";
    EXPECT_EQ(bwd.h, dx.h) << "rope_backward in place";
  }
}

TEST(Bf16Ops, Attention) {
  const int64_t B = 2, T = 33, Hq = 4, Hkv = 2, D = 16;
  Pair q = Pair::random({B, T, Hq, D}, 14), k = Pair::random({B, T, Hkv, D}, 15),
       v = Pair::random({B, T, Hkv, D}, 16), out = Pair::nan({B, T, Hq, D});
  F32Pair lse = F32Pair::nan({B, Hq, T});
  ops::attention_forward(out.f32(), lse.ref(), q.f32(), k.f32(), v.f32());
  ops::attention_forward(out.bf(), lse.got(), q.bf(), k.bf(), v.bf());
  expect_rounded("attention out", out);
  expect_same("attention lse", lse);

  // Backward reads the bf16 out: the f32 run gets the same (rounded) values.
  for (size_t i = 0; i < out.f.size(); ++i) out.f[i] = bf16_to_f32(out.h[i]);
  Pair dout = Pair::random({B, T, Hq, D}, 17), dq = Pair::nan(q.s), dk = Pair::nan(k.s),
       dv = Pair::nan(v.s);
  ops::attention_backward(dq.f32(), dk.f32(), dv.f32(), dout.f32(), q.f32(), k.f32(), v.f32(),
                          out.f32(), lse.ref());
  ops::attention_backward(dq.bf(), dk.bf(), dv.bf(), dout.bf(), q.bf(), k.bf(), v.bf(), out.bf(),
                          lse.ref());
  expect_rounded("attention dq", dq);
  expect_rounded("attention dk", dk);
  expect_rounded("attention dv", dv);
}

TEST(Bf16Ops, SwiGlu) {
  const Shape sh{7, 45};
  Pair g = Pair::random(sh, 18, 3.0f), u = Pair::random(sh, 19), out = Pair::nan(sh);
  ops::swiglu_forward(out.f32(), g.f32(), u.f32());
  ops::swiglu_forward(out.bf(), g.bf(), u.bf());
  expect_rounded("swiglu out", out);
  Pair dout = Pair::random(sh, 20), dg = Pair::nan(sh), du = Pair::nan(sh);
  ops::swiglu_backward(dg.f32(), du.f32(), dout.f32(), g.f32(), u.f32());
  ops::swiglu_backward(dg.bf(), du.bf(), dout.bf(), g.bf(), u.bf());
  expect_rounded("swiglu dgate", dg);
  expect_rounded("swiglu dup", du);
}

TEST(Bf16Ops, CrossEntropy) {
  const int64_t N = 13, V = 301;
  auto tgt = random_tokens(N, V, 21);
  Tensor targets = Tensor::i32(tgt.data(), {N});
  Pair logits = Pair::random({N, V}, 22, 3.0f);
  F32Pair losses = F32Pair::nan({N});
  const double mean_f32 = ops::cross_entropy_forward(losses.ref(), logits.f32(), targets);
  const double mean_bf16 = ops::cross_entropy_forward(losses.got(), logits.bf(), targets);
  EXPECT_EQ(mean_f32, mean_bf16);
  expect_same("cross_entropy losses", losses);
  // dlogits written over logits (the LM head reuses its buffer), and separately.
  Pair separate = Pair::nan(logits.s);
  ops::cross_entropy_backward(separate.bf(), logits.bf(), targets, 1.0f / N);
  ops::cross_entropy_backward(logits.f32(), logits.f32(), targets, 1.0f / N);
  ops::cross_entropy_backward(logits.bf(), logits.bf(), targets, 1.0f / N);
  expect_rounded("cross_entropy dlogits in place", logits);
  EXPECT_EQ(separate.h, logits.h);
}

TEST(Bf16Ops, Elementwise) {
  const int64_t n = 70000;  // above the parallel thresholds
  Pair x = Pair::nan({n});
  ops::fill(x.f32(), 1.0f / 3);
  ops::fill(x.bf(), 1.0f / 3);
  expect_rounded("fill", x);
  std::vector<int32_t> ints(5);
  ops::fill(Tensor::i32(ints.data(), {5}), 7.0f);
  EXPECT_EQ(ints, std::vector<int32_t>(5, 7));

  Pair a = Pair::random({n}, 23), y = Pair::random({n}, 24);
  // f32 += bf16 (the gradient path), bf16 += f32, bf16 += bf16.
  F32Pair y32 = F32Pair::filled({n}, y.f);
  ops::add_acc(y32.ref(), a.f32());
  ops::add_acc(y32.got(), a.bf());
  expect_same("add_acc f32 += bf16", y32);
  Pair yb = y;
  ops::add_acc(yb.f32(), a.f32());
  ops::add_acc(yb.bf(), a.f32());
  expect_rounded("add_acc bf16 += f32", yb);
  Pair yy = y;
  ops::add_acc(yy.f32(), a.f32());
  ops::add_acc(yy.bf(), a.bf());
  expect_rounded("add_acc bf16 += bf16", yy);
  ops::add_acc(yy.f32(), yy.f32());
  ops::add_acc(yy.bf(), yy.bf());  // y += y on one buffer
  expect_rounded("add_acc bf16 += itself", yy);

  Pair s = a;
  ops::scale(s.f32(), 0.3f);
  ops::scale(s.bf(), 0.3f);
  expect_rounded("scale", s);
  EXPECT_EQ(ops::sum_squares(a.f32()), ops::sum_squares(a.bf()));
  Pair c = Pair::nan({n});
  ops::copy(c.bf(), a.bf());
  EXPECT_EQ(c.h, a.h);
}

// Ops on several threads at once each get their own scratch.
TEST(Bf16Ops, ThreadsDoNotShareScratch) {
  const int64_t N = 64, C = 256;
  std::vector<Pair> xs, outs;
  std::vector<std::vector<float>> rstds(4, std::vector<float>(N));
  Pair w = Pair::random({C}, 30);
  for (uint64_t t = 0; t < 4; ++t) {
    xs.push_back(Pair::random({N, C}, 31 + t));
    outs.push_back(Pair::nan({N, C}));
  }
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 50; ++rep)
        ops::rmsnorm_forward(outs[t].bf(), Tensor::f32(rstds[t].data(), {N}), xs[t].bf(), w.bf(),
                             1e-5f);
    });
  for (auto& th : threads) th.join();
  for (size_t t = 0; t < 4; ++t) {
    std::vector<float> rstd(N);
    ops::rmsnorm_forward(outs[t].f32(), Tensor::f32(rstd.data(), {N}), xs[t].f32(), w.f32(),
                         1e-5f);
    expect_rounded("rmsnorm on thread " + std::to_string(t), outs[t]);
  }
}

TEST(Bf16Ops, MixedDtypesAbortNamingTheOperand) {
  test::use_threadsafe_death_tests();
  Pair a = Pair::random({4, 4}, 40), b = Pair::random({4, 4}, 41);
  std::vector<int32_t> ints(16);
  Tensor i = Tensor::i32(ints.data(), {4, 4});
  EXPECT_DEATH(ops::matmul(a.bf(), a.bf(), b.f32(), false, false),
               "matmul: b expected dtype bf16, got f32 \\(the dtype of a\\)");
  EXPECT_DEATH(ops::matmul(a.bf(), a.f32(), b.f32(), false, false),
               "matmul: c may be bf16 only when a and b are bf16");
  EXPECT_DEATH(ops::matmul(i, a.f32(), b.f32(), false, false),
               "matmul: c expected dtype f32 or bf16, got i32");
  EXPECT_DEATH(ops::rmsnorm_forward(a.bf(), Tensor(b.h.data(), DType::BF16, {4}), a.bf(),
                                    Tensor(b.h.data(), DType::BF16, {4}), 1e-5f),
               "rmsnorm_forward: rstd expected dtype f32, got bf16");
  EXPECT_DEATH(ops::rmsnorm_forward(a.f32(), Tensor::f32(b.f.data(), {4}), a.bf(),
                                    Tensor(b.h.data(), DType::BF16, {4}), 1e-5f),
               "rmsnorm_forward: out expected dtype bf16, got f32 \\(the dtype of x\\)");
  EXPECT_DEATH(ops::embedding_backward(a.bf(), Tensor::i32(ints.data(), {4}), a.bf()),
               "embedding_backward: dweight_acc expected dtype f32, got bf16");
  EXPECT_DEATH(ops::embedding_forward(a.f32(), Tensor::i32(ints.data(), {4}), a.bf()),
               "embedding_forward: out expected dtype bf16, got f32 \\(the dtype of weight\\)");
  EXPECT_DEATH(ops::swiglu_forward(a.bf(), a.bf(), b.f32()),
               "swiglu_forward: up expected dtype bf16, got f32 \\(the dtype of gate\\)");
  EXPECT_DEATH(ops::cross_entropy_backward(a.f32(), a.bf(), Tensor::i32(ints.data(), {4}), 1.0f),
               "cross_entropy_backward: dlogits expected dtype bf16, got f32 \\(the dtype of logits\\)");
  EXPECT_DEATH(ops::cross_entropy_forward(Tensor(b.h.data(), DType::BF16, {4}), a.bf(),
                                          Tensor::i32(ints.data(), {4})),
               "cross_entropy_forward: losses expected dtype f32, got bf16");
  EXPECT_DEATH(ops::add_acc(a.f32(), i), "add_acc: x expected dtype f32 or bf16, got i32");
  EXPECT_DEATH(ops::sum_squares(i), "sum_squares: x expected dtype f32 or bf16, got i32");
  Pair q = Pair::random({1, 2, 2, 4}, 42);
  std::vector<uint16_t> lse(4);
  EXPECT_DEATH(ops::attention_forward(q.bf(), Tensor(lse.data(), DType::BF16, {1, 2, 2}), q.bf(),
                                      q.bf(), q.bf()),
               "attention_forward: lse expected dtype f32, got bf16");
  EXPECT_DEATH(ops::attention_forward(q.f32(), Tensor::f32(q.f.data(), {1, 2, 2}), q.bf(), q.bf(),
                                      q.bf()),
               "attention_forward: out expected dtype bf16, got f32 \\(the dtype of q\\)");
  EXPECT_DEATH(ops::rope_forward(q.f32(), q.bf(), 10000.0f),
               "rope_forward: out expected dtype bf16, got f32 \\(the dtype of x\\)");
  // AdamW state stays f32 even with a bf16 working copy.
  const ops::AdamWParams h{1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1};
  EXPECT_DEATH(ops::adamw_update(a.bf(), a.bf(), a.f32(), a.f32(), h, b.f32()),
               "adamw_update: grad expected dtype f32, got bf16");
}

TEST(Transfer, HostToHostRoundTripsEveryDtype) {
  const int64_t n = 1000;
  Pair a = Pair::random({n}, 50), b = Pair::nan({10, 100});
  ops::transfer(b.bf(), a.bf());
  EXPECT_EQ(b.h, a.h);
  ops::transfer(b.f32(), a.f32());
  EXPECT_EQ(0, std::memcmp(a.f.data(), b.f.data(), n * sizeof(float)));
  auto ints = random_tokens(n, 1 << 30, 51);
  std::vector<int32_t> back(n);
  ops::transfer(Tensor::i32(back.data(), {n}), Tensor::i32(ints.data(), {n}));
  EXPECT_EQ(back, ints);
}

TEST(Transfer, RejectsMismatchesAndMissingCuda) {
  test::use_threadsafe_death_tests();
  Pair a = Pair::random({8}, 52);
  EXPECT_DEATH(ops::transfer(a.bf(), a.f32()), "transfer: dtypes differ: dst bf16, src f32");
  EXPECT_DEATH(ops::transfer(Tensor::f32(a.f.data(), {4}), a.f32()),
               "transfer: dst expected 8 elements");
#ifndef WEFT_HAVE_CUDA
  Tensor on_gpu(a.f.data(), DType::F32, {8}, Device::CUDA);
  EXPECT_DEATH(ops::transfer(on_gpu, a.f32()), "transfer: CUDA tensor, but weft was built without CUDA");
#endif
}

}  // namespace
}  // namespace weft
