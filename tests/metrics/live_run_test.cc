// End to end with real tools: a 2-rank weft-run serves /metrics on loopback;
// `promtool check metrics` accepts both scrapes, and every metric the Grafana
// dashboard queries is in them. That every query returns data through
// Kubernetes discovery and the chart's scrape job is e2e_discovery's
// (tests/e2e/discovery.sh).
//
// Waits are polls with generous deadlines, never fixed sleeps: the machine
// may be slow and shared. The run is stopped by SIGTERM once done.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sys/resource.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include "metrics/metrics_test_util.h"
#include "weft_metrics.h"
#include "support/net.h"

namespace weft::metrics_test {
namespace {

namespace cm = contract::metrics;

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
using weft::testing::free_port;
using weft::testing::http_get;
using weft::testing::HttpResponse;
using namespace std::chrono_literals;

std::string find_tool(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = std::string(path ? path : "") + ":/usr/bin:/usr/local/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = dirs.substr(start, end - start) + "/" + name;
    if (end > start && executable_exists(candidate)) return candidate;
    start = end + 1;
  }
  return "";
}

// Polls `ready` every 200 ms until it returns true or `seconds` pass.
bool wait_for(double seconds, const std::function<bool()>& ready) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  while (Clock::now() < deadline) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return ready();
}

// Stops the children however the test ends.
struct Children {
  std::vector<Child*> all;
  ~Children() {
    for (Child* c : all)
      if (c->pid > 0) stop(*c, 5);
  }
};

TEST(LiveRun, PromtoolAcceptsALive2RankRunThatServesEveryDashboardMetric) {
  const std::string promtool = find_tool("promtool");
  if (promtool.empty())
    GTEST_SKIP()
        << "promtool not found on PATH or /usr/bin (Debian package `prometheus`, "
           "scripts/install-deps.sh test group)";
  const fs::path tmp =
      fs::temp_directory_path() / ("weft-metrics-live-" + std::to_string(getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  Children guard;

  // 1. Two ranks with metrics on base and base + 1.
  const int base = weft::testing::free_port_range(2);
  Child run =
      spawn({std::string(WEFT_BIN_DIR) + "/weft-run", "-n", "2", "--",
             std::string(WEFT_SOURCE_DIR) + "/tests/metrics/metrics_run.yaml", "--out",
             (tmp / "out").string(), "--checkpoint-dir", (tmp / "ckpt").string(), "--no-resume"},
            {{"WEFT_METRICS_PORT", std::to_string(base)}}, (tmp / "run.log").string());
  guard.all.push_back(&run);
  const int ports[2] = {base, base + 1};
  for (int r = 0; r < 2; ++r) {
    const std::string line = "weft-run: rank " + std::to_string(r) +
                             " metrics at http://127.0.0.1:" + std::to_string(ports[r]) +
                             "/metrics";
    ASSERT_TRUE(
        wait_for(30, [&] { return read_file(run.log_path).find(line) != std::string::npos; }))
        << "weft-run did not print '" << line << "':\n"
        << read_file(run.log_path);
  }

  // 2. Both ranks serve metrics of a stepping run; rank 0, which writes the
  //    data-parallel checkpoints (every 100 steps), reports one.
  std::string scrape[2];
  for (int r = 0; r < 2; ++r) {
    const std::string rank = std::to_string(r);
    bool ok = wait_for(120, [&] {
      if (!running(run)) return true;
      HttpResponse h = http_get(ports[r], "/metrics");
      if (h.status != 200) return false;
      auto s = parse_exposition(h.body);
      const std::string step = sample_key(cm::kStep.name, {{"rank", rank}});
      const std::string ckpt = sample_key("weft_checkpoint_last_step", {{"rank", rank}});
      if (!s.count(step) || s[step] < 2 || (r == 0 && (!s.count(ckpt) || s[ckpt] <= 0)))
        return false;
      scrape[r] = h.body;
      return true;
    });
    ASSERT_TRUE(ok && !scrape[r].empty())
        << "rank " << r << " never exposed a stepping run on port " << ports[r] << ":\n"
        << read_file(run.log_path);
  }

  // 3. promtool lints both scrapes; every dashboard metric is in them.
  std::set<std::string> names;
  for (int r = 0; r < 2; ++r) {
    const fs::path file = tmp / ("rank" + std::to_string(r) + ".prom");
    std::ofstream(file) << scrape[r];
    std::string out;
    EXPECT_EQ(run_shell(promtool + " check metrics < " + file.string(), &out), 0)
        << "promtool check metrics failed on rank " << r << ":\n"
        << out;
    auto n = sample_names(scrape[r]);
    names.insert(n.begin(), n.end());
    // The run says which kernels run its attention (CPU ranks: cpu).
    EXPECT_EQ(parse_exposition(scrape[r])[sample_key("weft_attention_kernel_info",
                                                     {{"rank", std::to_string(r)}, {"kernel", "cpu"}})],
              1)
        << scrape[r];
  }
  const json dash = load_dashboard();
  const auto queries = dashboard_queries(dash);
  ASSERT_FALSE(queries.empty());
  for (const auto& q : queries)
    for (const auto& m : referenced_metrics(q.expr))
      EXPECT_TRUE(names.count(m)) << q.panel << " queries " << m << ", which the live scrape lacks";

  // 4. Clean stop: weft-run forwards SIGTERM, the ranks stop at a step boundary.
  const int code = stop(run, 20);
  EXPECT_TRUE(code == 143 || code == 0) << "weft-run exit " << code << "\n"
                                        << read_file(run.log_path);
  if (!HasFailure()) fs::remove_all(tmp);
}

// One rank training under `ulimit -n 64` (a tight container) while clients
// flood its metrics port: 300 idle connections, 20 that trickle a request,
// 20 that send binary garbage, and a scraper hammering /ready through the
// stop. What must hold: scrapes are still answered; SIGTERM still writes the
// checkpoint (which needs descriptors the flood must not have taken) and the
// rank exits 143; the log is not flooded.
TEST(LiveRun, ARankFloodedAtUlimit64StillCheckpointsOnSigtermAndExits143) {
  rlimit own{};
  ::getrlimit(RLIMIT_NOFILE, &own);
  if (own.rlim_cur < 512) GTEST_SKIP() << "the flood needs 512 descriptors; RLIMIT_NOFILE is " << own.rlim_cur;
  const fs::path tmp = fs::temp_directory_path() / ("weft-metrics-flood-" + std::to_string(getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  Children guard;
  const int port = weft::testing::free_port_range(1);
  Child run = spawn({"/bin/sh", "-c", "ulimit -n 64 && exec \"$@\"", "sh", std::string(WEFT_BIN_DIR) + "/weft-worker",
                     std::string(WEFT_SOURCE_DIR) + "/tests/metrics/metrics_run.yaml", "--out", (tmp / "out").string(),
                     "--checkpoint-dir", (tmp / "ckpt").string(), "--no-resume"},
                    {{"WEFT_METRICS_PORT", std::to_string(port)},
                     {"RANK", ""},
                     {"WORLD_SIZE", ""},
                     {"LOCAL_RANK", ""},
                     {"MASTER_ADDR", ""},
                     {"MASTER_PORT", ""}},
                    (tmp / "rank.log").string());
  guard.all.push_back(&run);
  ASSERT_TRUE(wait_for(120, [&] { return !running(run) || http_get(port, "/ready").status == 200; }))
      << read_file(run.log_path);
  ASSERT_TRUE(running(run)) << read_file(run.log_path);

  std::vector<int> flood;
  for (int i = 0; i < 340; ++i) {
    int fd = weft::testing::connect_loopback(port);
    if (fd < 0) continue;
    if (i >= 300 && i < 320) weft::testing::send_all(fd, "GET /metrics HTTP/1.1\r\nX-Slow: ");
    if (i >= 320) weft::testing::send_all(fd, std::string("\x16\x03\x01\x00\xff\x01\x00\x00", 8));
    flood.push_back(fd);
  }
  std::atomic<bool> stop_scraping{false};
  std::atomic<int> answered{0};
  std::thread scraper([&] {
    while (!stop_scraping) {
      if (http_get(port, "/ready", 5s).status == 200) ++answered;
      std::this_thread::sleep_for(50ms);
    }
  });
  EXPECT_TRUE(wait_for(60, [&] { return answered > 0; })) << "no scrape answered during the flood";
  std::this_thread::sleep_for(3s);  // the rank trains (and checkpoints every 100 steps) under the flood
  const int code = stop(run, 60);
  stop_scraping = true;
  scraper.join();
  for (int fd : flood) ::close(fd);
  const std::string log = read_file(run.log_path);
  EXPECT_EQ(code, 143) << log;
  EXPECT_NE(log.find("checkpoint written"), std::string::npos) << log;
  EXPECT_EQ(log.find("Too many open files"), std::string::npos) << log;
  EXPECT_LT(std::count(log.begin(), log.end(), '\n'), 400) << "the clients flooded the log:\n" << log;
  if (!HasFailure()) fs::remove_all(tmp);
}

}  // namespace
}  // namespace weft::metrics_test
