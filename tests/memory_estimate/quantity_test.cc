// Kubernetes quantities as the API server reads them: every suffix family,
// exponents, fractions, JSON numbers; and what it refuses.
#include "kube/quantity.h"

#include <gtest/gtest.h>

namespace weft::kube {
namespace {

using Json = nlohmann::json;

TEST(Quantity, SuffixesExponentsAndFractions) {
  struct Case {
    const char* text;
    long double value;
  };
  const Case cases[] = {
      {"0", 0},
      {"123", 123},
      {"64Mi", 64.0L * 1024 * 1024},
      {"1Ki", 1024},
      {"3Gi", 3.0L * 1024 * 1024 * 1024},
      {"2Ti", 2.0L * 1024 * 1024 * 1024 * 1024},
      {"1Pi", 1024.0L * 1024 * 1024 * 1024 * 1024},
      {"1Ei", 1024.0L * 1024 * 1024 * 1024 * 1024 * 1024},
      {"1k", 1e3L},
      {"64M", 64e6L},
      {"1G", 1e9L},
      {"2T", 2e12L},
      {"1P", 1e15L},
      {"1E", 1e18L},  // exa, not an exponent
      {"1e9", 1e9L},
      {"1E3", 1e3L},
      {"129e6", 129e6L},
      {"5e+2", 500},
      {"25e-1", 2.5L},
      {"1.5Gi", 1.5L * 1024 * 1024 * 1024},
      {".5Gi", 0.5L * 1024 * 1024 * 1024},
      {"+1Ki", 1024},
      {"-1Ki", -1024},
      {"500m", 0.5L},
      {"100u", 100e-6L},
      {"7n", 7e-9L},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const Quantity q = parse_quantity(std::string(c.text));
    ASSERT_TRUE(q.ok) << q.error;
    EXPECT_NEAR(static_cast<double>(q.value), static_cast<double>(c.value),
                1e-9 * std::abs(static_cast<double>(c.value)) + 1e-12);
  }
}

TEST(Quantity, RoundsUpToWholeUnitsAndSaturates) {
  EXPECT_EQ(parse_quantity(std::string("1.5")).ceil_int64(), 2);
  EXPECT_EQ(parse_quantity(std::string("1500m")).ceil_int64(), 2);
  EXPECT_EQ(parse_quantity(std::string("1Gi")).ceil_int64(), int64_t{1} << 30);
  EXPECT_EQ(parse_quantity(std::string("1e30")).ceil_int64(), std::numeric_limits<int64_t>::max());
}

TEST(Quantity, JsonNumbersAreQuantitiesToo) {
  EXPECT_EQ(parse_quantity(Json(1073741824)).ceil_int64(), 1073741824);
  EXPECT_EQ(parse_quantity(Json(uint64_t{1} << 40)).ceil_int64(), int64_t{1} << 40);
  EXPECT_EQ(parse_quantity(Json(2.5)).ceil_int64(), 3);
  EXPECT_EQ(parse_quantity(Json("64Mi")).ceil_int64(), 64 << 20);
  const Quantity b = parse_quantity(Json(true));
  EXPECT_FALSE(b.ok);
  EXPECT_NE(b.error.find("expected a string or a number"), std::string::npos) << b.error;
}

TEST(Quantity, WhatTheApiServerRefusesIsRefused) {
  struct Case {
    const char* text;
    const char* why;
  };
  const Case cases[] = {
      {"", "expected a number"},         {"Gi", "expected a number"},
      {".", "expected a number"},        {"1K", "unknown suffix 'K'"},  // kilo is k
      {"64MB", "unknown suffix 'MB'"},   {"1 Gi", "unknown suffix ' Gi'"},
      {"1gi", "unknown suffix 'gi'"},    {"1e", "unknown suffix 'e'"},
      {"1e1.5", "the exponent must be"}, {"1e+", "the exponent must be"},
      {"1.2.3", "unknown suffix '.3'"},  {"1Gi ", "unknown suffix 'Gi '"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const Quantity q = parse_quantity(std::string(c.text));
    EXPECT_FALSE(q.ok);
    EXPECT_NE(q.error.find(std::string("'") + c.text + "' is not a quantity"), std::string::npos)
        << q.error;
    EXPECT_NE(q.error.find(c.why), std::string::npos) << q.error;
  }
}

}  // namespace
}  // namespace weft::kube
