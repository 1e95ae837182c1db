// Where metrics are served, from the command line: weft-run prints each
// rank's endpoint by the rule the worker binds with, and a worker whose port
// is taken warns and trains on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>

#include "metrics/metrics_test_util.h"
#include "support/net.h"

namespace weft::metrics_test {
namespace {

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

}  // namespace
}  // namespace weft::metrics_test
