// The vectorised float exp behind softmax, cross-entropy and attention:
// accuracy against libm over the whole finite range, the edges, and that
// every length (tails included) and in-place use give the same values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/vec_exp.h"

namespace weft {
namespace {

TEST(VecExp, WithinTwoUlpOfLibmAcrossTheRange) {
  std::vector<float> x;
  for (float v = -87.0f; v < 88.7f; v += 0.00731f) x.push_back(v);
  std::vector<float> y(x.size());
  cpu::exp_shifted_sum(y.data(), x.data(), static_cast<int64_t>(x.size()), 0.0f);
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double ref = std::exp(static_cast<double>(x[i]));
    worst = std::max(worst, std::fabs(y[i] - ref) / ref);
  }
  EXPECT_LT(worst, 2 * std::numeric_limits<float>::epsilon()) << "max relative error";

  // The sum (meant for max-shifted inputs, terms <= 1) against a double sum.
  std::vector<float> z(50001);
  for (size_t i = 0; i < z.size(); ++i) z[i] = -20.0f * static_cast<float>(i) / 50000.0f;
  double ref_sum = 0;
  for (float v : z) ref_sum += std::exp(static_cast<double>(v));
  EXPECT_NEAR(cpu::sum_exp_shifted(z.data(), static_cast<int64_t>(z.size()), 0.0f), ref_sum,
              1e-6 * ref_sum);
}

TEST(VecExp, EdgesShiftAndNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {-1000.0f, -inf, 0.0f, 89.0f, NAN, 1.0f, -88.0f};
  std::vector<float> y(x.size());
  cpu::exp_shifted_sum(y.data(), x.data(), static_cast<int64_t>(x.size()), 0.0f);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 1.0f);
  EXPECT_EQ(y[3], inf);
  EXPECT_TRUE(std::isnan(y[4]));
  EXPECT_NEAR(y[5], std::exp(1.0), 3e-7 * std::exp(1.0));
  EXPECT_EQ(y[6], 0.0f);  // below the clamp: flushed to 0 (true value 6e-39)
  // The shift is subtracted before exp: exp(3 - 3) = 1.
  float three = 3.0f, out;
  EXPECT_EQ(cpu::exp_shifted_sum(&out, &three, 1, 3.0f), 1.0);
  EXPECT_EQ(out, 1.0f);
}

TEST(VecExp, EveryLengthAndInPlaceAgree) {
  std::vector<float> x(150);
  for (size_t i = 0; i < x.size(); ++i) x[i] = -0.05f * static_cast<float>(i * 37 % 101);
  std::vector<float> full(x.size());
  cpu::exp_shifted_sum(full.data(), x.data(), static_cast<int64_t>(x.size()), 0.5f);
  for (int64_t n = 1; n <= 150; n += (n < 10 ? 1 : 13)) {
    std::vector<float> y(x.begin(), x.begin() + n);
    const double s = cpu::exp_shifted_sum(y.data(), y.data(), n, 0.5f);
    double ref = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(y[i], full[i]) << "n=" << n << " i=" << i;
      ref += full[i];
    }
    EXPECT_NEAR(s, ref, 1e-6 * ref) << n;
    EXPECT_NEAR(cpu::sum_exp_shifted(x.data(), n, 0.5f), s, 0.0) << n;
  }
}

}  // namespace
}  // namespace weft
