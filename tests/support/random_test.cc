#include "support/random.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace weft::testing {
namespace {

TEST(Random, TheSeedDecidesTheValues) {
  EXPECT_EQ(random_normal(100, 7), random_normal(100, 7));
  EXPECT_NE(random_normal(100, 7), random_normal(100, 8));
  EXPECT_EQ(random_normal_f32(100, 7), random_normal_f32(100, 7));
  EXPECT_EQ(random_uniform_f32(100, 7), random_uniform_f32(100, 7));
  EXPECT_EQ(random_tokens(100, 50, 7), random_tokens(100, 50, 7));
  // A longer draw starts with the shorter one: sizes can change without
  // changing the data a test already sees.
  auto longer = random_normal(200, 7);
  EXPECT_TRUE(std::equal(longer.begin(), longer.begin() + 100, random_normal(100, 7).begin()));
}

TEST(Random, DistributionsHaveTheirRangeAndScale) {
  auto t = random_tokens(10000, 13, 1);
  EXPECT_EQ(*std::min_element(t.begin(), t.end()), 0);
  EXPECT_EQ(*std::max_element(t.begin(), t.end()), 12);
  auto u = random_uniform(10000, 2, -3.0, 5.0);
  EXPECT_GE(*std::min_element(u.begin(), u.end()), -3.0);
  EXPECT_LT(*std::max_element(u.begin(), u.end()), 5.0);
  auto n = random_normal(10000, 3, 2.0);
  double mean = std::accumulate(n.begin(), n.end(), 0.0) / n.size(), var = 0;
  for (double v : n) var += (v - mean) * (v - mean) / n.size();
  EXPECT_NEAR(mean, 0.0, 0.1);
  EXPECT_NEAR(std::sqrt(var), 2.0, 0.1);
}

}  // namespace
}  // namespace weft::testing
