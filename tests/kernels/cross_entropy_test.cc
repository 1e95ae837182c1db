// Cross-entropy: losses against a naive log-softmax, the log(V) of uniform
// logits, stability for huge logits, backward against finite differences
// (also in place) and target/shape errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cross_entropy.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace weft {
namespace {

using test::expect_all_close;
using test::random_normal;

std::vector<double> naive_losses(const std::vector<double>& logits,
                                 const std::vector<int32_t>& targets, int64_t N, int64_t V) {
  std::vector<double> out(N);
  for (int64_t n = 0; n < N; ++n) {
    double z = 0;
    for (int64_t j = 0; j < V; ++j) z += std::exp(logits[n * V + j]);
    out[n] = -(logits[n * V + targets[n]] - std::log(z));  // -log_softmax[target]
  }
  return out;
}

TEST(CrossEntropy, ForwardMatchesNaiveLogSoftmax) {
  for (auto [N, V] : {std::pair<int64_t, int64_t>{7, 13}, {1, 2}, {5, 300}}) {
    auto logits = random_normal(N * V, 1, 2.0);
    auto targets = test::random_tokens(N, static_cast<int32_t>(V), 2);
    auto want = naive_losses(logits, targets, N, V);
    std::vector<double> losses(N);
    double mean = cpu::cross_entropy_forward<double>(losses.data(), logits.data(), targets.data(), N, V);
    expect_all_close("losses", want, losses, 1e-13, 1e-13);
    double want_mean = 0;
    for (double l : want) want_mean += l / N;
    EXPECT_NEAR(mean, want_mean, 1e-13);

    auto lf = test::to_f32(logits);
    std::vector<float> lossf(N);
    double meanf = ops::cross_entropy_forward(Tensor::f32(lossf.data(), {N}),
                                              Tensor::f32(lf.data(), {N, V}),
                                              Tensor::i32(targets.data(), {N}));
    expect_all_close("losses f32", want, test::to_f64(lossf), 1e-5, 1e-5);
    EXPECT_NEAR(meanf, want_mean, 1e-5 * std::abs(want_mean));
  }
}

TEST(CrossEntropy, UniformLogitsGiveLogVAndHugeLogitsStayFinite) {
  const int64_t N = 3, V = 50;
  std::vector<float> logits(N * V, 1234.5f), losses(N);
  std::vector<int32_t> targets = {0, 17, 49};
  double mean = ops::cross_entropy_forward(Tensor::f32(losses.data(), {N}),
                                           Tensor::f32(logits.data(), {N, V}),
                                           Tensor::i32(targets.data(), {N}));
  EXPECT_NEAR(mean, std::log(50.0), 1e-6);
  for (float l : losses) EXPECT_NEAR(l, std::log(50.0), 1e-6);
  // Without the max subtraction exp(1234.5) would overflow to inf.
  logits[5] = 3000.0f;
  ops::cross_entropy_backward(Tensor::f32(logits.data(), {N, V}), Tensor::f32(logits.data(), {N, V}),
                              Tensor::i32(targets.data(), {N}), 1.0f);
  EXPECT_NEAR(logits[5], 1.0f, 1e-6);  // all the mass on the huge logit
  EXPECT_NEAR(logits[0], -1.0f, 1e-6);  // target 0, probability 0
  for (float g : logits) EXPECT_TRUE(std::isfinite(g));
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferencesInPlace) {
  const int64_t N = 6, V = 11;
  const double scale = 0.37;  // dL/dloss_n, as for a mean over a micro-batch
  auto logits = random_normal(N * V, 3, 1.5);
  auto targets = test::random_tokens(N, V, 4);
  auto dlogits = logits;
  cpu::cross_entropy_backward<double>(dlogits.data(), dlogits.data(), targets.data(), N, V, scale);
  auto loss = [&] {
    std::vector<double> l(N);
    return scale * N * cpu::cross_entropy_forward<double>(l.data(), logits.data(), targets.data(), N, V);
  };
  test::expect_gradient("dlogits", logits, dlogits, loss);

  auto lf = test::to_f32(logits);
  std::vector<float> df(N * V);
  ops::cross_entropy_backward(Tensor::f32(df.data(), {2, 3, V}), Tensor::f32(lf.data(), {2, 3, V}),
                              Tensor::i32(targets.data(), {2, 3}), static_cast<float>(scale));
  expect_all_close("dlogits f32", dlogits, test::to_f64(df), 1e-5, 1e-6);
}

TEST(CrossEntropy, RejectsBadTargets) {
  test::use_threadsafe_death_tests();
  std::vector<float> logits(12), losses(3);
  std::vector<int32_t> targets = {0, 4, 1};
  EXPECT_DEATH(ops::cross_entropy_forward(Tensor::f32(losses.data(), {3}),
                                          Tensor::f32(logits.data(), {3, 4}),
                                          Tensor::i32(targets.data(), {3})),
               "cross_entropy_forward: target 4 at row 1 is outside \\[0, 4\\)");
  EXPECT_DEATH(ops::cross_entropy_backward(Tensor::f32(logits.data(), {3, 4}),
                                           Tensor::f32(logits.data(), {3, 4}),
                                           Tensor::i32(targets.data(), {2}), 1.0f),
               "cross_entropy_backward: targets expected 3 elements .*got shape \\[2\\]");
  std::vector<int32_t> good = {0, 3, 1};
  const Tensor short_losses = Tensor::f32(losses.data(), {2});
  EXPECT_DEATH(ops::cross_entropy_backward(Tensor::f32(logits.data(), {3, 4}),
                                           Tensor::f32(logits.data(), {3, 4}),
                                           Tensor::i32(good.data(), {3}), 1.0f, &short_losses),
               "cross_entropy_backward: losses expected 3 elements .*got shape \\[2\\]");
}

// The LM head's chunked path: losses chunk by chunk, then one mean_loss.
// Same losses as the forward's, the mean within f32 rounding of each loss
// (mean_loss sums the stored f32 losses; the forward the double ones).
TEST(CrossEntropy, LossesInChunksThenTheirMeanMatchTheForward) {
  const int64_t N = 10, V = 37;
  const auto l = random_normal(N * V, 43, 2.0);
  std::vector<float> logits(l.begin(), l.end()), whole(N), chunked(N);
  auto targets = test::random_tokens(N, static_cast<int32_t>(V), 44);
  const double mean = ops::cross_entropy_forward(Tensor::f32(whole.data(), {N}),
                                                 Tensor::f32(logits.data(), {N, V}),
                                                 Tensor::i32(targets.data(), {N}));
  for (int64_t r0 = 0; r0 < N; r0 += 4) {
    const int64_t r1 = std::min(N, r0 + 4);
    ops::cross_entropy_losses(Tensor::f32(chunked.data() + r0, {r1 - r0}),
                              Tensor::f32(logits.data() + r0 * V, {r1 - r0, V}),
                              Tensor::i32(targets.data() + r0, {r1 - r0}));
  }
  EXPECT_EQ(whole, chunked);
  double want = 0;
  for (float x : chunked) want += x;
  EXPECT_EQ(ops::mean_loss(Tensor::f32(chunked.data(), {N})), want / N);
  EXPECT_NEAR(ops::mean_loss(Tensor::f32(chunked.data(), {N})), mean, 1e-7 * mean);
  EXPECT_EQ(ops::mean_loss(Tensor::f32(chunked.data(), {0})), 0.0);

  test::use_threadsafe_death_tests();
  targets[7] = static_cast<int32_t>(V);
  EXPECT_DEATH(ops::cross_entropy_losses(Tensor::f32(chunked.data(), {N}), Tensor::f32(logits.data(), {N, V}),
                                         Tensor::i32(targets.data(), {N})),
               "cross_entropy_losses: target 37 at row 7 is outside \\[0, 37\\)");
  std::vector<uint16_t> half(N);
  EXPECT_DEATH(ops::mean_loss(Tensor(half.data(), DType::BF16, {N})),
               "mean_loss: losses expected dtype f32, got bf16");
}

TEST(CrossEntropy, BackwardWithTheForwardsLossesMatchesWithout) {
  const int64_t N = 4, V = 9;
  const auto l = random_normal(N * V, 41);
  std::vector<float> logits(l.begin(), l.end()), losses(N), a(N * V), b(N * V);
  std::vector<int32_t> targets = {0, 8, 3, 5};
  ops::cross_entropy_forward(Tensor::f32(losses.data(), {N}), Tensor::f32(logits.data(), {N, V}),
                             Tensor::i32(targets.data(), {N}));
  ops::cross_entropy_backward(Tensor::f32(a.data(), {N, V}), Tensor::f32(logits.data(), {N, V}),
                              Tensor::i32(targets.data(), {N}), 0.25f);
  const Tensor loss_t = Tensor::f32(losses.data(), {N});
  ops::cross_entropy_backward(Tensor::f32(b.data(), {N, V}), Tensor::f32(logits.data(), {N, V}),
                              Tensor::i32(targets.data(), {N}), 0.25f, &loss_t);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace weft
