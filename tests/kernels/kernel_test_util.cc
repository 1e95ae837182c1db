#include "kernels/kernel_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <iomanip>
#include <sstream>

namespace weft::test {

std::vector<float> to_f32(const std::vector<double>& x) { return {x.begin(), x.end()}; }
std::vector<double> to_f64(const std::vector<float>& x) { return {x.begin(), x.end()}; }

double weighted_sum(const std::vector<double>& a, const std::vector<double>& r) {
  EXPECT_EQ(a.size(), r.size());
  double s = 0.0;
  for (size_t i = 0; i < std::min(a.size(), r.size()); ++i) s += a[i] * r[i];
  return s;
}

void expect_all_close(const std::string& what, const std::vector<double>& want,
                      const std::vector<double>& got, double rtol, double atol) {
  ASSERT_EQ(want.size(), got.size()) << what;
  size_t worst = 0;
  double worst_excess = -1.0;
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double err = std::fabs(got[i] - want[i]);
    double excess = err - (atol + rtol * std::fabs(want[i]));
    if (excess > 0 || std::isnan(got[i]) != std::isnan(want[i])) ++bad;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << want.size()
                     << " elements differ; worst at " << worst << ": want " << want[worst]
                     << ", got " << got[worst] << " (rtol " << rtol << ", atol " << atol << ")";
}

double expect_gradient(const std::string& what, std::vector<double>& x,
                       const std::vector<double>& analytic, const std::function<double()>& loss,
                       size_t max_checks, double rtol, double h, bool may_be_zero) {
  EXPECT_EQ(x.size(), analytic.size()) << what;
  std::vector<size_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  if (idx.size() > max_checks) {
    std::mt19937_64 gen(x.size() * 7919 + max_checks);
    std::shuffle(idx.begin(), idx.end(), gen);
    idx.resize(max_checks);
  }
  std::vector<double> numeric(idx.size()), noise(idx.size());
  double scale = 0.0;
  for (size_t k = 0; k < idx.size(); ++k) {
    const size_t i = idx[k];
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    numeric[k] = (up - down) / (2 * h);
    // Rounding in the two loss values, amplified by 1/2h: the best any
    // difference quotient can do, however right the kernel is.
    noise[k] = 100 * std::numeric_limits<double>::epsilon() * (std::fabs(up) + std::fabs(down)) /
               (2 * h);
    scale = std::max(scale, std::fabs(numeric[k]));
  }
  if (!may_be_zero) {
    EXPECT_GT(scale, 1e-6) << what << ": numeric gradient is ~zero; the check would be vacuous";
  }
  double worst = 0.0;
  size_t failures = 0;
  for (size_t k = 0; k < idx.size(); ++k) {
    const double a = analytic[idx[k]], n = numeric[k];
    const double allowed = rtol * std::max(std::fabs(n), 1e-2 * scale) + noise[k];
    const double err = std::fabs(a - n);
    worst = std::max(worst, err / std::max({std::fabs(n), 1e-2 * scale, noise[k], 1e-300}));
    if (!(err <= allowed)) {
      if (++failures <= 5)
        ADD_FAILURE() << what << "[" << idx[k] << "]: analytic " << a << ", numeric " << n
                      << ", error " << err << " > allowed " << allowed;
    }
  }
  EXPECT_EQ(failures, 0u) << what << ": " << failures << " of " << idx.size()
                          << " gradient entries wrong";
  std::ostringstream rec;
  rec << std::scientific << std::setprecision(2) << worst;
  ::testing::Test::RecordProperty("fd_worst_rel_err_" + what, rec.str());
  return worst;
}

void use_threadsafe_death_tests() { GTEST_FLAG_SET(death_test_style, "threadsafe"); }

}  // namespace weft::test
