// Helpers shared by the kernel tests: naive comparisons and a central
// finite-difference gradient check in double precision; seeded random data
// comes from support/random.h.
// defines: to_f32, to_f64, weighted_sum, expect_all_close, expect_gradient,
//          use_threadsafe_death_tests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "support/random.h"

namespace weft::test {

using ::weft::testing::random_normal;
using ::weft::testing::random_tokens;

std::vector<float> to_f32(const std::vector<double>& x);
std::vector<double> to_f64(const std::vector<float>& x);

// sum_i a[i] * r[i] in double: the scalar loss L = sum(out * R) of the checks.
double weighted_sum(const std::vector<double>& a, const std::vector<double>& r);

// |got - want| <= atol + rtol * |want| elementwise; reports the worst element.
void expect_all_close(const std::string& what, const std::vector<double>& want,
                      const std::vector<double>& got, double rtol, double atol);

// Checks analytic[i] against (loss(x_i + h) - loss(x_i - h)) / 2h for every
// element of x, or for `max_checks` elements picked at random when x is larger.
// x is restored after each probe. An element passes when
//   |analytic - numeric| <= rtol * max(|numeric|, 1e-2 * max|numeric|) + noise,
// noise = 100 eps (|L+| + |L-|) / 2h being the rounding floor of the quotient.
// A wrong gradient is off by O(max|numeric|), i.e. >= 1e-2 relative.
// Unless may_be_zero, an all-zero numeric gradient fails (the check would be
// vacuous). Returns the worst relative error seen.
double expect_gradient(const std::string& what, std::vector<double>& x,
                       const std::vector<double>& analytic, const std::function<double()>& loss,
                       size_t max_checks = 96, double rtol = 1e-6, double h = 1e-6,
                       bool may_be_zero = false);

// OpenMP starts threads, so death tests must re-exec instead of forking.
void use_threadsafe_death_tests();

}  // namespace weft::test
