// The phases of every step sum to its wall time, each phase measured
// (docs/metrics.md, "The phases of a step"): data, forward, backward and
// optimizer are compute only, exposed_comm is the time compute waited for
// communication wherever it waited (ZeRO's parameter gathers in forward and
// its norm in the optimizer, ISP's weight gathers, reduce-scatters and
// all-to-alls inside forward and backward), and other (step agreement,
// prepare_step, the loss all-reduce) is timed too, not derived. So a phase
// that is undercounted (time in no phase) or overcounted (a wait counted in a
// phase and in exposed_comm) makes the step's sum miss its wall time.
//
// Per step, from summary.json (step_phase_seconds, step_seconds) and from
// /metrics (weft_phase_seconds_total deltas between scrapes):
//   |sum of phases - step wall time| <= 0.5 ms + 1% of the step
// (phase_sum_tolerance, train/step_clock.h). The laps of one step share their
// clock reads, so a loaded host moves time between phases, never out of the
// sum. The negative control drops one phase from every step's report
// (WEFT_TEST_DROP_PHASE, a test hook) and the same check must fail.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "metrics/metrics_test_util.h"
#include "support/net.h"
#include "support/run_process.h"
#include "train/step_clock.h"

namespace weft {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
const char* const kPhases[] = {"data", "forward", "backward", "optimizer", "exposed_comm", "other"};

std::string run_yaml(const std::string& parallel, int metrics_port) {
  // 2 ms per message: the waits (tens of ms a step) dwarf the clocks' grain.
  return "model: {vocab_size: 128, d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, max_seq_len: 32}\n"
         "train: {steps: 12, micro_batch: 4, seq_len: 32, grad_accum: 2, log_every: 1000}\n"
         "optim: {warmup_steps: 2}\n"
         "checkpoint: {every: 0, save: false}\n"
         "metrics: {port: " + std::to_string(metrics_port) + ", linger_seconds: 2}\n"
         "comm: {simulate: {latency_us: 2000}}\n"
         "parallel: {bucket_cap_mb: 0.05, " + parallel + "}\n";
}

json run_summary(const std::string& name, const std::string& parallel, const std::vector<std::string>& env = {}) {
  const fs::path dir = weft::testing::fresh_dir("weft-phase-sum-" + name);
  weft::testing::write_file(dir / "run.yaml", run_yaml(parallel, 0));
  const auto run = weft::testing::run_process({weft::testing::bin("weft-run"), "-n", "2", "--",
                                               (dir / "run.yaml").string(), "--out", (dir / "out").string(),
                                               "--no-resume"},
                                              env, 0, "", std::chrono::seconds(240));
  EXPECT_EQ(run.code, 0) << run.output;
  std::ifstream in(dir / "out" / "summary.json");
  json s = json::parse(in, nullptr, false);
  EXPECT_TRUE(s.is_object()) << "no summary.json:\n" << run.output;
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
  return s;
}

// The steps whose phases miss their wall time by more than the tolerance,
// as "step k: sum S ms, wall W ms"; the largest discrepancy into *worst_ms.
std::vector<std::string> misaccounted_steps(const json& s, double* worst_ms) {
  std::vector<std::string> bad;
  *worst_ms = 0;
  const json& wall = s["step_seconds"];
  for (size_t i = 0; i < wall.size(); ++i) {
    double sum = 0;
    for (const char* p : kPhases) sum += s["step_phase_seconds"][p].at(i).get<double>();
    const double w = wall[i].get<double>(), off = std::abs(sum - w);
    *worst_ms = std::max(*worst_ms, off * 1e3);
    if (off > phase_sum_tolerance(w))
      bad.push_back("step " + std::to_string(i + 1) + ": phases " + std::to_string(sum * 1e3) + " ms, wall " +
                    std::to_string(w * 1e3) + " ms");
  }
  return bad;
}

struct Case {
  const char* name;
  const char* parallel;  // the run's parallel: section, inline
};

class PhaseSum : public ::testing::TestWithParam<Case> {};

TEST_P(PhaseSum, PhasesOfEveryStepSumToItsWallTime) {
  const Case c = GetParam();
  const json s = run_summary(c.name, c.parallel);
  ASSERT_TRUE(s.is_object());
  ASSERT_EQ(s["step_seconds"].size(), 12u);
  double exposed = 0, worst_ms = 0;
  for (double t : s["step_phase_seconds"]["exposed_comm"]) exposed += t;
  EXPECT_GT(exposed, 0) << "an emulated link with nothing exposed: the run did not synchronise";
  const auto bad = misaccounted_steps(s, &worst_ms);
  RecordProperty("worst_step_discrepancy_ms", std::to_string(worst_ms));
  for (const std::string& b : bad) ADD_FAILURE() << c.name << ": " << b;
  EXPECT_EQ(s["misaccounted_steps"], 0) << "the trainer counted misaccounted steps";
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, PhaseSum,
    ::testing::Values(
        Case{"dp", "strategy: dp"},
        Case{"zero1_interleaved", "strategy: zero, zero: {stage: 1, overlap: interleaved}"},
        Case{"zero1_after_backward", "strategy: zero, zero: {stage: 1, overlap: after_backward}"},
        Case{"zero1_param_gather", "strategy: zero, zero: {stage: 1, overlap_param_gather: true}"},
        Case{"zero2_interleaved", "strategy: zero, zero: {stage: 2, overlap: interleaved}"},
        Case{"zero2_after_backward", "strategy: zero, zero: {stage: 2, overlap: after_backward}"},
        Case{"zero2_none", "strategy: zero, zero: {stage: 2, overlap: none}"},
        Case{"isp", "strategy: isp, sp: 1, wp: 2"}, Case{"isp_sp", "strategy: isp, sp: 2, wp: 1"}),
    [](const auto& info) { return std::string(info.param.name); });

// The negative control: a trainer that does not time one phase. "other" is
// the phase that used to be the remainder; forward is the largest compute
// phase. The per-step check must name (nearly) every step.
TEST(PhaseSumNegativeControl, DroppingAPhaseFailsThePerStepCheck) {
  for (const char* dropped : {"other", "forward"}) {
    const json s = run_summary(std::string("drop-") + dropped, "strategy: dp",
                               {std::string("WEFT_TEST_DROP_PHASE=") + dropped});
    ASSERT_TRUE(s.is_object());
    double worst_ms = 0;
    const auto bad = misaccounted_steps(s, &worst_ms);
    EXPECT_GE(bad.size(), 10u) << "with " << dropped << " dropped only " << bad.size()
                               << " of 12 steps failed the check (worst " << worst_ms << " ms)";
    EXPECT_GE(s["misaccounted_steps"].get<int>(), 10) << dropped;
  }
}

// /metrics exports the same measured phases: weft_phase_seconds_total grows
// by each step's phases, its sum by the step's wall time within the
// tolerance, and weft_phase_unaccounted_seconds_total stays within it.
TEST(PhaseSumMetrics, CounterDeltasOfEachStepSumToItsWallTime) {
  using metrics_test::parse_exposition;
  using metrics_test::sample_key;
  const fs::path dir = weft::testing::fresh_dir("weft-phase-sum-metrics");
  const int port = weft::testing::free_port_range(2);
  weft::testing::write_file(dir / "run.yaml", run_yaml("strategy: dp", port));
  metrics_test::Child run = metrics_test::spawn(
      {weft::testing::bin("weft-run"), "-n", "2", "--", (dir / "run.yaml").string(), "--out",
       (dir / "out").string(), "--no-resume"},
      {}, (dir / "run.log").string());
  // Rank 0's counters after step k, from two scrapes in a row that agree (a
  // scrape is not atomic across families; on_step takes microseconds).
  std::map<int, std::map<std::string, double>> at_step;
  std::map<std::string, double> last;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while (metrics_test::running(run) && std::chrono::steady_clock::now() < deadline) {
    const weft::testing::HttpResponse h = weft::testing::http_get(port, "/metrics", std::chrono::seconds(2));
    if (h.status != 200) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    auto now = parse_exposition(h.body);
    const std::string step = sample_key("weft_step", {{"rank", "0"}});
    if (now.count(step) && now == last) at_step[static_cast<int>(now[step])] = now;
    last = std::move(now);
  }
  ASSERT_FALSE(metrics_test::running(run)) << metrics_test::read_file(run.log_path);
  std::ifstream in(dir / "out" / "summary.json");
  const json s = json::parse(in, nullptr, false);
  ASSERT_TRUE(s.is_object()) << metrics_test::read_file(run.log_path);
  ASSERT_TRUE(at_step.count(12)) << "the last step's counters were never scraped (linger_seconds 2)";
  at_step.erase(0);
  auto counter = [](const std::map<std::string, double>& m, const std::string& name,
                    std::map<std::string, std::string> l) {
    l["rank"] = "0";
    const auto it = m.find(sample_key(name, l));
    return it == m.end() ? 0.0 : it->second;
  };
  // Between two scraped steps a < b: each phase's counter delta equals the
  // summary's phases of steps a+1..b, and their sum the steps' wall time.
  std::map<std::string, double> prev;
  int prev_step = 0, intervals_of_one_step = 0;
  for (const auto& [k, m] : at_step) {
    double wall = 0, tol = 0, sum = 0;
    for (int i = prev_step; i < k; ++i) {
      wall += s["step_seconds"].at(i).get<double>();
      tol += phase_sum_tolerance(s["step_seconds"].at(i).get<double>());
    }
    for (const char* p : kPhases) {
      double from_summary = 0;
      for (int i = prev_step; i < k; ++i) from_summary += s["step_phase_seconds"][p].at(i).get<double>();
      const double delta = counter(m, "weft_phase_seconds_total", {{"phase", p}}) -
                           counter(prev, "weft_phase_seconds_total", {{"phase", p}});
      EXPECT_NEAR(delta, from_summary, 1e-6) << p << ", steps " << prev_step + 1 << ".." << k;
      sum += delta;
    }
    const double step_sum = counter(m, "weft_step_seconds_sum", {}) - counter(prev, "weft_step_seconds_sum", {});
    EXPECT_NEAR(step_sum, wall, 1e-6);
    EXPECT_LE(std::abs(sum - step_sum), tol) << "steps " << prev_step + 1 << ".." << k << ": phases "
                                             << sum * 1e3 << " ms, wall " << step_sum * 1e3 << " ms";
    intervals_of_one_step += k == prev_step + 1;
    prev = m;
    prev_step = k;
  }
  RecordProperty("single_step_intervals", std::to_string(intervals_of_one_step));
  for (const char* kind : {"missing", "excess"})
    EXPECT_LE(counter(prev, "weft_phase_unaccounted_seconds_total", {{"kind", kind}}), phase_sum_tolerance(0) * 12)
        << kind;
  if (!HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace weft
