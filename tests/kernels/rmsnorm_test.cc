// RMSNorm: forward against the formula, dx/dw against finite differences,
// dw accumulation, aliasing, fp32 dispatch and shape errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/rmsnorm.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace weft {
namespace {

using test::expect_all_close;
using test::random_normal;

constexpr double kEps = 1e-5;

struct Case {
  int64_t N, C;
};

class RmsnormTest : public ::testing::TestWithParam<Case> {};

TEST_P(RmsnormTest, ForwardMatchesFormula) {
  const auto [N, C] = GetParam();
  auto x = random_normal(N * C, 1), w = random_normal(C, 2);
  std::vector<double> out(x.size()), rstd(N), want(x.size()), want_rstd(N);
  for (int64_t n = 0; n < N; ++n) {
    double ms = 0;
    for (int64_t c = 0; c < C; ++c) ms += x[n * C + c] * x[n * C + c] / C;
    want_rstd[n] = 1.0 / std::sqrt(ms + kEps);
    for (int64_t c = 0; c < C; ++c) want[n * C + c] = x[n * C + c] * want_rstd[n] * w[c];
  }
  cpu::rmsnorm_forward<double>(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
  expect_all_close("out", want, out, 1e-13, 1e-13);
  expect_all_close("rstd", want_rstd, rstd, 1e-13, 1e-13);

  auto xf = test::to_f32(x), wf = test::to_f32(w);
  std::vector<float> outf(x.size()), rstdf(N);
  ops::rmsnorm_forward(Tensor::f32(outf.data(), {N, C}), Tensor::f32(rstdf.data(), {N}),
                       Tensor::f32(xf.data(), {N, C}), Tensor::f32(wf.data(), {C}), kEps);
  expect_all_close("out f32", want, test::to_f64(outf), 1e-5, 1e-5);
  expect_all_close("rstd f32", want_rstd, test::to_f64(rstdf), 1e-5, 1e-5);
}

TEST_P(RmsnormTest, BackwardMatchesFiniteDifferencesAndAccumulatesDw) {
  const auto [N, C] = GetParam();
  auto x = random_normal(N * C, 3), w = random_normal(C, 4), r = random_normal(N * C, 5);
  std::vector<double> out(x.size()), rstd(N), dx(x.size(), 9.0), dw(C, 0.0);
  cpu::rmsnorm_forward<double>(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
  cpu::rmsnorm_backward<double>(dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(),
                                N, C);
  auto loss = [&] {
    std::vector<double> o(x.size()), s(N);
    cpu::rmsnorm_forward<double>(o.data(), s.data(), x.data(), w.data(), N, C, kEps);
    return test::weighted_sum(o, r);
  };
  test::expect_gradient("dx", x, dx, loss);
  test::expect_gradient("dw", w, dw, loss);

  // A second backward into the same dw doubles it; dx is overwritten, so it
  // may alias dout.
  auto dw_once = dw;
  auto dout = r;
  cpu::rmsnorm_backward<double>(dout.data(), dw.data(), dout.data(), x.data(), w.data(),
                                rstd.data(), N, C);
  for (auto& v : dw_once) v *= 2;
  expect_all_close("dw accumulated twice", dw_once, dw, 1e-14, 1e-14);
  expect_all_close("dx aliasing dout", dx, dout, 1e-14, 1e-14);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsnormTest,
                         ::testing::Values(Case{1, 2}, Case{7, 5}, Case{6, 130}, Case{3, 64}),
                         [](const auto& info) {
                           return "N" + std::to_string(info.param.N) + "C" +
                                  std::to_string(info.param.C);
                         });

TEST(RmsnormOps, AcceptsLeadingDimsAndRejectsBadShapes) {
  test::use_threadsafe_death_tests();
  std::vector<float> x(2 * 3 * 4, 1.0f), out(x.size()), w(4, 2.0f), rstd(6);
  ops::rmsnorm_forward(Tensor::f32(out.data(), {2, 3, 4}), Tensor::f32(rstd.data(), {2, 3}),
                       Tensor::f32(x.data(), {2, 3, 4}), Tensor::f32(w.data(), {4}), 0.0f);
  for (float v : out) EXPECT_FLOAT_EQ(v, 2.0f);
  EXPECT_DEATH(ops::rmsnorm_forward(Tensor::f32(out.data(), {6, 4}), Tensor::f32(rstd.data(), {6}),
                                    Tensor::f32(x.data(), {6, 4}), Tensor::f32(w.data(), {3}), 0.0f),
               "rmsnorm_forward: w expected shape \\[4\\], got \\[3\\]");
  EXPECT_DEATH(ops::rmsnorm_forward(Tensor::f32(out.data(), {6, 4}), Tensor::f32(rstd.data(), {5}),
                                    Tensor::f32(x.data(), {6, 4}), Tensor::f32(w.data(), {4}), 0.0f),
               "rmsnorm_forward: rstd expected 6 elements .*got shape \\[5\\]");
}

TEST(RmsnormOps, AccumulateAddsTheGradientAsTwoOpsWould) {
  test::use_threadsafe_death_tests();
  const int64_t N = 5, C = 12;
  const auto x = random_normal(N * C, 31), w = random_normal(C, 32), dout = random_normal(N * C, 33);
  const auto prev = random_normal(N * C, 34);
  auto f = [](std::vector<double> v) { return std::vector<float>(v.begin(), v.end()); };
  std::vector<float> xf = f(x), wf = f(w), doutf = f(dout), rstd(N), out(N * C);
  ops::rmsnorm_forward(Tensor::f32(out.data(), {N, C}), Tensor::f32(rstd.data(), {N}),
                       Tensor::f32(xf.data(), {N, C}), Tensor::f32(wf.data(), {C}), 1e-5f);
  // Two ops: dx into a scratch, then the sum.
  std::vector<float> tmp(N * C), want = f(prev), dw_want(C, 0.0f);
  ops::rmsnorm_backward(Tensor::f32(tmp.data(), {N, C}), Tensor::f32(dw_want.data(), {C}),
                        Tensor::f32(doutf.data(), {N, C}), Tensor::f32(xf.data(), {N, C}),
                        Tensor::f32(wf.data(), {C}), Tensor::f32(rstd.data(), {N}));
  ops::add_acc(Tensor::f32(want.data(), {N, C}), Tensor::f32(tmp.data(), {N, C}));
  // One op, accumulating.
  std::vector<float> got = f(prev), dw_got(C, 0.0f);
  ops::rmsnorm_backward(Tensor::f32(got.data(), {N, C}), Tensor::f32(dw_got.data(), {C}),
                        Tensor::f32(doutf.data(), {N, C}), Tensor::f32(xf.data(), {N, C}),
                        Tensor::f32(wf.data(), {C}), Tensor::f32(rstd.data(), {N}), true);
  EXPECT_EQ(got, want);
  EXPECT_EQ(dw_got, dw_want);
  EXPECT_DEATH(ops::rmsnorm_backward(Tensor::f32(doutf.data(), {N, C}), Tensor::f32(dw_got.data(), {C}),
                                     Tensor::f32(doutf.data(), {N, C}), Tensor::f32(xf.data(), {N, C}),
                                     Tensor::f32(wf.data(), {C}), Tensor::f32(rstd.data(), {N}), true),
               "rmsnorm_backward: accumulating dx must not alias dout or x");
}

}  // namespace
}  // namespace weft
