// StepReport -> Prometheus families: scrapes TrainMetrics' registry through
// prometheus::TextSerializer and checks names, labels and values.
#include "metrics/train_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include "metrics/metrics_port.h"
#include "metrics/metrics_test_util.h"
#include "weft_metrics.h"

namespace weft {
namespace {

namespace cm = contract::metrics;

using metrics_test::parse_exposition;
using metrics_test::sample_key;
using metrics_test::StatsOnlyComm;

std::map<std::string, double> scrape(const TrainMetrics& m) {
  return parse_exposition(prometheus::TextSerializer().Serialize(m.registry()->Collect()));
}

StepReport report(int64_t step) {
  StepReport r;
  r.step = step;
  r.total_steps = 100;
  r.loss = 2.5;
  r.lr = 1e-3;
  r.grad_norm = 0.75;
  r.step_seconds = 1.0;
  r.tokens_per_second = 4096;
  r.mfu = 0.42;
  r.data_seconds = 0.1;
  r.forward_seconds = 0.2;
  r.backward_seconds = 0.4;
  r.optimizer_seconds = 0.05;
  r.exposed_comm_seconds = 0.15;
  r.other_seconds = 0.1;  // the phases sum to the 1 s step
  r.sync_group = "dp";
  r.comm_seconds = 0.6;
  r.overlap_ratio = 0.75;
  r.bucket_seconds = {0.003, 0.2};
  r.bucket_count = 2;
  r.bucket_cap_bytes = 1 << 20;
  r.memory_param_bytes = 100;
  r.memory_grad_bytes = 200;
  r.memory_optimizer_bytes = 300;
  r.memory_activation_bytes = 400;
  return r;
}

const std::map<std::string, std::string> kRank3{{"rank", "3"}};
std::map<std::string, std::string> with_rank(std::map<std::string, std::string> l) {
  l["rank"] = "3";
  return l;
}

// ISP: the time forward and backward waited for weight gathers is waiting
// for the rest of the gang, not computing. The trainer's phases already leave
// it out (it is exposed comm), so it is not taken out of compute again.
TEST(TrainMetrics, WeightGatherWaitsCountAsWaitNotCompute) {
  WorkerConfig cfg;
  TrainMetrics m(cfg, 3, 4);
  StepReport r = report(1);
  r.isp_prefetch_wait_seconds = 0.1;  // part of exposed_comm_seconds (0.15)
  m.on_step(r);
  m.on_step(r);
  auto s = scrape(m);
  EXPECT_NEAR(s.at(sample_key(cm::kComputeSeconds.name, kRank3)), 2 * 0.75, 1e-12);
  EXPECT_NEAR(s.at(sample_key(cm::kWaitSeconds.name, kRank3)), 2 * 0.25, 1e-12);
}

TEST(TrainMetrics, LastStepIsZeroUntilAStepIsReported) {
  const WorkerConfig cfg;
  TrainMetrics m(cfg, 0, 1);
  EXPECT_EQ(m.last_step(), 0);
  m.on_step(report(41));
  EXPECT_EQ(m.last_step(), 41);
}

TEST(TrainMetrics, MapsAStepReportToTheDesignFamiliesWithTheRankLabel) {
  WorkerConfig cfg;
  TrainMetrics m(cfg, 3, 4);
  m.on_step(report(7));
  auto s = scrape(m);
  EXPECT_EQ(s.at(sample_key(cm::kStep.name, kRank3)), 7);
  EXPECT_EQ(s.at(sample_key("weft_train_steps", kRank3)), 100);
  EXPECT_EQ(s.at(sample_key(cm::kLoss.name, kRank3)), 2.5);
  EXPECT_EQ(s.at(sample_key("weft_grad_norm", kRank3)), 0.75);
  EXPECT_EQ(s.at(sample_key("weft_learning_rate", kRank3)), 1e-3);
  EXPECT_EQ(s.at(sample_key(cm::kTokensPerSecond.name, kRank3)), 4096);
  EXPECT_EQ(s.at(sample_key("weft_mfu", kRank3)), 0.42);
  EXPECT_EQ(s.at(sample_key(cm::kOverlapRatio.name, kRank3)), 0.75);
  EXPECT_EQ(s.at(sample_key("weft_buckets", kRank3)), 2);
  EXPECT_EQ(s.at(sample_key(cm::kBucketCapBytes.name, kRank3)), 1 << 20);
  EXPECT_EQ(s.at(sample_key("weft_sync_comm_seconds_total", with_rank({{"group", "dp"}}))), 0.6);
  EXPECT_EQ(s.at(sample_key(cm::kExposedCommSeconds.name, with_rank({{"group", "dp"}}))),
            0.15);
  EXPECT_EQ(s.at(sample_key("weft_isp_prefetch_wait_seconds_total", kRank3)), 0);
  // Compute: data 0.1 + forward 0.2 + backward 0.4 + optimizer 0.05; the rest
  // of the 1 s step was spent blocked in collectives.
  EXPECT_NEAR(s.at(sample_key(cm::kComputeSeconds.name, kRank3)), 0.75, 1e-12);
  EXPECT_NEAR(s.at(sample_key(cm::kWaitSeconds.name, kRank3)), 0.25, 1e-12);
  EXPECT_EQ(s.at(sample_key("weft_checkpoint_last_step", kRank3)), 0);
  EXPECT_EQ(s.at(sample_key("weft_memory_bytes", with_rank({{"kind", "param"}}))), 100);
  EXPECT_EQ(s.at(sample_key("weft_memory_bytes", with_rank({{"kind", "activation"}}))), 400);
  EXPECT_EQ(
      s.at(sample_key("weft_worker_info",
                      with_rank({{"strategy", "dp"}, {"device", "cpu"}, {"world_size", "4"}}))),
      1);
  m.set_attention_kernel("cudnn");
  EXPECT_EQ(scrape(m).at(sample_key("weft_attention_kernel_info", with_rank({{"kernel", "cudnn"}}))), 1);
  // Step histogram: 1.0 s falls in le=1 but not le=0.5.
  EXPECT_EQ(s.at(sample_key(cm::kStepSecondsCount, kRank3)), 1);
  EXPECT_EQ(s.at(sample_key(cm::kStepSecondsSum, kRank3)), 1.0);
  EXPECT_EQ(s.at(sample_key(std::string(cm::kStepSeconds.name) + "_bucket", with_rank({{"le", "0.5"}}))), 0);
  EXPECT_EQ(s.at(sample_key(std::string(cm::kStepSeconds.name) + "_bucket", with_rank({{"le", "1"}}))), 1);
  // Per-bucket reduce times: histogram and last-step gauge per bucket index.
  EXPECT_EQ(s.at(sample_key("weft_bucket_reduce_seconds_bucket",
                            with_rank({{"bucket", "0"}, {"le", "0.0025"}}))),
            0);
  EXPECT_EQ(s.at(sample_key("weft_bucket_reduce_seconds_bucket",
                            with_rank({{"bucket", "0"}, {"le", "0.005"}}))),
            1);
  EXPECT_EQ(s.at(sample_key("weft_bucket_reduce_seconds_sum", with_rank({{"bucket", "1"}}))), 0.2);
  EXPECT_EQ(s.at(sample_key("weft_bucket_reduce_last_seconds", with_rank({{"bucket", "1"}}))), 0.2);
  for (auto& [key, v] : s)
    if (key.rfind("weft_", 0) == 0) {
      EXPECT_NE(key.find("rank=\"3\""), std::string::npos) << key;
    }
}

TEST(TrainMetrics, PhaseCountersAccumulateTheMeasuredPhases) {
  WorkerConfig cfg;
  TrainMetrics m(cfg, 3, 4);
  m.on_step(report(1));
  m.on_step(report(2));
  auto s = scrape(m);
  auto phase = [&](const char* p) {
    return s.at(sample_key(cm::kPhaseSeconds.name, with_rank({{"phase", p}})));
  };
  EXPECT_DOUBLE_EQ(phase("forward"), 0.4);
  EXPECT_DOUBLE_EQ(phase("backward"), 0.8);
  EXPECT_DOUBLE_EQ(phase("exposed_comm"), 0.3);
  EXPECT_DOUBLE_EQ(phase("other"), 0.2);
  double sum = 0;
  for (const char* p : {"data", "forward", "backward", "optimizer", "exposed_comm", "other"})
    sum += phase(p);
  EXPECT_NEAR(sum, s.at(sample_key(cm::kStepSecondsSum, kRank3)), 1e-12);
  for (const char* kind : {"missing", "excess"})
    EXPECT_NEAR(s.at(sample_key("weft_phase_unaccounted_seconds_total", with_rank({{"kind", kind}}))), 0, 1e-12)
        << kind;
  EXPECT_DOUBLE_EQ(s.at(sample_key("weft_sync_comm_seconds_total", with_rank({{"group", "dp"}}))),
                   1.2);
  EXPECT_EQ(s.at(sample_key(cm::kStepSecondsCount, kRank3)), 2);
}

// "other" is measured, not the remainder: a phase the trainer failed to time
// (or timed twice) is not hidden by it but counted as unaccounted time.
TEST(TrainMetrics, PhasesThatMissOrExceedTheStepAreCountedNotHidden) {
  WorkerConfig cfg;
  TrainMetrics m(cfg, 0, 1);
  StepReport r = report(1);
  r.forward_seconds = 0;  // 0.2 s of the 1 s step in no phase
  m.on_step(r);
  r = report(2);
  r.step_seconds = 0.5;  // the phases sum to 1 s: 0.5 s counted twice
  m.on_step(r);
  auto s = scrape(m);
  const std::map<std::string, std::string> other{{"rank", "0"}, {"phase", "other"}};
  EXPECT_DOUBLE_EQ(s.at(sample_key(cm::kPhaseSeconds.name, other)), 0.2);
  EXPECT_NEAR(s.at(sample_key("weft_phase_unaccounted_seconds_total", {{"rank", "0"}, {"kind", "missing"}})), 0.2,
              1e-12);
  EXPECT_NEAR(s.at(sample_key("weft_phase_unaccounted_seconds_total", {{"rank", "0"}, {"kind", "excess"}})), 0.5,
              1e-12);
}

TEST(TrainMetrics, CommCountersFollowCumulativeStatsAndOnlyGoUp) {
  WorkerConfig cfg;
  auto dp = std::make_shared<StatsOnlyComm>("dp");
  auto world = std::make_shared<StatsOnlyComm>("world");
  TrainMetrics m(cfg, 3, 4, {dp, world, dp, nullptr});  // a repeat is counted once
  dp->stats_.by_op["all_reduce"] = {10, 0.5, 4000};
  m.on_step(report(1));
  dp->stats_.by_op["all_reduce"] = {25, 1.25, 10000};
  dp->stats_.by_op["broadcast"] = {1, 0.01, 64};
  world->stats_.by_op["barrier"] = {2, 0.02, 0};
  m.on_step(report(2));
  auto s = scrape(m);
  auto key = [](const char* n, const char* op, const char* g) {
    return sample_key(n, with_rank({{"op", op}, {"group", g}}));
  };
  EXPECT_DOUBLE_EQ(s.at(key("weft_comm_seconds_total", "all_reduce", "dp")), 1.25);
  EXPECT_EQ(s.at(key("weft_comm_bytes_total", "all_reduce", "dp")), 10000);
  EXPECT_EQ(s.at(key("weft_comm_operations_total", "all_reduce", "dp")), 25);
  EXPECT_EQ(s.at(key("weft_comm_bytes_total", "broadcast", "dp")), 64);
  EXPECT_EQ(s.at(key("weft_comm_operations_total", "barrier", "world")), 2);
  // A source that went backwards leaves the counters where they were.
  dp->stats_.by_op["all_reduce"] = {1, 0.1, 10};
  m.on_step(report(3));
  s = scrape(m);
  EXPECT_DOUBLE_EQ(s.at(key("weft_comm_seconds_total", "all_reduce", "dp")), 1.25);
  EXPECT_EQ(s.at(key("weft_comm_bytes_total", "all_reduce", "dp")), 10000);
}

TEST(TrainMetrics, RebucketingRemovesVanishedLastStepGaugesButKeepsHistograms) {
  WorkerConfig cfg;
  TrainMetrics m(cfg, 3, 4);
  StepReport r = report(1);
  r.bucket_seconds = {0.1, 0.2, 0.3};
  r.bucket_count = 3;
  m.on_step(r);
  r = report(2);
  r.bucket_seconds = {0.5};
  r.bucket_count = 1;
  r.bucket_cap_bytes = 4 << 20;
  m.on_step(r);
  auto s = scrape(m);
  EXPECT_EQ(s.at(sample_key("weft_buckets", kRank3)), 1);
  EXPECT_EQ(s.at(sample_key(cm::kBucketCapBytes.name, kRank3)), 4 << 20);
  EXPECT_EQ(s.at(sample_key("weft_bucket_reduce_last_seconds", with_rank({{"bucket", "0"}}))), 0.5);
  EXPECT_EQ(s.count(sample_key("weft_bucket_reduce_last_seconds", with_rank({{"bucket", "2"}}))),
            0u);
  EXPECT_EQ(s.at(sample_key("weft_bucket_reduce_seconds_count", with_rank({{"bucket", "0"}}))), 2);
  EXPECT_EQ(s.at(sample_key("weft_bucket_reduce_seconds_count", with_rank({{"bucket", "2"}}))), 1);
}

TEST(TrainMetrics, TrainingAloneExportsNoSyncSeries) {
  WorkerConfig cfg;
  cfg.parallel.bucket_cap_mb = 2;
  TrainMetrics m(cfg, 0, 1);
  m.set_bucket_cap_mb(2);  // what the strategy resolved at start-up
  StepReport r = report(1);
  r.sync_group.clear();
  m.on_step(r);
  auto s = scrape(m);
  EXPECT_EQ(
      s.count(sample_key(cm::kExposedCommSeconds.name, {{"rank", "0"}, {"group", "dp"}})), 0u);
  EXPECT_EQ(s.at(sample_key(cm::kOverlapRatio.name, {{"rank", "0"}})), 0);
  EXPECT_EQ(s.at(sample_key(cm::kBucketCapBytes.name, {{"rank", "0"}})),
            2 << 20);  // the start-up value: no step re-bucketed
}

// bucket_cap_mb auto: the config holds no number; the strategy's resolved
// cap is exported from startup, before any step (the tuner starts from it).
TEST(TrainMetrics, AutoBucketCapIsExportedBeforeTheFirstStep) {
  WorkerConfig cfg;  // bucket_cap_mb auto
  TrainMetrics m(cfg, 0, 2);
  EXPECT_EQ(scrape(m).at(sample_key(cm::kBucketCapBytes.name, {{"rank", "0"}})), 0);
  m.set_bucket_cap_mb(1.75);
  EXPECT_EQ(scrape(m).at(sample_key(cm::kBucketCapBytes.name, {{"rank", "0"}})), 1.75 * (1 << 20));
  m.set_bucket_cap_mb(0);  // training alone: no buckets, the value stays
  EXPECT_EQ(scrape(m).at(sample_key(cm::kBucketCapBytes.name, {{"rank", "0"}})), 1.75 * (1 << 20));
}

TEST(TrainMetrics, CheckpointSetsTheLastStep) {
  WorkerConfig cfg;
  TrainMetrics m(cfg, 1, 2);
  m.on_checkpoint(40);
  EXPECT_EQ(scrape(m).at(sample_key("weft_checkpoint_last_step", {{"rank", "1"}})), 40);
}

TEST(TrainMetrics, EvaluationSetsTheHeldOutLossAndItsStep) {
  WorkerConfig cfg;
  TrainMetrics m(cfg, 3, 4);
  auto s = scrape(m);
  EXPECT_EQ(s.at(sample_key(cm::kEvalLoss.name, kRank3)), 0) << "0 before the first evaluation";
  m.on_eval(200, 3.25);
  s = scrape(m);
  EXPECT_EQ(s.at(sample_key(cm::kEvalLoss.name, kRank3)), 3.25);
  EXPECT_EQ(s.at(sample_key(cm::kEvalStep.name, kRank3)), 200);
}

TEST(TrainMetrics, DurationBucketsSpanMillisecondsToMinutes) {
  const auto& b = duration_buckets();
  EXPECT_TRUE(std::is_sorted(b.begin(), b.end()));
  EXPECT_LE(b.front(), 0.001);
  EXPECT_GE(b.back(), 300);
}

TEST(MetricsEndpoint, IsBasePlusLocalRankAndZeroDisables) {
  MetricsConfig m;
  m.port = 9400;
  EXPECT_EQ(metrics_endpoint(m, 0).port, 9400);
  EXPECT_EQ(metrics_endpoint(m, 3).port, 9403);
  m.port = 65535;
  auto e = metrics_endpoint(m, 1);
  EXPECT_EQ(e.port, 0);
  EXPECT_THAT(e.problem, ::testing::HasSubstr("65535 + LOCAL_RANK 1"));
  m.port = 0;
  EXPECT_EQ(metrics_endpoint(m, 5).port, 0);
  EXPECT_TRUE(metrics_endpoint(m, 5).problem.empty());
}

// After the last step a rank of a TrainingJob keeps serving one scrape
// interval, so the last step reaches the dashboard; a standalone run exits at once.
TEST(MetricsEndpoint, LingersOneScrapeIntervalInATrainingJobOnlyUnlessConfigured) {
  MetricsConfig m;
  EXPECT_EQ(metrics_linger_seconds(m, true), 15);
  EXPECT_EQ(metrics_linger_seconds(m, false), 0);
  m.linger_seconds = 0;
  EXPECT_EQ(metrics_linger_seconds(m, true), 0);
  m.linger_seconds = 30;
  EXPECT_EQ(metrics_linger_seconds(m, false), 30);
  EXPECT_EQ(parse_config("metrics: {linger_seconds: 5}\n").metrics.linger_seconds, 5);
  EXPECT_THROW(parse_config("metrics: {linger_seconds: -2}\n"), ConfigError);
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

TEST(TrainMetrics, BucketCapChangesAndRejectionsAndTheNetworkEmulator) {
  WorkerConfig cfg;
  {
    TrainMetrics off(cfg, 3, 4);
    auto s = scrape(off);
    EXPECT_EQ(s[sample_key("weft_comm_simulated", with_rank({{"latency_us", "0"}, {"bandwidth_gbps", "0"}}))], 0);
  }
  cfg.comm.simulate = {200, 10};
  TrainMetrics m(cfg, 3, 4);
  StepReport r = report(7);
  r.bucket_cap_step = 5;
  r.bucket_cap_rejected = 2;
  m.on_step(r);
  auto s = scrape(m);
  EXPECT_EQ(s[sample_key("weft_comm_simulated", with_rank({{"latency_us", "200"}, {"bandwidth_gbps", "10"}}))], 1);
  EXPECT_EQ(s[sample_key("weft_bucket_cap_step", kRank3)], 5);
  EXPECT_EQ(s[sample_key("weft_bucket_cap_rejected_total", kRank3)], 2);
  r.step = 8;
  r.bucket_cap_rejected = 3;
  m.on_step(r);
  s = scrape(m);
  EXPECT_EQ(s[sample_key("weft_bucket_cap_rejected_total", kRank3)], 3) << "cumulative, not added up";
}

}  // namespace
}  // namespace weft
