// The operator's own /metrics: counters that start at 0 for every known label
// value, tuner series that go with a deleted job, and an endpoint that a
// keep-alive scraper (and a real Prometheus) reads every time.
// operator_endpoints_test.cc runs the binary under idle and slow clients.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include <prometheus/text_serializer.h>

#include "support/net.h"
#include "support/prometheus_process.h"
#include "support/run_process.h"
#include "trainingjob/operator_metrics.h"
#include "tuner/tuner_metrics.h"

namespace weft::tj {
namespace {

using namespace std::chrono_literals;

std::string exposition(prometheus::Registry& r) { return prometheus::TextSerializer().Serialize(r.Collect()); }

TEST(OperatorMetrics, CountersStartAtZeroForEveryKnownLabel) {
  prometheus::Registry r;
  OperatorMetrics m(r);
  const std::string text = exposition(r);
  for (const char* cause : {"Failure", "OOMKilled", "Evicted", "Preempted", "NodeLost", "Deleted", "StartTimeout"})
    EXPECT_NE(text.find(std::string("weft_operator_gang_restarts_total{cause=\"") + cause + "\"} 0"), std::string::npos)
        << cause << "\n" << text;
  for (const char* d : {"shrink", "grow"})
    EXPECT_NE(text.find(std::string("weft_operator_elastic_resizes_total{direction=\"") + d + "\"} 0"), std::string::npos);
  for (const char* a : {"none", "replace"})
    EXPECT_NE(text.find(std::string("weft_operator_stragglers_total{action=\"") + a + "\"} 0"), std::string::npos);
  m.add_restart("Failure");
  EXPECT_NE(exposition(r).find("weft_operator_gang_restarts_total{cause=\"Failure\"} 1"), std::string::npos);
}

TEST(TunerMetrics, TrialsStartAtZeroAndADeletedJobsSeriesGo) {
  prometheus::Registry r;
  tuner::TunerMetrics m(r);
  m.set_bucket("team-a", "llama", 25, false);
  m.set_bucket("team-b", "gpt", 25, false);
  EXPECT_NE(exposition(r).find("weft_operator_tuner_trials_total{namespace=\"team-a\",trainingjob=\"llama\"} 0"),
            std::string::npos)
      << exposition(r);
  m.trial_completed("team-a", "llama", 25, 0.5);
  m.trial_completed("team-a", "llama", 50, 0.4);
  m.set_bucket("team-a", "llama", 50, true);
  std::string text = exposition(r);
  EXPECT_NE(text.find("weft_operator_tuner_trials_total{namespace=\"team-a\",trainingjob=\"llama\"} 2"), std::string::npos);
  EXPECT_NE(text.find("bucket_mb=\"50\""), std::string::npos);
  m.forget("team-a", "llama");
  m.forget("team-c", "never-tuned");
  text = exposition(r);
  EXPECT_EQ(text.find("team-a"), std::string::npos) << text;
  EXPECT_EQ(text.find("never-tuned"), std::string::npos) << text;
  EXPECT_NE(text.find("weft_operator_tuner_trials_total{namespace=\"team-b\",trainingjob=\"gpt\"} 0"), std::string::npos)
      << "another job's series stay\n"
      << text;
}

// Reads one HTTP response from fd: head and a Content-Length body.
std::string read_response(int fd) {
  std::string got;
  char buf[65536];
  size_t body_at = std::string::npos, length = 0;
  for (;;) {
    if (body_at == std::string::npos) {
      body_at = got.find("\r\n\r\n");
      if (body_at != std::string::npos) {
        body_at += 4;
        auto cl = got.find("Content-Length: ");
        if (cl == std::string::npos || cl > body_at) return got;  // no length: cannot keep the connection
        length = std::stoul(got.substr(cl + 16));
      }
    }
    if (body_at != std::string::npos && got.size() >= body_at + length) return got.substr(0, body_at + length);
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return got;
    got.append(buf, static_cast<size_t>(n));
  }
}

// A client that asks to keep its connection (Go's net/http, Prometheus) is
// told "Connection: close" with each complete response and the connection
// then ends, so it never sends its next scrape into a closed connection (what
// civetweb's default did: it closed without saying so, failing every other
// scrape); each new connection is answered.
TEST(OperatorMetricsEndpoint, AKeepAliveClientIsToldToCloseAndAnsweredEveryTime) {
  auto registry = std::make_shared<prometheus::Registry>();
  OperatorMetrics m(*registry);
  auto server = serve_operator_metrics("127.0.0.1", weft::testing::free_port(), registry);
  for (int i = 0; i < 5; ++i) {
    int fd = weft::testing::connect_loopback(server->port());
    ASSERT_GE(fd, 0);
    timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const std::string req =
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\nConnection: keep-alive\r\n\r\n";
    ASSERT_TRUE(weft::testing::send_all(fd, req)) << "request " << i;
    const std::string resp = read_response(fd);
    ASSERT_EQ(resp.rfind("HTTP/1.1 200", 0), 0u) << "request " << i << ": " << resp.substr(0, 200);
    const std::string head = resp.substr(0, resp.find("\r\n\r\n"));
    EXPECT_NE(head.find("\r\nConnection: close"), std::string::npos) << head;
    EXPECT_NE(resp.find("weft_operator_gang_restarts_total"), std::string::npos);
    char byte;
    EXPECT_EQ(::recv(fd, &byte, 1, 0), 0) << "request " << i << ": the connection stays open after the response";
    ::close(fd);
  }
}

// A real Prometheus scraping the endpoint every 200 ms (Go's client keeps
// its connections): every scrape up.
TEST(OperatorMetricsEndpoint, RealPrometheusScrapesItEveryTime) {
  const std::string prometheus = weft::testing::find_prometheus();
  if (prometheus.empty()) GTEST_SKIP() << "prometheus not installed (Debian package prometheus)";
  auto registry = std::make_shared<prometheus::Registry>();
  OperatorMetrics m(*registry);
  const int port = weft::testing::free_port(), prom_port = weft::testing::free_port();
  auto server = serve_operator_metrics("127.0.0.1", port, registry);
  auto prom = std::make_unique<weft::testing::PrometheusProcess>(
      prometheus, weft::testing::fresh_dir("operator-metrics-prometheus"),
      "global:\n  scrape_interval: 200ms\n  scrape_timeout: 200ms\nscrape_configs:\n"
      "  - job_name: weft-operator\n    static_configs:\n      - targets: ['127.0.0.1:" +
          std::to_string(port) + "']\n",
      prom_port);
  ASSERT_TRUE(prom->started());
  // Prometheus' query API: how many scrapes of the target, and whether each was up.
  auto query = [&](const std::string& q) {
    auto r = weft::testing::run_process({"/usr/bin/curl", "-s", "--max-time", "5", "http://127.0.0.1:" +
                                         std::to_string(prom_port) + "/api/v1/query", "--data-urlencode",
                                         "query=" + q});
    return r.output;
  };
  // The sample's value in a query answer: "value":[<time>,"<value>"]; -1 when none.
  auto value = [](const std::string& s) {
    const auto v = s.find("\"value\":[");
    const auto at = v == std::string::npos ? v : s.find(",\"", v);
    return at == std::string::npos ? -1 : std::stoi(s.substr(at + 2));
  };
  std::string total, ups;
  const auto t0 = std::chrono::steady_clock::now();
  // At least 20 scrapes (4 s at 200 ms; generously longer under load).
  while (std::chrono::steady_clock::now() - t0 < 120s) {
    total = query("count_over_time(up{job=\"weft-operator\"}[5m])");
    if (value(total) >= 20) break;
    std::this_thread::sleep_for(500ms);
  }
  // In one query, so no scrape falls between the two counts.
  ups = query("sum_over_time(up{job=\"weft-operator\"}[5m]) - count_over_time(up{job=\"weft-operator\"}[5m])");
  prom.reset();
  ASSERT_GE(value(total), 20) << total;
  EXPECT_EQ(value(ups), 0) << "minus the scrapes that failed: every scrape must be up\n" << ups << "\n" << total;
}

}  // namespace
}  // namespace weft::tj
