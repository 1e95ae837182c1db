// scrape() over real sockets: a scripted loopback server for the HTTP corner
// cases and for hostile servers (slow, idle, huge, garbage), weft-worker's
// own metrics server fed by TrainMetrics (also scraped from many threads at
// once), and a real prometheus process's /metrics (chunked, from Go's
// net/http).
#include "scrape/http_scraper.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <thread>
#include <vector>

#include "metrics_server.h"
#include "metrics/train_metrics.h"
#include "support/net.h"
#include "support/prometheus_process.h"
#include "support/run_process.h"

namespace weft::scrape {
namespace {

using namespace std::chrono_literals;

// Reads a request head (through its blank line) from `fd`; what arrived, cut
// short if the client hung up first.
std::string read_head(int fd) {
  std::string head;
  char buf[4096];
  while (head.find("\r\n\r\n") == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    head.append(buf, static_cast<size_t>(n));
  }
  return head;
}

// Answers one connection with `response` after reading the request head.
class OneShotServer {
 public:
  explicit OneShotServer(std::string response, bool answer = true)
      : thread_([this, r = std::move(response), answer] {
          int fd = listener_.accept();
          if (fd < 0) return;
          request_ = read_head(fd);
          if (answer) {
            weft::testing::send_all(fd, r);
          } else {
            char buf[1];
            ::recv(fd, buf, sizeof buf, 0);  // holds the connection until the client gives up
          }
          ::close(fd);
        }) {}
  ~OneShotServer() { finish(); }
  int port() const { return listener_.port(); }
  // Stops serving and returns the request head the server read.
  std::string finish() {
    listener_.shutdown();
    if (thread_.joinable()) thread_.join();
    return request_;
  }

 private:
  weft::testing::Listener listener_;
  std::string request_;
  std::thread thread_;
};

Endpoint local(int port, std::string path = "/metrics") { return {"127.0.0.1", port, std::move(path)}; }

// Reads the request head of one connection, then runs `serve` on its socket
// until `serve` returns (a hostile server: it returns once a send fails,
// that is once the client has hung up, or when stopped).
class ScriptedServer {
 public:
  explicit ScriptedServer(std::function<void(int fd, const std::atomic<bool>& stop)> serve)
      : thread_([this, serve = std::move(serve)] {
          int fd = listener_.accept();
          if (fd < 0) return;
          read_head(fd);
          serve(fd, stop_);
          ::close(fd);
        }) {}
  ~ScriptedServer() {
    stop_ = true;
    listener_.shutdown();
    if (thread_.joinable()) thread_.join();
  }
  int port() const { return listener_.port(); }

 private:
  weft::testing::Listener listener_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Sends `head`, then `piece` every `every` until the client hangs up.
ScriptedServer endless(std::string head, std::string piece, std::chrono::milliseconds every = 0ms) {
  return ScriptedServer([head = std::move(head), piece = std::move(piece), every](int fd,
                                                                                   const std::atomic<bool>& stop) {
    if (!weft::testing::send_all(fd, head)) return;
    while (!stop && weft::testing::send_all(fd, piece))
      if (every > 0ms) std::this_thread::sleep_for(every);
  });
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(HttpScraper, ContentLengthBodyAndTheRequestItSends) {
  const std::string body = "# TYPE up gauge\nup 1\n";
  OneShotServer server("HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: " +
                                   std::to_string(body.size()) + "\r\n\r\n" + body);
  ScrapeResult r = scrape(local(server.port()));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.metrics.value("up"), 1);
  const std::string request = server.finish();
  EXPECT_EQ(request.rfind("GET /metrics HTTP/1.1\r\n", 0), 0u) << request;
  EXPECT_NE(request.find("Accept: text/plain;version=0.0.4"), std::string::npos) << request;
}

TEST(HttpScraper, ChunkedBody) {
  OneShotServer server(
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nup 1\n\r\n"
      "c;ext=1\r\nweft_step 7\n\r\n"
      "0\r\n\r\n");
  ScrapeResult r = scrape(local(server.port()));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.metrics.value("up"), 1);
  EXPECT_EQ(r.metrics.value("weft_step"), 7);
}

TEST(HttpScraper, FailuresNameTheUrl) {
  {
    OneShotServer server("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
    ScrapeResult r = scrape(local(server.port(), "/nope"));
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.error.find("/nope: HTTP 404"), std::string::npos) << r.error;
  }
  {
    OneShotServer server("HTTP/1.1 200 OK\r\n\r\nup 1\nbroken{ 2\n");  // read-to-close body
    ScrapeResult r = scrape(local(server.port()));
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.error.find("line 2"), std::string::npos) << r.error;
    EXPECT_EQ(r.metrics.value("up"), 1) << "samples before the bad line are kept";
  }
  {
    OneShotServer server("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nup 1\n");
    ScrapeResult r = scrape(local(server.port()));
    EXPECT_NE(r.error.find("shorter than its Content-Length"), std::string::npos) << r.error;
  }
  {
    OneShotServer server("", /*answer=*/false);
    ScrapeResult r = scrape(local(server.port()), 300ms);
    EXPECT_NE(r.error.find("timed out"), std::string::npos) << r.error;
  }
  {
    int port = weft::testing::free_port();  // nobody listens
    ScrapeResult r = scrape(local(port), 2s);
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.error.find("http://127.0.0.1:" + std::to_string(port) + "/metrics"), std::string::npos) << r.error;
  }
  EXPECT_FALSE(scrape({"no-such-host.invalid", 80, "/metrics"}, 2s).ok());
  EXPECT_EQ((Endpoint{"fd00::1", 9400, "/metrics"}).url(), "http://[fd00::1]:9400/metrics");
}

// A server that drips its body forever is cut off at the whole-request
// deadline, not at a per-read idle timeout it keeps resetting.
TEST(HttpScraperHostile, SlowDripEndsAtTheDeadline) {
  ScriptedServer server = endless("HTTP/1.1 200 OK\r\n\r\n", "#", 20ms);
  const auto t0 = std::chrono::steady_clock::now();
  ScrapeResult r = scrape(local(server.port()), 500ms);
  EXPECT_NE(r.error.find("timed out"), std::string::npos) << r.error;
  EXPECT_LT(seconds_since(t0), 3.0);
}

TEST(HttpScraperHostile, IdleAfterTheHeadTimesOut) {
  ScriptedServer server([](int fd, const std::atomic<bool>& stop) {
    weft::testing::send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nup");
    while (!stop) std::this_thread::sleep_for(10ms);
  });
  const auto t0 = std::chrono::steady_clock::now();
  HttpResponse r = http_get(local(server.port()), 300ms);
  EXPECT_NE(r.error.find("timed out"), std::string::npos) << r.error;
  EXPECT_EQ(r.status, 0) << "an incomplete response has no status";
  EXPECT_LT(seconds_since(t0), 3.0);
}

// A declared length over the limit is refused before any body is read.
TEST(HttpScraperHostile, HugeContentLengthIsRefused) {
  ScriptedServer server = endless("HTTP/1.1 200 OK\r\nContent-Length: 100000000000\r\n\r\n",
                                  std::string(65536, 'x'));
  ScrapeResult r = scrape(local(server.port()), 10s);
  EXPECT_NE(r.error.find("body larger than " + std::to_string(kMaxBodyBytes) + " bytes"), std::string::npos)
      << r.error;
}

// Bodies without a declared length (chunked, read-to-close) that never end
// are cut off at the limit instead of growing the operator without bound.
TEST(HttpScraperHostile, EndlessBodiesAreCutOffAtTheLimit) {
  {
    ScriptedServer server =
        endless("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "8000\r\n" + std::string(0x8000, 'x') + "\r\n");
    HttpResponse r = http_get(local(server.port()), 10s, /*max_body=*/1 << 20);
    EXPECT_NE(r.error.find("body larger than 1048576 bytes"), std::string::npos) << r.error;
    EXPECT_TRUE(r.body.empty());
  }
  {
    ScriptedServer server = endless("HTTP/1.1 200 OK\r\n\r\n", std::string(65536, '#'));
    ScrapeResult r = scrape(local(server.port()), 20s);  // the default limit
    EXPECT_NE(r.error.find("body larger than"), std::string::npos) << r.error;
  }
}

TEST(HttpScraperHostile, GarbageIsAnErrorNamingTheUrl) {
  const std::string url_part = "http://127.0.0.1:";
  for (const std::string& garbage : {
           std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http at all\r\n\r\n"),
           std::string("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nup 1\n\r\n0\r\n\r\n"),
           std::string("HTTP/1.1 200 OK\r\nX-Long: ") + std::string(1 << 20, 'h') + "\r\n\r\nup 1\n",
       }) {
    OneShotServer server(garbage);
    HttpResponse r = http_get(local(server.port()), 5s);
    EXPECT_FALSE(r.error.empty()) << garbage.substr(0, 40);
    EXPECT_NE(r.error.find(url_part), std::string::npos) << r.error;
    EXPECT_EQ(r.status, 0);
  }
}

// The worker's metrics as weft-worker serves them: TrainMetrics fed one step
// report, behind the worker's MetricsServer.
TEST(HttpScraper, WeftWorkerMetricsServer) {
  WorkerConfig cfg;
  TrainMetrics metrics(cfg, /*rank=*/1, /*world=*/2);
  StepReport step;
  step.step = 42;
  step.total_steps = 100;
  step.step_seconds = 0.25;
  step.exposed_comm_seconds = 0.05;
  step.sync_group = "dp";
  step.comm_seconds = 0.2;
  step.bucket_cap_bytes = 4 << 20;
  step.bucket_count = 3;
  step.bucket_seconds = {0.1, 0.05, 0.05};
  metrics.on_step(step);
  MetricsServer server(metrics.registry(), "127.0.0.1", 0);

  ScrapeResult r = scrape(local(server.port()));
  ASSERT_TRUE(r.ok()) << r.error;
  const Labels rank1 = {{"rank", "1"}};
  EXPECT_EQ(r.metrics.value("weft_step", rank1), 42);
  EXPECT_EQ(r.metrics.value("weft_bucket_cap_bytes", rank1), 4 << 20);
  EXPECT_EQ(r.metrics.value("weft_step_seconds_count", rank1), 1);
  EXPECT_DOUBLE_EQ(*r.metrics.value("weft_step_seconds_sum", rank1), 0.25);
  EXPECT_DOUBLE_EQ(*r.metrics.value("weft_exposed_comm_seconds_total", {{"rank", "1"}, {"group", "dp"}}), 0.05);
  EXPECT_EQ(r.metrics.families.at("weft_step_seconds").type, MetricType::Histogram);
  EXPECT_EQ(r.metrics.find("weft_bucket_reduce_last_seconds", rank1).size(), 3u);
}

// The scrape poller reads every rank at once: calls on many threads share
// nothing (one libcurl handle each).
TEST(HttpScraper, ManyThreadsAtOnce) {
  WorkerConfig cfg;
  TrainMetrics metrics(cfg, /*rank=*/0, /*world=*/1);
  StepReport step;
  step.step = 7;
  step.total_steps = 10;
  step.step_seconds = 0.1;
  metrics.on_step(step);
  MetricsServer server(metrics.registry(), "127.0.0.1", 0);
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 5; ++i) {
        ScrapeResult r = scrape(local(server.port()), 10s);
        if (r.ok() && r.metrics.value("weft_step", {{"rank", "0"}}) == 7) ++ok;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 16 * 5);
}

// A real prometheus answers its own /metrics with client_golang's text
// format, chunked. Skipped without the binary (scripts/install-deps.sh test).
TEST(HttpScraper, RealPrometheusProcess) {
  const std::string prometheus = weft::testing::find_prometheus();
  if (prometheus.empty()) GTEST_SKIP() << "prometheus not installed (Debian package prometheus)";
  const int port = weft::testing::free_port();
  ScrapeResult r;
  {
    weft::testing::PrometheusProcess prom(prometheus, weft::testing::fresh_dir("scrape-prometheus"),
                                          "global:\n  scrape_interval: 1h\n", port);
    ASSERT_TRUE(prom.started());
    // Startup takes a moment (longer under load): poll, generously.
    for (int i = 0; i < 600; ++i) {
      r = scrape(local(port), 5s);
      if (r.ok() && r.metrics.value("prometheus_build_info").has_value()) break;
      std::this_thread::sleep_for(100ms);
    }
  }
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.metrics.families.at("go_gc_duration_seconds").type, MetricType::Summary);
  EXPECT_FALSE(r.metrics.find("go_gc_duration_seconds", {{"quantile", "0.5"}}).empty());
  EXPECT_EQ(r.metrics.families.at("prometheus_tsdb_compaction_duration_seconds").type, MetricType::Histogram);
  EXPECT_GT(r.metrics.samples.size(), 200u);
}

}  // namespace
}  // namespace weft::scrape
