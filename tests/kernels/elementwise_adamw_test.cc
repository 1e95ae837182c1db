// Elementwise helpers and AdamW: exact results, double accumulation of
// sum_squares, and AdamW against a two-step example worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace weft {
namespace {

TEST(Elementwise, FillCopyAddScale) {
  const int64_t n = 40000;  // above the parallel threshold
  std::vector<float> x(n), y(n);
  ops::fill(Tensor::f32(x.data(), {n}), 1.5f);
  ops::copy(Tensor::f32(y.data(), {200, 200}), Tensor::f32(x.data(), {n}));
  ops::add_acc(Tensor::f32(y.data(), {n}), Tensor::f32(x.data(), {n}));
  ops::scale(Tensor::f32(y.data(), {n}), -2.0f);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], -6.0f) << i;
  std::vector<int32_t> a = {1, -2, 3}, b(3);
  ops::copy(Tensor::i32(b.data(), {3}), Tensor::i32(a.data(), {3}));
  EXPECT_EQ(a, b);
}

// The Ulysses all-to-all's packing: [A, C, R] -> [C, A, R], rows as bytes.
TEST(Elementwise, SwapLeadingDimsMovesRowsOfAnyDtype) {
  const int64_t A = 3, C = 5, R = 4;
  std::vector<float> in(A * C * R), out(A * C * R, -1.0f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  ops::swap_leading_dims(Tensor::f32(out.data(), {C, A, R}), Tensor::f32(in.data(), {A, C, R}), A, C);
  for (int64_t a = 0; a < A; ++a)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t r = 0; r < R; ++r) ASSERT_EQ(out[(c * A + a) * R + r], in[(a * C + c) * R + r]);
  // Swapping back restores the input; bf16 rows move as they are.
  std::vector<uint16_t> h(A * C * R), g(A * C * R), back(A * C * R);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(0x3f80 + i);
  ops::swap_leading_dims(Tensor(g.data(), DType::BF16, {A * C * R}), Tensor(h.data(), DType::BF16, {A * C * R}), A, C);
  ops::swap_leading_dims(Tensor(back.data(), DType::BF16, {A * C * R}), Tensor(g.data(), DType::BF16, {A * C * R}), C,
                         A);
  EXPECT_EQ(back, h);
  EXPECT_EQ(g[1 * R], h[1 * C * R]) << "out[0, 1] is in[1, 0]";
  EXPECT_DEATH(ops::swap_leading_dims(Tensor::f32(out.data(), {60}), Tensor::f32(in.data(), {60}), 7, 2),
               "is not \\[7, 2, R\\]");
  EXPECT_DEATH(ops::swap_leading_dims(Tensor(g.data(), DType::BF16, {60}), Tensor::f32(in.data(), {60}), A, C),
               "dtypes differ");
}

TEST(Elementwise, SumSquaresAccumulatesInDouble) {
  // 2^24 + n ones: a float accumulator would stall at 2^24.
  const int64_t n = 1 << 20;
  std::vector<float> x(n, 1.0f);
  x[0] = 4096.0f;  // 4096^2 = 2^24
  EXPECT_EQ(ops::sum_squares(Tensor::f32(x.data(), {n})), 16777216.0 + (n - 1));
  auto d = test::random_normal(1001, 1);
  double want = 0;
  for (double v : d) want += v * v;
  EXPECT_NEAR(cpu::sum_squares<double>(d.data(), 1001), want, 1e-12 * want);
  EXPECT_EQ(cpu::sum_squares<double>(d.data(), 0), 0.0);
}

TEST(Elementwise, RejectsMismatchedSizes) {
  test::use_threadsafe_death_tests();
  std::vector<float> x(8);
  std::vector<int32_t> i(8);
  EXPECT_DEATH(ops::add_acc(Tensor::f32(x.data(), {8}), Tensor::f32(x.data(), {2, 3})),
               "add_acc: y_acc expected 6 elements \\(x is \\[2, 3\\]\\), got shape \\[8\\]");
  EXPECT_DEATH(ops::copy(Tensor::f32(x.data(), {8}), Tensor::i32(i.data(), {8})),
               "copy: dtypes differ: dst f32, src i32");
}

// One element, lr 0.1, betas (0.9, 0.999), eps 1e-8, wd 0.01, p0 = 1, grads 0.5 then -0.25.
// step 1: m = 0.05, v = 0.00025, m^ = 0.5, v^ = 0.25,
//         p = 1 - 0.1 (0.5 / (0.5 + 1e-8) + 0.01 * 1) = 0.899000002
// step 2: m = 0.045 - 0.025 = 0.02, v = 0.00024975 + 0.0000625 = 0.00031225,
//         m^ = 0.02 / 0.19, v^ = 0.00031225 / 0.001999,
//         p = 0.899000002 - 0.1 (m^ / (sqrt(v^) + 1e-8) + 0.01 * 0.899000002) = 0.8714672987058464
TEST(AdamW, MatchesHandComputedTwoSteps) {
  double p = 1.0, m = 0.0, v = 0.0;
  const double g1 = 0.5, g2 = -0.25;
  cpu::adamw_update<double>(&p, &g1, &m, &v, 1, 0.1, 0.9, 0.999, 1e-8, 0.01, 1);
  EXPECT_NEAR(m, 0.05, 1e-15);
  EXPECT_NEAR(v, 0.00025, 1e-15);
  EXPECT_NEAR(p, 0.899000002, 1e-12);
  cpu::adamw_update<double>(&p, &g2, &m, &v, 1, 0.1, 0.9, 0.999, 1e-8, 0.01, 2);
  EXPECT_NEAR(m, 0.02, 1e-15);
  EXPECT_NEAR(v, 0.00031225, 1e-15);
  EXPECT_NEAR(p, 0.8714672987058464, 1e-12);

  // The fp32 dispatch over many elements gives the same trajectory.
  const int64_t n = 20000;
  std::vector<float> pf(n, 1.0f), mf(n), vf(n), gf(n, 0.5f);
  ops::AdamWParams h{0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1};
  Tensor tp = Tensor::f32(pf.data(), {n}), tg = Tensor::f32(gf.data(), {n});
  ops::adamw_update(tp, tg, Tensor::f32(mf.data(), {n}), Tensor::f32(vf.data(), {n}), h);
  std::fill(gf.begin(), gf.end(), -0.25f);
  h.step = 2;
  ops::adamw_update(tp, tg, Tensor::f32(mf.data(), {n}), Tensor::f32(vf.data(), {n}), h);
  for (int64_t i = 0; i < n; i += 997) ASSERT_NEAR(pf[i], 0.8714672987058464, 2e-6) << i;
}

TEST(AdamW, FirstStepMovesEachWeightByLrTimesSignOfGradient) {
  auto g = test::random_normal(33, 2);
  std::vector<double> p(33, 0.25), m(33, 0.0), v(33, 0.0);
  cpu::adamw_update<double>(p.data(), g.data(), m.data(), v.data(), 33, 1e-3, 0.9, 0.95, 1e-12, 0.0, 1);
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(p[i], 0.25 - 1e-3 * (g[i] > 0 ? 1 : -1), 1e-12);
}

TEST(AdamW, RejectsStepZeroAndMismatchedState) {
  test::use_threadsafe_death_tests();
  std::vector<float> a(4), b(3);
  ops::AdamWParams h{0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 0};
  Tensor t = Tensor::f32(a.data(), {4});
  EXPECT_DEATH(ops::adamw_update(t, t, t, t, h), "adamw_update: step must be >= 1, got 0");
  h.step = 1;
  EXPECT_DEATH(ops::adamw_update(t, t, Tensor::f32(b.data(), {3}), t, h),
               "adamw_update: m expected 4 elements \\(param is \\[4\\]\\), got shape \\[3\\]");
}

}  // namespace
}  // namespace weft
