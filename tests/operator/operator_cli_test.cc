// weft-operator's command line, run as a user would run the binary: every
// numeric flag is bounded and a value outside its range is refused by name
// with exit 2, before anything connects; a kubeconfig that is not a regular
// file (a FIFO, /dev/zero) is refused at once, not read forever.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <string>
#include <vector>

#include "support/run_process.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using weft::testing::has;
using weft::testing::run_process;
using weft::testing::seconds_since;

const std::string kOperator = weft::testing::bin("weft-operator");

weft::testing::ProcessResult run_operator(std::vector<std::string> args) {
  args.insert(args.begin(), kOperator);
  return run_process(args, {}, 0, "", 20s);
}

TEST(OperatorFlags, OutOfRangeNumbersAreRefusedByNameWithExitTwo) {
  // A kubeconfig that does not exist: flags that pass their checks get as
  // far as loading it, which fails with exit 2 and names the file.
  const std::string none = "/nonexistent/weft-operator-kubeconfig";
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> bad = {
      {{"--lease-duration", "nan"}, "--lease-duration"},
      {{"--lease-duration", "-1"}, "--lease-duration"},
      {{"--lease-duration", "1e300"}, "--lease-duration"},
      {{"--lease-duration", "inf"}, "--lease-duration"},
      {{"--renew-deadline", "nan"}, "--renew-deadline"},
      {{"--retry-period", "0"}, "--retry-period"},
      {{"--qps", "nan"}, "--qps"},
      {{"--qps", "-5"}, "--qps"},
      {{"--qps", "1e300"}, "--qps"},
      {{"--qps", "50x"}, "--qps"},
      {{"--burst", "nan"}, "--burst"},
      {{"--tuning-poll-seconds", "0.1"}, "--tuning-poll-seconds"},
      {{"--tuning-poll-seconds", "inf"}, "--tuning-poll-seconds"},
      {{"--scrape-concurrency", "0"}, "--scrape-concurrency"},
      {{"--scrape-concurrency", "257"}, "--scrape-concurrency"},
      {{"--workers", "1e9"}, "--workers"},
      {{"--resync-seconds", "-1"}, "--resync-seconds"},
      {{"--pod-start-timeout-seconds", "-1"}, "--pod-start-timeout-seconds"},
      {{"--pod-start-timeout-seconds", "86401"}, "--pod-start-timeout-seconds"},
      {{"--pod-start-timeout-seconds", "nan"}, "--pod-start-timeout-seconds"},
      {{"--lease-duration", "15", "--renew-deadline", "20"}, "--renew-deadline 20 must be below --lease-duration 15"},
      {{"--lease-duration", "15", "--renew-deadline", "15"}, "--renew-deadline 15 must be below --lease-duration 15"},
      {{"--renew-deadline", "3", "--retry-period", "5"}, "--retry-period 5 must be below --renew-deadline 3"},
  };
  for (const Case& c : bad) {
    std::vector<std::string> args = c.args;
    args.insert(args.end(), {"--kubeconfig", none});
    const auto r = run_operator(args);
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    EXPECT_EQ(r.code, 2) << joined << "\n" << r.output;
    EXPECT_TRUE(has(r.output, c.says)) << joined << "\n" << r.output;
    EXPECT_FALSE(has(r.output, none)) << joined << ": got as far as the kubeconfig\n" << r.output;
  }
  // In range: refused only for the missing kubeconfig.
  const auto ok = run_operator({"--lease-duration", "30", "--renew-deadline", "20", "--retry-period", "4", "--qps",
                                "0.5", "--tuning-poll-seconds", "0.5", "--scrape-concurrency", "64",
                                "--pod-start-timeout-seconds", "0", "--kubeconfig", none});
  EXPECT_EQ(ok.code, 2) << ok.output;
  EXPECT_TRUE(has(ok.output, none)) << ok.output;
}

TEST(OperatorKubeconfig, AFifoOrADeviceIsRefusedAtOnce) {
  const fs::path dir = weft::testing::fresh_dir("operator-kubeconfig");
  const fs::path fifo = dir / "kubeconfig";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_operator({"--kubeconfig", fifo.string()});
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_LT(seconds_since(t0), 10) << r.output;
  EXPECT_TRUE(has(r.output, fifo.string() + ": not a regular file (a FIFO)")) << r.output;

  r = run_operator({"--kubeconfig", "/dev/zero"});
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "/dev/zero: not a regular file (a character device)")) << r.output;

  // A kubeconfig that names a FIFO as its token file: refused at start too.
  const fs::path token = dir / "token";
  ASSERT_EQ(::mkfifo(token.c_str(), 0600), 0);
  const std::string cfg = weft::testing::write_file(dir / "config", R"(current-context: x
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {tokenFile: token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
)");
  r = run_operator({"--kubeconfig", cfg});
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, token.string() + ": not a regular file (a FIFO)")) << r.output;
  fs::remove_all(dir);
}

}  // namespace
