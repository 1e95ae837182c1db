// The phases of a step sum to its wall time for every strategy
// (docs/metrics.md, weft_phase_seconds_total): data, forward, backward and
// optimizer are compute only, exposed_comm is the time compute waited for
// communication wherever it waited (ZeRO's parameter gathers in forward and
// its norm in the optimizer, ISP's weight gathers, reduce-scatters and
// all-to-alls inside forward and backward), and what remains, "other", is
// never negative. A 2-rank weft-run of each strategy on an emulated link
// (comm.simulate, so every wait is long) reports its phases in summary.json;
// nothing is floored there. Were a wait inside a phase counted both in that
// phase and in exposed_comm, "other" would come out negative by the waits'
// time.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/run_process.h"

namespace weft {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

struct Case {
  const char* name;
  const char* parallel;  // the run's parallel: section, inline
};

class PhaseSum : public ::testing::TestWithParam<Case> {};

TEST_P(PhaseSum, PhasesOfEveryStepSumToItsWallTime) {
  const Case c = GetParam();
  const fs::path dir = weft::testing::fresh_dir(std::string("weft-phase-sum-") + c.name);
  // 2 ms per message: the waits (tens of ms a step) dwarf the clocks' grain.
  weft::testing::write_file(
      dir / "run.yaml",
      std::string(
          "model: {vocab_size: 128, d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, "
          "max_seq_len: 32}\n"
          "train: {steps: 12, micro_batch: 4, seq_len: 32, grad_accum: 2, log_every: 1000}\n"
          "optim: {warmup_steps: 2}\n"
          "checkpoint: {every: 0, save: false}\n"
          "metrics: {port: 0}\n"
          "comm: {simulate: {latency_us: 2000}}\n"
          "parallel: {bucket_cap_mb: 0.05, ") +
          c.parallel + "}\n");
  const auto run = weft::testing::run_process(
      {weft::testing::bin("weft-run"), "-n", "2", "--", (dir / "run.yaml").string(), "--out",
       (dir / "out").string(), "--no-resume"},
      {}, 0, "", std::chrono::seconds(240));
  ASSERT_EQ(run.code, 0) << run.output;
  std::ifstream in(dir / "out" / "summary.json");
  const json s = json::parse(in, nullptr, false);
  ASSERT_TRUE(s.is_object()) << "no summary.json:\n" << run.output;

  double wall = 0, exposed = 0, compute = 0;
  for (double t : s["step_seconds"]) wall += t;
  for (double t : s["gradient_sync"]["exposed_seconds"]) exposed += t;
  for (const char* p : {"data", "forward", "backward", "optimizer"})
    compute += s["phase_seconds"][p].get<double>();
  const double other = wall - compute - exposed;
  RecordProperty("wall_ms", std::to_string(wall * 1e3));
  RecordProperty("other_ms", std::to_string(other * 1e3));
  EXPECT_GT(exposed, 0) << "an emulated link with nothing exposed: the run did not synchronise";
  // Clock reads of nested intervals: a few microseconds a step at most.
  EXPECT_GE(other, -1e-4) << c.name << ": wall " << wall * 1e3 << " ms, compute phases "
                          << compute * 1e3 << " ms, exposed comm " << exposed * 1e3 << " ms: other "
                          << other * 1e3 << " ms; a wait is counted twice";
  if (!HasFailure()) fs::remove_all(dir);
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

}  // namespace
}  // namespace weft
