// RoPE: forward against the literal Hugging Face formula
// x * cos + rotate_half(x) * sin, backward against finite differences,
// in-place use, fp32 dispatch and the even-D check.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/rope.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace weft {
namespace {

using test::expect_all_close;
using test::random_normal;

struct Dims {
  int64_t B, T, H, D;
  int64_t numel() const { return B * T * H * D; }
};

// Written the way transformers' apply_rotary_pos_emb reads: build cos/sin for
// all D columns (emb = cat(freqs, freqs)) and rotate_half = cat(-x2, x1).
std::vector<double> hf_rope(const Dims& d, const std::vector<double>& x, double theta) {
  std::vector<double> out(x.size());
  const int64_t half = d.D / 2;
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t t = 0; t < d.T; ++t)
      for (int64_t h = 0; h < d.H; ++h) {
        const double* xr = x.data() + ((b * d.T + t) * d.H + h) * d.D;
        std::vector<double> rot(d.D), cos_(d.D), sin_(d.D);
        for (int64_t j = 0; j < half; ++j) {
          rot[j] = -xr[j + half];
          rot[j + half] = xr[j];
        }
        for (int64_t j = 0; j < d.D; ++j) {
          const double inv_freq = 1.0 / std::pow(theta, static_cast<double>(2 * (j % half)) / d.D);
          cos_[j] = std::cos(t * inv_freq);
          sin_[j] = std::sin(t * inv_freq);
        }
        for (int64_t j = 0; j < d.D; ++j)
          out[((b * d.T + t) * d.H + h) * d.D + j] = xr[j] * cos_[j] + rot[j] * sin_[j];
      }
  return out;
}

class RopeTest : public ::testing::TestWithParam<Dims> {};

TEST_P(RopeTest, ForwardMatchesRotateHalfFormula) {
  const Dims d = GetParam();
  const double theta = 10000.0;
  auto x = random_normal(d.numel(), 1);
  auto want = hf_rope(d, x, theta);
  std::vector<double> out(x.size(), NAN);
  cpu::rope_forward<double>(out.data(), x.data(), d.B, d.T, d.H, d.D, theta);
  expect_all_close("out", want, out, 1e-13, 1e-13);

  // In place through the fp32 dispatch.
  auto xf = test::to_f32(x);
  Tensor t = Tensor::f32(xf.data(), {d.B, d.T, d.H, d.D});
  ops::rope_forward(t, t, static_cast<float>(theta));
  expect_all_close("out f32 in place", want, test::to_f64(xf), 1e-5, 1e-5);
}

TEST_P(RopeTest, BackwardMatchesFiniteDifferencesInPlace) {
  const Dims d = GetParam();
  const double theta = 500.0;
  auto x = random_normal(d.numel(), 2), r = random_normal(d.numel(), 3);
  auto dx = r;  // dx aliases dout
  cpu::rope_backward<double>(dx.data(), dx.data(), d.B, d.T, d.H, d.D, theta);
  auto loss = [&] {
    std::vector<double> o(x.size());
    cpu::rope_forward<double>(o.data(), x.data(), d.B, d.T, d.H, d.D, theta);
    return test::weighted_sum(o, r);
  };
  test::expect_gradient("dx", x, dx, loss);

  auto rf = test::to_f32(r);
  Tensor t = Tensor::f32(rf.data(), {d.B, d.T, d.H, d.D});
  ops::rope_backward(t, t, static_cast<float>(theta));
  expect_all_close("dx f32", dx, test::to_f64(rf), 1e-5, 1e-5);
}

// A sequence-parallel rank rotates its slice with the slice's first global
// position: the result is the same rows of the whole sequence's rotation, in
// forward and backward.
TEST_P(RopeTest, SliceWithFirstPositionMatchesWholeSequence) {
  const Dims d = GetParam();
  if (d.T < 2) GTEST_SKIP() << "needs two slices";
  const double theta = 10000.0;
  const int64_t t0 = d.T / 2, rows = d.T - t0, row = d.H * d.D;
  auto x = random_normal(d.numel(), 4);
  for (int backward = 0; backward < 2; ++backward) {
    std::vector<double> whole(x.size());
    (backward ? cpu::rope_backward<double> : cpu::rope_forward<double>)(whole.data(), x.data(), d.B, d.T, d.H, d.D,
                                                                         theta, 0);
    std::vector<float> slice, want;
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t i = (b * d.T + t0) * row; i < (b + 1) * d.T * row; ++i) {
        slice.push_back(static_cast<float>(x[i]));
        want.push_back(static_cast<float>(whole[i]));
      }
    Tensor t = Tensor::f32(slice.data(), {d.B, rows, d.H, d.D});
    backward ? ops::rope_backward(t, t, static_cast<float>(theta), t0)
             : ops::rope_forward(t, t, static_cast<float>(theta), t0);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(slice[i], want[i], 1e-5) << (backward ? "backward " : "forward ") << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeTest,
                         ::testing::Values(Dims{2, 7, 3, 8}, Dims{1, 1, 2, 4}, Dims{1, 9, 1, 2},
                                           Dims{2, 5, 2, 6}),
                         [](const auto& info) {
                           const Dims& d = info.param;
                           return "B" + std::to_string(d.B) + "T" + std::to_string(d.T) + "H" +
                                  std::to_string(d.H) + "D" + std::to_string(d.D);
                         });

TEST(RopeOps, RejectsOddHeadDimAndWrongRank) {
  test::use_threadsafe_death_tests();
  std::vector<float> buf(64);
  Tensor odd = Tensor::f32(buf.data(), {1, 2, 2, 3});
  EXPECT_DEATH(ops::rope_forward(odd, odd, 10000.0f),
               "rope_forward: head dim D must be even, got shape \\[1, 2, 2, 3\\]");
  Tensor flat = Tensor::f32(buf.data(), {4, 8});
  EXPECT_DEATH(ops::rope_backward(flat, flat, 10000.0f),
               "rope_backward: input expected rank 4, got shape \\[4, 8\\]");
}

}  // namespace
}  // namespace weft
