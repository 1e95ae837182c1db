// The operator's three readers of worker metrics — status.progress
// (progress_from_metrics), the bucket-size tuner (read_rank_sample) and
// straggler detection (read_pace) — against what real ranks serve: a short
// weft-run of each strategy (dp and zero on 2 ranks, isp on 4: weights over
// wp = 2, gradients synchronised over wdp = 2), scraped from its metrics
// ports over HTTP. Every family the operator reads (contract/weft_metrics.h)
// must be in the scrape with its contract type, and each reader must return
// the scrape's own values. A metric renamed on one side only fails here.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "scrape/http_scraper.h"
#include "support/net.h"
#include "support/run_process.h"
#include "trainingjob/progress.h"
#include "trainingjob/straggler_policy.h"
#include "tuner/trial_window.h"
#include "weft_metrics.h"

namespace weft::tj {
namespace {

namespace cm = contract::metrics;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr double kCapMb = 0.05;

// A small run of `parallel` that steps in milliseconds on a shared
// 2-core machine and evaluates every 2 steps (weft_eval_loss gets a value).
std::string config(const std::string& parallel) {
  return "model: {vocab_size: 128, d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, "
         "max_seq_len: 32}\n"
         "train: {steps: 100000, micro_batch: 4, seq_len: 32, log_every: 1000}\n"
         "optim: {warmup_steps: 2}\n"
         "eval: {every: 2, batches: 1}\n"
         "checkpoint: {every: 0}\n"
         "parallel: {bucket_cap_mb: " +
         std::to_string(kCapMb) + ", " + parallel + "}\n";
}

// Starts argv in its own process group with `env` added, output to `log`.
pid_t launch(const std::vector<std::string>& argv, const std::vector<std::string>& env,
             const std::string& log) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::setpgid(0, 0);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(fd, 1);
  ::dup2(fd, 2);
  for (const std::string& e : env) ::putenv(const_cast<char*>(e.c_str()));
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  ::_exit(127);
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Scrapes of every rank of an `nproc`-rank run once each has finished 4
// steps and rank 0 has evaluated; empty on a timeout or an exited run.
std::vector<scrape::Exposition> scrape_run(const std::string& parallel, int nproc,
                                           const std::string& tag, std::string* log) {
  const std::filesystem::path dir = weft::testing::fresh_dir("weft-exposition-" + tag);
  weft::testing::write_file(dir / "run.yaml", config(parallel));
  const int base = weft::testing::free_port_range(nproc);
  const pid_t run =
      launch({weft::testing::bin("weft-run"), "-n", std::to_string(nproc), "--",
              (dir / "run.yaml").string(), "--out", (dir / "out").string(), "--checkpoint-dir",
              (dir / "ckpt").string(), "--no-resume"},
             {"WEFT_METRICS_PORT=" + std::to_string(base)}, (dir / "run.log").string());
  std::vector<scrape::Exposition> out;
  const auto deadline = Clock::now() + 50s;  // under ctest's 60 s
  for (int r = 0; r < nproc && Clock::now() < deadline;) {
    if (::waitpid(run, nullptr, WNOHANG) == run) break;
    scrape::ScrapeResult got = scrape::scrape({"127.0.0.1", base + r, "/metrics"}, 3s);
    const double step = got.ok() ? got.metrics.sum(cm::kStep.name).value_or(0) : 0;
    const double eval = got.ok() ? got.metrics.sum(cm::kEvalStep.name).value_or(0) : 0;
    if (step >= 4 && (r > 0 || eval > 0)) {
      out.push_back(std::move(got.metrics));
      ++r;
    } else {
      std::this_thread::sleep_for(200ms);
    }
  }
  ::kill(-run, SIGTERM);
  ::waitpid(run, nullptr, 0);
  *log = slurp(dir / "run.log");
  if (static_cast<int>(out.size()) == nproc)
    std::filesystem::remove_all(dir);
  else
    out.clear();
  return out;
}

scrape::MetricType scrape_type(cm::Type t) {
  switch (t) {
    case cm::Type::Gauge:
      return scrape::MetricType::Gauge;
    case cm::Type::Counter:
      return scrape::MetricType::Counter;
    case cm::Type::Histogram:
      return scrape::MetricType::Histogram;
  }
  return scrape::MetricType::Untyped;
}

// The value of rank `r`'s only sample of `name`.
double rank_value(const scrape::Exposition& e, const char* name, int r) {
  return e.value(name, {{cm::kLabelRank, std::to_string(r)}}).value_or(std::nan(""));
}

struct Run {
  const char* tag;
  const char* parallel;  // the config's parallel: section, inline
  int nproc;
};

// The test's name in ctest ("... # GetParam() = dp"), not the struct's bytes.
void PrintTo(const Run& r, std::ostream* os) { *os << r.tag; }

class WorkerExposition : public ::testing::TestWithParam<Run> {};

TEST_P(WorkerExposition, EveryReaderOfTheOperatorReadsARealRanksScrape) {
  const auto [tag, parallel, nproc] = GetParam();
  std::string log;
  const std::vector<scrape::Exposition> ranks = scrape_run(parallel, nproc, tag, &log);
  ASSERT_EQ(static_cast<int>(ranks.size()), nproc)
      << "the " << tag << " run never served " << nproc << " stepping ranks:\n"
      << log;

  for (int r = 0; r < nproc; ++r) {
    const scrape::Exposition& e = ranks[r];
    // Every family the operator reads, with the contract's type.
    for (const cm::Family& f : cm::kOperatorReads) {
      auto it = e.families.find(f.name);
      ASSERT_NE(it, e.families.end())
          << "rank " << r << " of " << tag << " does not export " << f.name;
      EXPECT_EQ(it->second.type, scrape_type(f.type)) << f.name;
    }
    const std::string* info_rank = e.find(cm::kRankInfo.name).front()->label(cm::kLabelInfoRank);
    ASSERT_TRUE(info_rank);
    EXPECT_EQ(*info_rank, std::to_string(r));

    // The tuner: one sample per rank, on the configured cap.
    const auto sample = tuner::read_rank_sample(e);
    ASSERT_TRUE(sample) << "rank " << r;
    EXPECT_EQ(sample->step, rank_value(e, cm::kStep.name, r));
    EXPECT_TRUE(tuner::reports_cap(sample->cap_bytes, kCapMb)) << sample->cap_bytes;
    EXPECT_GE(sample->step_seconds_count, 4);
    EXPECT_GT(sample->step_seconds_sum, 0);
    EXPECT_EQ(sample->step_seconds_sum, rank_value(e, cm::kStepSecondsSum, r));
    EXPECT_GE(sample->exposed_seconds, 0);

    // Stragglers: compute and wait of this rank's steps.
    const auto pace = read_pace(r, e);
    ASSERT_TRUE(pace) << "rank " << r;
    EXPECT_EQ(pace->step, sample->step);
    EXPECT_GT(pace->compute, 0);
    EXPECT_GE(pace->wait, 0);
    EXPECT_EQ(pace->compute, rank_value(e, cm::kComputeSeconds.name, r));
    // Compute and wait split the steps' wall time.
    EXPECT_NEAR(pace->compute + pace->wait, sample->step_seconds_sum,
                1e-6 + 1e-6 * sample->step_seconds_sum);
  }

  // status.progress from rank 0.
  const auto p = progress_from_metrics(ranks[0]);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->step, static_cast<long>(rank_value(ranks[0], cm::kStep.name, 0)));
  EXPECT_TRUE(std::isfinite(p->loss) && p->loss > 0) << p->loss;
  EXPECT_GT(p->tokens_per_second, 0);
  EXPECT_GE(p->overlap_ratio, 0);
  EXPECT_LE(p->overlap_ratio, 1);
  ASSERT_TRUE(p->eval_loss);
  EXPECT_TRUE(std::isfinite(*p->eval_loss) && *p->eval_loss > 0);
  ASSERT_TRUE(p->exposed_comm_seconds);
  EXPECT_GE(*p->exposed_comm_seconds, 0);
  ASSERT_TRUE(p->bucket_cap_mb);
  EXPECT_NEAR(*p->bucket_cap_mb, kCapMb, 1e-6);
  // weft-run's ranks are no TrainingJob's: attempt 0, pod 0, local rank 0.
  EXPECT_EQ(not_this_rank(ranks[0], "", 0, 0), "");
}

INSTANTIATE_TEST_SUITE_P(Strategies, WorkerExposition,
                         ::testing::Values(Run{"dp", "strategy: dp", 2},
                                           Run{"zero", "strategy: zero", 2},
                                           Run{"isp", "strategy: isp, sp: 1, wp: 2", 4}),
                         [](const auto& info) { return std::string(info.param.tag); });

}  // namespace
}  // namespace weft::tj
