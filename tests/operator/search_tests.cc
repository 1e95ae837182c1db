// The bucket-size search on synthetic step-time curves, as a table: for each
// curve, bounds and budget, the search must end within max_trials and choose
// a size whose true step time is within 5 % of the best size's in the bounds,
// and never worse (truly) than the start size beyond the noise.
#include "tuner/search.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

namespace weft::tuner {
namespace {

// A data-parallel step: compute, plus per-bucket latency (more buckets at
// small sizes), plus the last bucket's reduction that cannot overlap (grows
// with size). total_mb of gradients, latency per bucket, bandwidth in MiB/s.
// `whole_buckets`: count buckets as a whole number (a staircase curve).
std::function<double(double)> dp_curve(double total_mb, double latency_s, double mib_per_s, double compute_s = 0.2,
                                       bool whole_buckets = false) {
  return [=](double mb) {
    const double buckets = whole_buckets ? std::ceil(total_mb / mb - 1e-9) : total_mb / mb;
    const double last = std::min(mb, total_mb);
    return compute_s + buckets * latency_s + last / mib_per_s;
  };
}

struct Case {
  const char* name;
  std::function<double(double)> truth;  // step seconds at a size
  double noise;                         // relative sd of one measured step
  SearchSpace space;
};

// What a trial measures: the median of 9 noisy steps.
double measure(const Case& c, double mb, std::mt19937& rng) {
  std::normal_distribution<double> n(0, c.noise);
  std::vector<double> v;
  for (int i = 0; i < 9; ++i) v.push_back(c.truth(mb) * (1 + n(rng)));
  std::sort(v.begin(), v.end());
  return v[4];
}

double best_in_bounds(const Case& c) {
  double best = INFINITY;
  const SearchSpace& s = c.space;
  for (int i = 0; i <= 4000; ++i) best = std::min(best, c.truth(s.min_mb * std::pow(s.max_mb / s.min_mb, i / 4000.0)));
  return best;
}

struct Outcome {
  double chosen_mb = 0;
  int trials = 0;
};

Outcome run(const Case& c, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<ScoredTrial> done;
  for (int guard = 0; guard < 100; ++guard) {
    SearchStep s = next_search_step(c.space, done);
    if (s.done) return {s.bucket_mb, static_cast<int>(done.size())};
    if (!done.empty()) {  // the first trial is the start size, which may lie outside
      EXPECT_GE(s.bucket_mb, c.space.min_mb * (1 - 1e-12)) << c.name;
      EXPECT_LE(s.bucket_mb, c.space.max_mb * (1 + 1e-12)) << c.name;
    }
    done.push_back({s.bucket_mb, measure(c, s.bucket_mb, rng)});
  }
  ADD_FAILURE() << c.name << ": the search never ended";
  return {};
}

SearchSpace space(double lo, double hi, double start, int max_trials) { return {lo, hi, start, max_trials, 0.02}; }

TEST(BucketSearch, FindsNearOptimumOnSyntheticCurves) {
  const Case cases[] = {
      // ~100 MiB of gradients; optimum in the middle of [1, 256].
      {"unimodal", dp_curve(100, 0.01, 2000, 0.05), 0, space(1, 256, 25, 8)},
      {"unimodal, 3% noise", dp_curve(100, 0.01, 2000, 0.05), 0.03, space(1, 256, 25, 8)},
      // A slow network: per-bucket latency dominates, the best is large.
      {"high latency", dp_curve(100, 0.03, 1000), 0.02, space(1, 256, 25, 8)},
      // A fast network with a slow tail: small buckets win.
      {"low latency", dp_curve(100, 0.0002, 300), 0.02, space(0.5, 256, 25, 8)},
      // Whole buckets: a staircase, as real parameter boundaries make it.
      {"staircase", dp_curve(2000, 0.002, 2000, 0.5, true), 0.01, space(1, 256, 25, 8)},
      {"flat", [](double) { return 0.5; }, 0.02, space(1, 256, 25, 8)},
      {"optimum at the upper bound", dp_curve(400, 0.01, 1e6), 0.01, space(1, 64, 25, 8)},
      {"optimum at the lower bound", [](double mb) { return 0.3 + 0.002 * mb; }, 0.01, space(2, 128, 25, 8)},
      {"start outside the bounds", dp_curve(100, 0.004, 2000), 0.01, space(2, 64, 100, 8)},
      {"small budget", dp_curve(100, 0.004, 2000), 0.01, space(1, 256, 25, 4)},
      {"narrow bounds", dp_curve(100, 0.004, 2000), 0.01, space(10, 20, 25, 6)},
      {"single size", dp_curve(100, 0.004, 2000), 0.01, space(16, 16, 25, 8)},
      {"more trials", dp_curve(100, 0.004, 2000), 0.03, space(1, 1024, 25, 14)},
  };
  for (const Case& c : cases) {
    const double opt = best_in_bounds(c);
    for (unsigned seed = 1; seed <= 20; ++seed) {
      Outcome o = run(c, seed);
      EXPECT_LE(o.trials, c.space.max_trials) << c.name;
      // The 5 % goal applies where the budget allows a sweep; with 4 trials
      // (start + both bounds + one) it is 10 %.
      const double tolerance = c.space.max_trials >= 6 ? 1.05 : 1.10;
      const double chosen = c.truth(o.chosen_mb);
      // A choice must be in the bounds, or be the start size.
      const bool in_bounds = o.chosen_mb >= c.space.min_mb && o.chosen_mb <= c.space.max_mb;
      EXPECT_TRUE(in_bounds || o.chosen_mb == c.space.start_mb) << c.name << " chose " << o.chosen_mb;
      EXPECT_LE(chosen, tolerance * std::min(opt, c.truth(c.space.start_mb)) + 3 * c.noise * chosen)
          << c.name << " seed " << seed << ": chose " << o.chosen_mb << " MiB (" << chosen << " s), best " << opt;
      EXPECT_LE(chosen, c.truth(c.space.start_mb) * (1 + 3 * c.noise) + 1e-12) << c.name << " seed " << seed;
      if (c.noise == 0) {
        EXPECT_LE(chosen, 1.05 * opt) << c.name;
      }
    }
  }
}

TEST(BucketSearch, TheSearchIsAPureFunctionOfItsHistory) {
  const SearchSpace s = space(1, 256, 25, 8);
  EXPECT_EQ(next_search_step(s, {}).bucket_mb, 25) << "the start size is measured first";
  EXPECT_FALSE(next_search_step(s, {}).done);
  std::vector<ScoredTrial> h = {{25, 1.0}};
  const SearchStep a = next_search_step(s, h), b = next_search_step(s, h);
  EXPECT_EQ(a.bucket_mb, b.bucket_mb);
  EXPECT_EQ(a.bucket_mb, 1) << "then the coarse sweep from the lower bound";
  EXPECT_EQ(coarse_grid(s), (std::vector<double>{1, 4, 16, 64, 256}));
}

TEST(BucketSearch, PlanForTheDefaultBudget) {
  // Table: the history so far -> the next step. Scores favour 16 MiB.
  const SearchSpace s = space(1, 256, 25, 8);
  auto score = [](double mb) { return std::abs(std::log(mb / 12)) + 1; };
  std::vector<ScoredTrial> h;
  std::vector<double> asked;
  for (;;) {
    SearchStep st = next_search_step(s, h);
    if (st.done) {
      EXPECT_EQ(st.bucket_mb, 16) << st.why;
      break;
    }
    asked.push_back(st.bucket_mb);
    h.push_back({st.bucket_mb, score(st.bucket_mb)});
  }
  ASSERT_EQ(asked.size(), 8u);
  const double want[] = {25, 1, 4, 16, 64, 256, 8, 32};  // sweep ratio 4: refine by 2
  for (size_t i = 0; i < asked.size(); ++i) EXPECT_NEAR(asked[i], want[i], 1e-9) << i;
}

TEST(BucketSearch, StopsWhenRefinementGainsLittleAndKeepsTheStartOnTies) {
  const SearchSpace s = space(1, 256, 25, 20);
  std::vector<ScoredTrial> h;
  for (;;) {
    SearchStep st = next_search_step(s, h);
    if (st.done) {
      EXPECT_EQ(st.bucket_mb, 25) << "every size scores the same: the start stays";
      EXPECT_NE(st.why.find("refinement gained"), std::string::npos) << st.why;
      break;
    }
    h.push_back({st.bucket_mb, 1.0});
  }
  EXPECT_EQ(h.size(), 8u) << "start, 5 sweep points, one refinement round";
}

TEST(BucketSearch, KeepsTheStartUnlessTheBestBeatsItByTheThreshold) {
  const SearchSpace s = space(1, 256, 25, 3);
  // 1 MiB is 1 % faster: noise, the start stays; 3 % faster: it wins.
  EXPECT_EQ(next_search_step(s, {{25, 1.0}, {1, 0.99}, {256, 1.2}}).bucket_mb, 25);
  EXPECT_TRUE(next_search_step(s, {{25, 1.0}, {1, 0.99}, {256, 1.2}}).done);
  EXPECT_EQ(next_search_step(s, {{25, 1.0}, {1, 0.97}, {256, 1.2}}).bucket_mb, 1);
}

TEST(BucketSearch, OneTrialBudgetKeepsTheStart) {
  const SearchSpace s = space(1, 256, 25, 1);
  EXPECT_FALSE(next_search_step(s, {}).done);
  SearchStep st = next_search_step(s, {{25, 1.0}});
  EXPECT_TRUE(st.done);
  EXPECT_EQ(st.bucket_mb, 25);
}

}  // namespace
}  // namespace weft::tuner
