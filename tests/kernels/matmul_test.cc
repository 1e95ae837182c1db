// matmul: every transpose combination against a triple loop, the gradients
// (computed with matmul itself, as model code does) against finite
// differences, beta accumulation, leading-dim flattening and shape errors.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace weft {
namespace {

using test::expect_all_close;
using test::random_normal;

// c = alpha op(a) op(b) + beta c0, a stored [M,K] or [K,M], b [K,N] or [N,K].
std::vector<double> naive(const std::vector<double>& a, const std::vector<double>& b,
                          const std::vector<double>& c0, int64_t M, int64_t N, int64_t K, bool ta,
                          bool tb, double alpha, double beta) {
  std::vector<double> c(static_cast<size_t>(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t x = 0; x < K; ++x)
        s += (ta ? a[x * M + i] : a[i * K + x]) * (tb ? b[j * K + x] : b[x * N + j]);
      c[i * N + j] = alpha * s + beta * c0[i * N + j];
    }
  return c;
}

class MatmulTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {
 protected:
  const int64_t M = 5, N = 7, K = 3;
  bool ta() const { return std::get<0>(GetParam()); }
  bool tb() const { return std::get<1>(GetParam()); }
};

TEST_P(MatmulTest, ForwardMatchesTripleLoop) {
  auto a = random_normal(M * K, 1), b = random_normal(K * N, 2), c0 = random_normal(M * N, 3);
  for (auto [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{0.7, 0.3}, std::pair{-2.0, 1.0}}) {
    auto want = naive(a, b, c0, M, N, K, ta(), tb(), alpha, beta);
    auto c = c0;
    cpu::matmul<double>(c.data(), a.data(), b.data(), M, N, K, ta(), tb(), alpha, beta);
    expect_all_close("double", want, c, 1e-13, 1e-13);

    auto af = test::to_f32(a), bf = test::to_f32(b), cf = test::to_f32(c0);
    ops::matmul(Tensor::f32(cf.data(), {M, N}), Tensor::f32(af.data(), ta() ? Shape{K, M} : Shape{M, K}),
                Tensor::f32(bf.data(), tb() ? Shape{N, K} : Shape{K, N}), ta(), tb(),
                static_cast<float>(alpha), static_cast<float>(beta));
    expect_all_close("f32 ops", want, test::to_f64(cf), 1e-5, 1e-5);
  }
}

// L = sum(R * (alpha op(a) op(b) + beta c0)). With G = alpha R:
//   d op(a) = G op(b)^T, d op(b) = op(a)^T G; a transposed operand gets the transpose.
TEST_P(MatmulTest, GradientsViaMatmulMatchFiniteDifferences) {
  const double alpha = 0.7, beta = 0.3;
  auto a = random_normal(M * K, 4), b = random_normal(K * N, 5), c0 = random_normal(M * N, 6),
       r = random_normal(M * N, 7);
  std::vector<double> da(a.size(), 0.0), db(b.size(), 0.0), dc0(c0.size(), 0.0);
  if (!ta())  // da [M,K] = alpha R op(b)^T;  op(b)^T is b^T (b [K,N]) or b (b [N,K])
    cpu::matmul<double>(da.data(), r.data(), b.data(), M, K, N, false, !tb(), alpha, 0.0);
  else  // da [K,M] = alpha op(b) R^T
    cpu::matmul<double>(da.data(), b.data(), r.data(), K, M, N, tb(), true, alpha, 0.0);
  if (!tb())  // db [K,N] = alpha op(a)^T R
    cpu::matmul<double>(db.data(), a.data(), r.data(), K, N, M, !ta(), false, alpha, 0.0);
  else  // db [N,K] = alpha R^T op(a)
    cpu::matmul<double>(db.data(), r.data(), a.data(), N, K, M, true, ta(), alpha, 0.0);
  for (size_t i = 0; i < r.size(); ++i) dc0[i] = beta * r[i];
  auto loss = [&] {
    auto c = c0;
    cpu::matmul<double>(c.data(), a.data(), b.data(), M, N, K, ta(), tb(), alpha, beta);
    return test::weighted_sum(c, r);
  };
  test::expect_gradient("da", a, da, loss);
  test::expect_gradient("db", b, db, loss);
  test::expect_gradient("dc0", c0, dc0, loss);
}

INSTANTIATE_TEST_SUITE_P(Transposes, MatmulTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "At" : "A") +
                                  (std::get<1>(info.param) ? "Bt" : "B");
                         });

TEST(Matmul, BetaOneAccumulatesWeightGradient) {
  // dW[N,K] += dY[B,T,N]^T X[B,T,K] twice, with rank-3 operands flattened by ops.
  const int64_t B = 2, T = 3, N = 4, K = 5;
  auto dy = test::to_f32(random_normal(B * T * N, 8)), x = test::to_f32(random_normal(B * T * K, 9));
  std::vector<float> once(N * K, 0.0f), twice(N * K, 0.0f);
  Tensor tdy = Tensor::f32(dy.data(), {B, T, N}), tx = Tensor::f32(x.data(), {B, T, K});
  ops::matmul(Tensor::f32(once.data(), {N, K}), tdy, tx, true, false, 1.0f, 1.0f);
  for (int i = 0; i < 2; ++i)
    ops::matmul(Tensor::f32(twice.data(), {N, K}), tdy, tx, true, false, 1.0f, 1.0f);
  std::vector<double> want(once.size());
  for (size_t i = 0; i < once.size(); ++i) want[i] = 2.0 * once[i];
  expect_all_close("accumulated", want, test::to_f64(twice), 1e-6, 1e-6);
  double nonzero = 0;
  for (float v : once) nonzero += std::abs(v);
  EXPECT_GT(nonzero, 0.0);
}

TEST(Matmul, SingleRowAndEmptyInnerDimension) {
  auto a = random_normal(1 * 9, 10), b = random_normal(9 * 11, 11), c0 = random_normal(11, 12);
  auto c = c0;
  cpu::matmul<double>(c.data(), a.data(), b.data(), 1, 11, 9, false, false, 1.0, 0.0);
  expect_all_close("M=1", naive(a, b, c0, 1, 11, 9, false, false, 1.0, 0.0), c, 1e-13, 1e-13);
  // K = 0: c = beta * c.
  c = c0;
  cpu::matmul<double>(c.data(), a.data(), b.data(), 1, 11, 0, false, false, 1.0, 0.5);
  std::vector<double> half(c0.size());
  for (size_t i = 0; i < c0.size(); ++i) half[i] = 0.5 * c0[i];
  expect_all_close("K=0", half, c, 0, 0);
}

TEST(Matmul, RejectsMismatchedShapes) {
  test::use_threadsafe_death_tests();
  std::vector<float> buf(256);
  Tensor a = Tensor::f32(buf.data(), {4, 3}), b = Tensor::f32(buf.data(), {5, 6});
  Tensor c = Tensor::f32(buf.data(), {4, 6});
  EXPECT_DEATH(ops::matmul(c, a, b, false, false),
               "matmul: inner dimensions differ: op\\(a\\) of \\[4, 3\\] has K = 3, op\\(b\\) of "
               "\\[5, 6\\] has K = 5");
  Tensor b_ok = Tensor::f32(buf.data(), {3, 6});
  Tensor c_bad = Tensor::f32(buf.data(), {4, 5});
  EXPECT_DEATH(ops::matmul(c_bad, a, b_ok, false, false),
               "matmul: c expected shape \\[4, 6\\].*got \\[4, 5\\]");
  std::vector<int32_t> ibuf(64);
  EXPECT_DEATH(ops::matmul(c, a, Tensor::i32(ibuf.data(), {3, 6}), false, false),
               "matmul: b expected dtype f32, got i32");
  Tensor on_gpu(buf.data(), DType::F32, {3, 6}, Device::CUDA);
  EXPECT_DEATH(ops::matmul(c, a, on_gpu, false, false),
               "matmul: operands on different devices \\(cpu and cuda\\)");
}

}  // namespace
}  // namespace weft
