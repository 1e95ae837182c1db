// status.progress from rank 0's metrics (trainingjob/progress.h), on
// exposition captured from a real weft-worker.
#include <gtest/gtest.h>

#include <fstream>
#include <limits>
#include <sstream>

#include "canned_exposition.h"
#include "trainingjob/progress.h"
#include "trainingjob/types.h"

namespace weft::tj {
namespace {
namespace cm = contract::metrics;
using weft::testing::rank_info_sample;
using weft::testing::rank_label;
using weft::testing::sample;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Progress, FromACapturedWorkerExposition) {
  auto parsed = scrape::parse_text(read_file(WEFT_SOURCE_DIR "/tests/scrape/testdata/weft_worker_rank0.prom"));
  ASSERT_TRUE(parsed.ok());
  auto p = progress_from_metrics(parsed.exposition);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->step, 857);
  EXPECT_DOUBLE_EQ(p->loss, 0.8413759469985962);
  EXPECT_DOUBLE_EQ(p->tokens_per_second, 9269.351681628765);
  EXPECT_GE(p->overlap_ratio, 0.0);
  EXPECT_LE(p->overlap_ratio, 1.0);
  auto j = progress_json(*p, "2026-11-23T10:00:00Z");
  EXPECT_EQ(j["step"], 857);
  EXPECT_EQ(j["updatedAt"], "2026-11-23T10:00:00Z");
  EXPECT_TRUE(j["overlapRatio"].is_number());
  // Status carries what `kubectl get tj` can show in a column.
  EXPECT_EQ(j["loss"].dump(), "0.8414");
  EXPECT_EQ(j["tokensPerSecond"].dump(), "9269.0");
}

TEST(Progress, StatusRoundsToWhatAColumnCanShow) {
  Progress p;
  p.step = 68;
  p.loss = 0.7928609848022461;
  p.tokens_per_second = 11642.67562033901;
  p.overlap_ratio = 0.4955281041540248;
  auto j = progress_json(p, "t");
  EXPECT_EQ(j["loss"].dump(), "0.7929");
  EXPECT_EQ(j["tokensPerSecond"].dump(), "11643.0");
  EXPECT_EQ(j["overlapRatio"].dump(), "0.496");
  p.loss = 10.81234567;
  EXPECT_EQ(progress_json(p, "t")["loss"].dump(), "10.8123");
}

TEST(Progress, OnlyRankZeroAndOnlyWithAStep) {
  auto other_rank = scrape::parse_text(sample(cm::kStep, "5", rank_label(1)) + sample(cm::kLoss, "2", rank_label(1)));
  ASSERT_TRUE(other_rank.ok());
  EXPECT_FALSE(progress_from_metrics(other_rank.exposition));
  auto no_step = scrape::parse_text(sample(cm::kLoss, "2", rank_label(0)));
  EXPECT_FALSE(progress_from_metrics(no_step.exposition));
  auto diverged = scrape::parse_text(sample(cm::kStep, "3", rank_label(0)) + sample(cm::kLoss, "NaN", rank_label(0)));
  auto p = progress_from_metrics(diverged.exposition);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->step, 3);
  EXPECT_TRUE(progress_json(*p, "t")["loss"].is_null());  // NaN is not JSON
}

// Rank 0's termination message (contract::kProgressLinePrefix): its final
// progress line, wherever it is among the message's lines.
TEST(Progress, FinalProgressFromTheTerminationMessage) {
  auto p = progress_from_termination_message(
      "weft-progress {\"step\":200,\"loss\":0.71234,\"tokensPerSecond\":17405.2,\"overlapRatio\":0.3181}\n");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->step, 200);
  EXPECT_DOUBLE_EQ(p->loss, 0.71234);
  EXPECT_EQ(progress_json(*p, "t")["tokensPerSecond"].dump(), "17405.0");
  EXPECT_EQ(progress_json(*p, "t")["overlapRatio"].dump(), "0.318");
  // A stop: the line, then why.
  p = progress_from_termination_message(
      "weft-progress {\"step\":40,\"loss\":null,\"tokensPerSecond\":1,\"overlapRatio\":0}\nstopped by signal 15 at step 40");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->step, 40);
  EXPECT_TRUE(progress_json(*p, "t")["loss"].is_null());  // a diverged loss
  // A crash's log tail, or a line that is not the contract's JSON.
  EXPECT_FALSE(progress_from_termination_message("fatal: out of memory\n"));
  EXPECT_FALSE(progress_from_termination_message("weft-progress {\"loss\":1}\n"));
  EXPECT_FALSE(progress_from_termination_message("weft-progress step=3\n"));
  EXPECT_FALSE(progress_from_termination_message(""));
}

// The held-out loss (eval.every): from rank 0's metrics once an evaluation
// ran, from the final progress line when it carries one; absent otherwise,
// so `kubectl get tj` shows an empty Eval column rather than a 0.
TEST(Progress, HeldOutLossOnceEvaluated) {
  auto before = scrape::parse_text(sample(cm::kStep, "5", rank_label(0)) + sample(cm::kEvalLoss, "0", rank_label(0)) +
                                   sample(cm::kEvalStep, "0", rank_label(0)));
  auto p = progress_from_metrics(before.exposition);
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->eval_loss);
  EXPECT_FALSE(progress_json(*p, "t").contains("evalLoss"));
  auto after = scrape::parse_text(sample(cm::kStep, "60", rank_label(0)) + sample(cm::kEvalLoss, "2.345678", rank_label(0)) +
                                  sample(cm::kEvalStep, "50", rank_label(0)));
  p = progress_from_metrics(after.exposition);
  ASSERT_TRUE(p && p->eval_loss);
  EXPECT_EQ(progress_json(*p, "t")["evalLoss"].dump(), "2.3457");
  p = progress_from_termination_message(
      "weft-progress {\"step\":200,\"loss\":0.71,\"evalLoss\":0.7512,\"tokensPerSecond\":1,\"overlapRatio\":0}\n");
  ASSERT_TRUE(p && p->eval_loss);
  EXPECT_DOUBLE_EQ(*p->eval_loss, 0.7512);
  p = progress_from_termination_message("weft-progress {\"step\":200,\"loss\":0.71}\n");
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->eval_loss);
}

TEST(Progress, MetricsPortComesFromTheWorkerConfig) {
  TrainingJobSpec spec;
  EXPECT_EQ(spec.metrics_port(), 9400);
  spec.worker_read = read_worker_config({{"metrics", {{"port", 9555}}}}, Json::object());
  EXPECT_EQ(spec.metrics_port(), 9555);
  spec.worker_read = read_worker_config({{"metrics", {{"port", 0}}}}, Json::object());
  EXPECT_EQ(spec.metrics_port(), 0);
  // The pod's WEFT_METRICS_PORT is where the ranks serve, as the worker reads it.
  spec.worker_read = read_worker_config(Json::object(), {{"env", {{{"name", "WEFT_METRICS_PORT"}, {"value", "9600"}}}}});
  EXPECT_EQ(spec.metrics_port(), 9600);
}

}  // namespace
}  // namespace weft::tj
