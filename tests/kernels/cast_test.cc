// ops::cast (f32 <-> bf16, round to nearest even) and the mixed-precision
// AdamW update with an fp32 master copy.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"
#include "tensor/bf16.h"

namespace weft {
namespace {

float f32_of_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Cast, RoundsToNearestEvenAndRoundTrips) {
  // 1 + 2^-8 lies halfway between bf16 1 and 1 + 2^-7: ties go to even (1).
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6.
  std::vector<float> x = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -2.5f, 0.0f, -0.0f,
                          std::numeric_limits<float>::infinity(), f32_of_bits(0x3f80ffffu)};
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint16_t> h(n);
  std::vector<float> back(n);
  ops::cast(Tensor(h.data(), DType::BF16, {n}), Tensor::f32(x.data(), {n}));
  ops::cast(Tensor::f32(back.data(), {n}), Tensor(h.data(), DType::BF16, {n}));
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], 1.0f + 1.0f / 64);
  EXPECT_EQ(back[2], -2.5f);
  EXPECT_EQ(back[3], 0.0f);
  EXPECT_TRUE(std::signbit(back[4]));
  EXPECT_TRUE(std::isinf(back[5]));
  EXPECT_EQ(back[6], 1.0f + 1.0f / 128);  // 0x3f80ffff rounds up into the next bf16
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(h[i], f32_to_bf16(x[i])) << i;
  // Large enough for the parallel path: every value round-trips through bf16
  // to the bf16 value, and a bf16 -> f32 -> bf16 trip is exact.
  const auto r = test::to_f32(test::random_normal(100000, 3));
  const int64_t m = static_cast<int64_t>(r.size());
  std::vector<uint16_t> hb(m), hb2(m);
  std::vector<float> fb(m);
  ops::cast(Tensor(hb.data(), DType::BF16, {m}), Tensor::f32(const_cast<float*>(r.data()), {m}));
  ops::cast(Tensor::f32(fb.data(), {m}), Tensor(hb.data(), DType::BF16, {m}));
  ops::cast(Tensor(hb2.data(), DType::BF16, {m}), Tensor::f32(fb.data(), {m}));
  for (int64_t i = 0; i < m; ++i) {
    ASSERT_LE(std::fabs(fb[i] - r[i]), std::fabs(r[i]) * (1.0f / 256)) << i;
    ASSERT_EQ(hb[i], hb2[i]) << i;
  }
}

TEST(Cast, SameDtypeCopiesAndBadDtypesAbort) {
  test::use_threadsafe_death_tests();
  std::vector<float> a = {1, 2, 3}, b(3);
  ops::cast(Tensor::f32(b.data(), {3}), Tensor::f32(a.data(), {3}));
  EXPECT_EQ(a, b);
  std::vector<int32_t> i(3);
  EXPECT_DEATH(ops::cast(Tensor::i32(i.data(), {3}), Tensor::f32(a.data(), {3})),
               "cast: dst expected dtype f32 or bf16, got i32");
  EXPECT_DEATH(ops::cast(Tensor::f32(b.data(), {2}), Tensor::f32(a.data(), {3})),
               "cast: dst expected 3 elements");
}

TEST(AdamWMaster, UpdatesTheMasterAndRoundsTheWorkingCopy) {
  const int64_t n = 5000;
  const auto g = test::to_f32(test::random_normal(n, 5, 0.1));
  std::vector<float> p = test::to_f32(test::random_normal(n, 6)), m(n), v(n);
  std::vector<float> master = p, m2(n), v2(n);
  std::vector<uint16_t> work(n);
  ops::AdamWParams h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1};
  for (int64_t step = 1; step <= 3; ++step) {
    h.step = step;
    // Reference: the plain f32 update of the same values.
    ops::adamw_update(Tensor::f32(p.data(), {n}), Tensor::f32(const_cast<float*>(g.data()), {n}),
                      Tensor::f32(m.data(), {n}), Tensor::f32(v.data(), {n}), h);
    ops::adamw_update(Tensor(work.data(), DType::BF16, {n}),
                      Tensor::f32(const_cast<float*>(g.data()), {n}), Tensor::f32(m2.data(), {n}),
                      Tensor::f32(v2.data(), {n}), h, Tensor::f32(master.data(), {n}));
  }
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(master[i], p[i]) << i;  // the master follows the f32 path bit for bit
    ASSERT_EQ(work[i], f32_to_bf16(master[i])) << i;
  }
  // An f32 working copy equals the master.
  std::vector<float> work32(n), master32 = test::to_f32(test::random_normal(n, 6)), m3(n), v3(n);
  h.step = 1;
  ops::adamw_update(Tensor::f32(work32.data(), {n}), Tensor::f32(const_cast<float*>(g.data()), {n}),
                    Tensor::f32(m3.data(), {n}), Tensor::f32(v3.data(), {n}), h,
                    Tensor::f32(master32.data(), {n}));
  EXPECT_EQ(work32, master32);
}

}  // namespace
}  // namespace weft
