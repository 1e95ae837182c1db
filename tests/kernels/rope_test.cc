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

// transformers' _compute_llama3_parameters, statement by statement over the
// whole inv_freq vector (torch.where as a loop).
std::vector<double> hf_llama3_inv_freq(int64_t D, double base, double factor, double low_freq_factor,
                                       double high_freq_factor, double old_context_len) {
  std::vector<double> inv_freq(D / 2);
  for (int64_t i = 0; i < D / 2; ++i) inv_freq[i] = 1.0 / std::pow(base, static_cast<double>(2 * i) / D);
  const double low_freq_wavelen = old_context_len / low_freq_factor;
  const double high_freq_wavelen = old_context_len / high_freq_factor;
  std::vector<double> out(D / 2);
  for (int64_t i = 0; i < D / 2; ++i) {
    const double wavelen = 2 * M_PI / inv_freq[i];
    double inv_freq_llama = wavelen > low_freq_wavelen ? inv_freq[i] / factor : inv_freq[i];
    const double smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
    const double smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama;
    const bool is_medium_freq = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    out[i] = is_medium_freq ? smoothed_inv_freq : inv_freq_llama;
  }
  return out;
}

// Written the way transformers' apply_rotary_pos_emb reads: build cos/sin for
// all D columns (emb = cat(freqs, freqs)) and rotate_half = cat(-x2, x1).
// inv_freq empty: the unscaled theta^(-2i/D).
std::vector<double> hf_rope(const Dims& d, const std::vector<double>& x, double theta,
                            std::vector<double> inv_freq = {}) {
  if (inv_freq.empty())
    for (int64_t i = 0; i < d.D / 2; ++i) inv_freq.push_back(1.0 / std::pow(theta, static_cast<double>(2 * i) / d.D));
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
          cos_[j] = std::cos(t * inv_freq[j % half]);
          sin_[j] = std::sin(t * inv_freq[j % half]);
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
                                                                         theta, 0, nullptr);
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

// Llama 3.1's parameters (theta 500000, D 128, factor 8, bands 1 and 4 of
// 8192 positions): every band occurs, and each channel's frequency is
// transformers' to the last bits.
TEST(RopeLlama3, InvFreqIsTransformersFormulaInEveryBand) {
  const Rope r = Rope::llama3(500000, 8, 1, 4, 8192);
  const int64_t D = 128;
  const std::vector<double> want = hf_llama3_inv_freq(D, 500000, 8, 1, 4, 8192);
  int kept = 0, divided = 0, smoothed = 0;
  for (int64_t i = 0; i < D / 2; ++i) {
    const double plain = rope_inv_freq(Rope(500000), i, D), scaled = rope_inv_freq(r, i, D);
    EXPECT_NEAR(scaled, want[i], 1e-15 * want[i]) << "channel pair " << i;
    if (scaled == plain) ++kept;
    else if (std::fabs(scaled - plain / 8) <= 1e-15 * plain) ++divided;
    else {
      ++smoothed;
      EXPECT_TRUE(scaled > plain / 8 && scaled < plain) << i;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0);
  // The first pair (wavelength 2 pi) is kept; the last, the longest
  // wavelength, is divided by the factor.
  EXPECT_DOUBLE_EQ(rope_inv_freq(r, 0, D), 1.0);
  EXPECT_NEAR(rope_inv_freq(r, 63, D), std::pow(500000.0, -126.0 / 128) / 8, 1e-20);
}

// The kernel rotates by the scaled frequencies: the literal HF rotation with
// transformers' llama3 inv_freq, in double and through the f32 dispatch, at
// a sequence-parallel slice's offset too; and it is not unscaled RoPE.
TEST(RopeLlama3, KernelRotatesByScaledFrequencies) {
  // D 16 with original_max_position 16 puts the bands inside these channels.
  const Dims d{2, 9, 3, 16};
  const double theta = 10000, factor = 32, lo = 1, hi = 4, orig = 16;
  const Rope r = Rope::llama3(theta, factor, lo, hi, orig);
  auto x = random_normal(d.numel(), 7);
  auto want = hf_rope(d, x, theta, hf_llama3_inv_freq(d.D, theta, factor, lo, hi, orig));
  std::vector<double> out(x.size(), NAN);
  cpu::rope_forward<double>(out.data(), x.data(), d.B, d.T, d.H, d.D, r);
  expect_all_close("out", want, out, 1e-13, 1e-13);
  auto unscaled = hf_rope(d, x, theta);
  double diff = 0;
  for (size_t i = 0; i < out.size(); ++i) diff = std::max(diff, std::fabs(out[i] - unscaled[i]));
  EXPECT_GT(diff, 0.1) << "llama3 scaling changed nothing at these positions";

  auto xf = test::to_f32(x);
  Tensor t = Tensor::f32(xf.data(), {d.B, d.T, d.H, d.D});
  ops::rope_forward(t, t, r);
  expect_all_close("out f32 in place", want, test::to_f64(xf), 1e-5, 1e-5);
  // Backward is the inverse rotation.
  ops::rope_backward(t, t, r);
  expect_all_close("backward undoes forward", x, test::to_f64(xf), 1e-5, 1e-5);

  // Slice [4, 9) at its first global position.
  const int64_t t0 = 4, row = d.H * d.D;
  std::vector<float> slice, want_slice;
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t i = (b * d.T + t0) * row; i < (b + 1) * d.T * row; ++i) {
      slice.push_back(static_cast<float>(x[i]));
      want_slice.push_back(static_cast<float>(want[i]));
    }
  Tensor s = Tensor::f32(slice.data(), {d.B, d.T - t0, d.H, d.D});
  ops::rope_forward(s, s, r, t0);
  for (size_t i = 0; i < slice.size(); ++i) ASSERT_NEAR(slice[i], want_slice[i], 1e-5) << i;
}

// Packed documents: per-row positions (restarting at each document) rotate
// each row by its own position, forward and backward.
TEST(RopeDocuments, PositionsRestartPerDocument) {
  const Dims d{2, 7, 2, 6};
  const Rope r = Rope::llama3(10000, 8, 1, 4, 8);
  auto x = random_normal(d.numel(), 31);
  // Row 0: documents of 3 and 4 positions; row 1: one of 7.
  std::vector<int32_t> pos = {0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6};
  const int64_t row = d.H * d.D;
  for (int backward = 0; backward < 2; ++backward) {
    auto xf = test::to_f32(x);
    Tensor t = Tensor::f32(xf.data(), {d.B, d.T, d.H, d.D});
    Tensor p = Tensor::i32(pos.data(), {d.B, d.T});
    backward ? ops::rope_backward(t, t, r, 0, &p) : ops::rope_forward(t, t, r, 0, &p);
    for (int64_t bt = 0; bt < d.B * d.T; ++bt) {
      std::vector<double> one(x.begin() + bt * row, x.begin() + (bt + 1) * row), want(row);
      // Row bt alone as one position of a sequence starting at its position.
      (backward ? cpu::rope_backward<double> : cpu::rope_forward<double>)(want.data(), one.data(), 1, 1, d.H, d.D, r,
                                                                         pos[bt], nullptr);
      for (int64_t j = 0; j < row; ++j) ASSERT_NEAR(xf[bt * row + j], want[j], 1e-5) << bt << " " << j;
    }
  }
}

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
