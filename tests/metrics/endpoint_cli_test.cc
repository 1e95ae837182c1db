// Where metrics are served, from the command line: weft-run prints each
// rank's endpoint by the rule the worker binds with, and a worker whose port
// is taken warns and trains on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>

#include "metrics/metrics_test_util.h"
#include "weft_metrics.h"
#include "support/net.h"

namespace weft::metrics_test {
namespace {

namespace cm = contract::metrics;

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string config() { return std::string(WEFT_SOURCE_DIR) + "/tests/metrics/metrics_run.yaml"; }

// Runs to completion (limit_s at most) and returns exit code and output.
std::pair<int, std::string> run_to_end(const std::vector<std::string>& argv,
                                       const std::map<std::string, std::string>& env,
                                       double limit_s) {
  const fs::path log =
      fs::temp_directory_path() / ("weft-metrics-cli-" + std::to_string(getpid()) + ".log");
  Child c = spawn(argv, env, log.string());
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int(limit_s * 1000));
  int status = 0, code = -1;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
      code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      c.pid = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (c.pid > 0) stop(c, 2);
  std::string out = read_file(log.string());
  fs::remove(log);
  return {code, out};
}

TEST(WeftRunMetrics, PrintsEachRanksEndpointFromTheConfigAndEnvironment) {
  // /bin/true as the worker: only weft-run's own output matters here.
  auto [code, out] = run_to_end({std::string(WEFT_BIN_DIR) + "/weft-run", "-n", "3", "--worker",
                                 "/bin/true", "--", config(), "--steps", "5"},
                                {{"WEFT_METRICS_PORT", "19400"}}, 30);
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("weft-run: rank 0 metrics at http://127.0.0.1:19400/metrics"));
  EXPECT_THAT(out, HasSubstr("weft-run: rank 2 metrics at http://127.0.0.1:19402/metrics"));
}

TEST(WeftRunMetrics, DefaultPortIs9400AndZeroSaysDisabled) {
  auto [code, out] = run_to_end(
      {std::string(WEFT_BIN_DIR) + "/weft-run", "-n", "2", "--worker", "/bin/true", "--", config()},
      {{"WEFT_METRICS_PORT", ""}}, 30);
  EXPECT_THAT(out, HasSubstr("weft-run: rank 1 metrics at http://127.0.0.1:9401/metrics")) << out;
  std::tie(code, out) = run_to_end(
      {std::string(WEFT_BIN_DIR) + "/weft-run", "-n", "2", "--worker", "/bin/true", "--", config()},
      {{"WEFT_METRICS_PORT", "0"}}, 30);
  EXPECT_THAT(out, HasSubstr("weft-run: metrics are disabled (metrics.port 0)")) << out;
  EXPECT_THAT(out, ::testing::Not(HasSubstr("metrics at http")));
}

TEST(WeftRunMetrics, AnUnreadableConfigIsReportedNotFatal) {
  auto [code, out] = run_to_end({std::string(WEFT_BIN_DIR) + "/weft-run", "-n", "1", "--worker",
                                 "/bin/true", "--", "/nonexistent/config.yaml"},
                                {}, 30);
  EXPECT_EQ(code, 0) << out;  // the worker (here /bin/true) decides about the config
  EXPECT_THAT(out, HasSubstr("weft-run: bad config: "));
  EXPECT_THAT(out, HasSubstr("/nonexistent/config.yaml"));
}

TEST(WorkerMetrics, BusyPortWarnsAndTrainingContinues) {
  // Hold a loopback listener on the port the worker will try.
  auto busy = std::make_unique<weft::testing::Listener>(0, 1);
  const int port = busy->port();
  const fs::path out_dir =
      fs::temp_directory_path() / ("weft-metrics-busy-" + std::to_string(getpid()));
  auto [code, out] = run_to_end({std::string(WEFT_BIN_DIR) + "/weft-worker", config(), "--steps",
                                 "3", "--out", out_dir.string(), "--no-resume"},
                                {{"WEFT_METRICS_PORT", std::to_string(port)}}, 60);
  busy.reset();
  fs::remove_all(out_dir);
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("metrics disabled: cannot serve on port " + std::to_string(port)))
      << out;
  EXPECT_THAT(out, HasSubstr("done after 3 steps")) << out;
}

// In a TrainingJob (WEFT_JOB_UID set by the operator) the operator reads the
// port for progress, tuning and stragglers: a taken port is an exit 1 naming
// it, before any step, not a rank training unseen behind another process.
TEST(WorkerMetrics, BusyPortInATrainingJobExitsNamingThePort) {
  auto busy = std::make_unique<weft::testing::Listener>(0, 1);
  const int port = busy->port();
  const fs::path out_dir = fs::temp_directory_path() / ("weft-metrics-busy-tj-" + std::to_string(getpid()));
  auto [code, out] = run_to_end({std::string(WEFT_BIN_DIR) + "/weft-worker", config(), "--steps", "3", "--out",
                                 out_dir.string(), "--no-resume"},
                                {{"WEFT_METRICS_PORT", std::to_string(port)}, {"WEFT_JOB_UID", "0b1e-uid"}}, 60);
  busy.reset();
  fs::remove_all(out_dir);
  EXPECT_EQ(code, 1) << out;
  EXPECT_THAT(out, HasSubstr("metrics port " + std::to_string(port) + " is taken")) << out;
  EXPECT_THAT(out, ::testing::Not(HasSubstr("step 1/"))) << out;
}

// Every rank says whose it is: the job uid, attempt, global rank, pod index
// and local rank the operator compares with the pod it asked.
TEST(WorkerMetrics, TheRankInfoSeriesNamesTheJobAttemptAndRank) {
  const int port = weft::testing::free_port();
  const fs::path out_dir = fs::temp_directory_path() / ("weft-metrics-info-" + std::to_string(getpid()));
  Child c = spawn({std::string(WEFT_BIN_DIR) + "/weft-worker", config(), "--steps", "100000", "--out",
                   out_dir.string(), "--no-resume"},
                  {{"WEFT_METRICS_PORT", std::to_string(port)}, {"WEFT_JOB_UID", "0b1e-uid"}, {"WEFT_ATTEMPT", "3"},
                   {"NODE_RANK", "2"}},
                  (out_dir.string() + ".log"));
  std::string body;
  for (int i = 0; i < 600 && body.find(cm::kRankInfo.name) == std::string::npos; ++i) {
    body = weft::testing::http_get(port, "/metrics", std::chrono::seconds(2)).body;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  stop(c, 5);
  fs::remove_all(out_dir);
  fs::remove(out_dir.string() + ".log");
  EXPECT_THAT(body, HasSubstr(std::string(cm::kRankInfo.name) + "{attempt=\"3\",job_uid=\"0b1e-uid\",local_rank=\"0\","
                              "node_rank=\"2\",rank=\"0\"} 1"))
      << body;
}

// /ready (the readiness probe): 503 until the rank has finished a step, then
// 200 naming the step, on the worker's metrics port.
TEST(WorkerMetrics, ReadyAnswersOnceAStepHasFinished) {
  const int port = weft::testing::free_port();
  const fs::path out_dir = fs::temp_directory_path() / ("weft-metrics-ready-" + std::to_string(getpid()));
  const fs::path log = out_dir.string() + ".log";
  Child c = spawn({std::string(WEFT_BIN_DIR) + "/weft-worker", config(), "--out", out_dir.string(), "--no-resume"},
                  {{"WEFT_METRICS_PORT", std::to_string(port)}}, log.string());
  weft::testing::HttpResponse r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    r = weft::testing::http_get(port, "/ready", std::chrono::seconds(2));
    if (r.status == 200) break;
    // Before the server is up nothing answers; after, a rank that has not
    // finished a step says so with 503, and what it is doing.
    if (r.status != 0) {
      EXPECT_EQ(r.status, 503) << r.body;
      EXPECT_THAT(r.body, HasSubstr("rank 0 is not training yet: ")) << r.body;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop(c, 30);
  const std::string out = read_file(log.string());
  fs::remove(log);
  fs::remove_all(out_dir);
  EXPECT_EQ(r.status, 200) << out;
  EXPECT_THAT(r.body, HasSubstr("rank 0 trains: step ")) << r.body;
  EXPECT_THAT(out, HasSubstr("(readiness at /ready)")) << out;
}

// /ready is served from before the rendezvous, exactly when the
// troubleshooting guide says to curl it: rank 0 of two, alone, answers 503
// naming the rendezvous it waits in, and its /metrics already says whose rank
// it is; once rank 1 joins and a step finishes, 200.
TEST(WorkerMetrics, ReadyIsServedWhileTheRankWaitsInTheRendezvous) {
  const int port = weft::testing::free_port();
  const int master = weft::testing::free_port();
  const fs::path dir = fs::temp_directory_path() / ("weft-metrics-rdzv-" + std::to_string(getpid()));
  std::map<std::string, std::string> env = {{"WORLD_SIZE", "2"},         {"MASTER_ADDR", "127.0.0.1"},
                                            {"MASTER_PORT", std::to_string(master)},
                                            {"WEFT_JOB_UID", "0b1e-uid"}, {"WEFT_METRICS_PORT", std::to_string(port)}};
  const std::vector<std::string> argv = {std::string(WEFT_BIN_DIR) + "/weft-worker", config(), "--out",
                                         (dir / "out").string(), "--checkpoint-dir", (dir / "ckpt").string(),
                                         "--no-resume"};
  env["RANK"] = "0";
  Child r0 = spawn(argv, env, dir.string() + "-0.log");
  weft::testing::HttpResponse ready;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline && running(r0)) {
    ready = weft::testing::http_get(port, "/ready", std::chrono::seconds(2));
    if (ready.body.find("waiting in the rendezvous") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const weft::testing::HttpResponse metrics = weft::testing::http_get(port, "/metrics", std::chrono::seconds(2));
  EXPECT_EQ(ready.status, 503) << ready.body << read_file(dir.string() + "-0.log");
  EXPECT_THAT(ready.body, HasSubstr("rank 0 is not training yet: waiting in the rendezvous at 127.0.0.1:" +
                                    std::to_string(master) + " for all 2 ranks"));
  EXPECT_THAT(metrics.body, HasSubstr(std::string(cm::kRankInfo.name) + "{attempt=\"0\",job_uid=\"0b1e-uid\""))
      << metrics.body;

  env["RANK"] = "1";
  env["WEFT_METRICS_PORT"] = "0";
  Child r1 = spawn(argv, env, dir.string() + "-1.log");
  while (std::chrono::steady_clock::now() < deadline + std::chrono::seconds(60) && running(r0)) {
    ready = weft::testing::http_get(port, "/ready", std::chrono::seconds(2));
    if (ready.status == 200) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string out = read_file(dir.string() + "-0.log");
  stop(r0, 30);
  stop(r1, 30);
  fs::remove_all(dir);
  fs::remove(dir.string() + "-0.log");
  fs::remove(dir.string() + "-1.log");
  EXPECT_EQ(ready.status, 200) << ready.body << out;
  EXPECT_THAT(ready.body, HasSubstr("rank 0 trains: step ")) << ready.body;
}

}  // namespace
}  // namespace weft::metrics_test
