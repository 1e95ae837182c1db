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

TEST(BucketSearch, FinalCheckMeasuresTheStartAndTheTwoBestAgainInAlternation) {
  SearchSpace s = space(1, 256, 25, 8);
  s.confirm_rounds = 2;
  // The search of PlanForTheDefaultBudget (scores favour 12 MiB): 16 then 8
  // are the best sizes after the start.
  auto score = [](double mb) { return std::abs(std::log(mb / 12)) + 1; };
  std::vector<ScoredTrial> h;
  for (double mb : {25, 1, 4, 16, 64, 256, 8, 32}) h.push_back({double(mb), score(mb)});
  // Round 1 visits start, best, second; round 2 the same rotated by one.
  const double visits[] = {25, 16, 8, 16, 8, 25};
  // In the check 8 MiB is 5 % faster than 16 MiB: the single trials ranked
  // them wrongly, the alternation settles it.
  auto checked = [](double mb) { return mb == 8 ? 1.0 : mb == 16 ? 1.05 : 1.2; };
  for (size_t i = 0; i < 6; ++i) {
    SearchStep st = next_search_step(s, h);
    ASSERT_FALSE(st.done) << i << ": " << st.why;
    EXPECT_EQ(st.bucket_mb, visits[i]) << i;
    EXPECT_NE(st.why.find(i < 3 ? "round 1 of 2" : "round 2 of 2"), std::string::npos) << st.why;
    h.push_back({st.bucket_mb, checked(st.bucket_mb)});
  }
  SearchStep st = next_search_step(s, h);
  EXPECT_TRUE(st.done);
  EXPECT_EQ(st.bucket_mb, 8) << st.why;
  EXPECT_NE(st.why.find("final check of 3 sizes over 2 rounds"), std::string::npos) << st.why;
  // The same history with the check finding no size 2 % faster than the
  // start keeps the start, whatever the single trials said.
  for (size_t i = 8; i < h.size(); ++i) h[i].score = h[i].bucket_mb == 25 ? 1.0 : 0.99;
  st = next_search_step(s, h);
  EXPECT_TRUE(st.done);
  EXPECT_EQ(st.bucket_mb, 25) << st.why;
  // And without a check the search alone chose 16 (its best single trial).
  EXPECT_EQ(next_search_step(space(1, 256, 25, 8), std::vector<ScoredTrial>(h.begin(), h.begin() + 8)).bucket_mb, 16);
}

TEST(BucketSearch, FinalCheckFollowsASearchEndedByItsBudget) {
  SearchSpace s = space(1, 256, 25, 3);
  s.confirm_rounds = 1;
  const std::vector<ScoredTrial> h = {{25, 1.0}, {1, 0.9}, {256, 1.2}};
  SearchStep st = next_search_step(s, h);
  ASSERT_FALSE(st.done) << "maxTrials bounds the search; the check comes on top";
  EXPECT_EQ(st.bucket_mb, 25);
  st = next_search_step(s, {{25, 1.0}, {1, 0.9}, {256, 1.2}, {25, 1.0}, {1, 0.99}});
  ASSERT_FALSE(st.done);
  EXPECT_EQ(st.bucket_mb, 256);
  st = next_search_step(s, {{25, 1.0}, {1, 0.9}, {256, 1.2}, {25, 1.0}, {1, 0.99}, {256, 1.2}});
  EXPECT_TRUE(st.done);
  EXPECT_EQ(st.bucket_mb, 25) << "1 MiB's 10 % did not hold up in the check: " << st.why;
}

// Trials as this project's 2-core VM gives them (docs/benchmarks/tuning.md, the
// interleaved tuning runs): each trial's score off by 4 % (sd) and the machine
// slowing by 1 % per trial as a neighbour's load ramps up. The truth: 25 MiB,
// the start, is 20 % slower than 8 MiB. Single trials one after another rank
// sizes wrongly often enough that the search alone misses the 5 % goal in
// about one run of ten; the final check makes that rare.
TEST(BucketSearch, FinalCheckRecoversTheRightSizeOnANoisyDriftingMachine) {
  const auto truth = dp_curve(100, 0.004, 150, 0.3);
  double opt = INFINITY;
  for (int i = 0; i <= 4000; ++i) opt = std::min(opt, truth(0.0625 * std::pow(2048.0, i / 4000.0)));
  ASSERT_GT(truth(25), 1.15 * opt);
  int misses[2] = {0, 0};
  for (int rounds : {0, 2}) {
    SearchSpace s = space(0.0625, 128, 25, 8);
    s.confirm_rounds = rounds;
    for (unsigned seed = 1; seed <= 200; ++seed) {
      std::mt19937 rng(seed);
      std::normal_distribution<double> noise(0, 0.04);
      std::vector<ScoredTrial> h;
      SearchStep st;
      while (!(st = next_search_step(s, h)).done) {
        ASSERT_LE(h.size(), 8u + 3 * rounds);
        h.push_back({st.bucket_mb, truth(st.bucket_mb) * (1 + 0.01 * h.size()) * (1 + noise(rng))});
      }
      misses[rounds > 0] += truth(st.bucket_mb) > 1.05 * opt;
    }
  }
  EXPECT_GE(misses[0], 15) << "the search alone should miss here (else this test shows nothing)";
  EXPECT_LE(misses[1], 5) << "with 2 rounds of final check (search alone: " << misses[0] << " of 200)";
}

}  // namespace
}  // namespace weft::tuner
