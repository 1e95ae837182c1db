// The /metrics server of weft-worker and weft-operator (serving/): what a
// scraper sees over real HTTP.
#include "metrics_server.h"

#include <gtest/gtest.h>
#include <prometheus/counter.h>

#include <atomic>

#include "support/net.h"

namespace weft {
namespace {

using weft::testing::http_get;

TEST(MetricsServer, ServesTheRegistryAndNothingElse) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& steps = prometheus::BuildCounter().Name("weft_test_total").Help("t").Register(*registry);
  steps.Add({{"rank", "0"}}).Increment(3);
  MetricsServer server(registry, "127.0.0.1", 0);
  ASSERT_GT(server.port(), 0);
  auto ok = http_get(server.port(), "/metrics");
  EXPECT_EQ(ok.status, 200);
  EXPECT_NE(ok.body.find("weft_test_total{rank=\"0\"} 3"), std::string::npos) << ok.body;
  steps.Add({{"rank", "0"}}).Increment();
  EXPECT_NE(http_get(server.port(), "/metrics").body.find("weft_test_total{rank=\"0\"} 4"),
            std::string::npos);
  EXPECT_EQ(http_get(server.port(), "/").status, 404);
  EXPECT_EQ(http_get(server.port(), "/metrics?x=1").status, 200);
}

TEST(MetricsServer, ReadyFollowsItsCallback) {
  auto registry = std::make_shared<prometheus::Registry>();
  {
    MetricsServer server(registry, "127.0.0.1", 0);  // no readiness check: never ready
    auto r = http_get(server.port(), "/ready");
    EXPECT_EQ(r.status, 503);
    EXPECT_EQ(r.body, "no readiness check\n");
  }
  std::atomic<bool> ready{false};
  MetricsServerOptions opt;
  opt.ready = [&ready](std::string* why) {
    *why = ready ? "trains" : "waiting";
    return ready.load();
  };
  MetricsServer server(registry, "127.0.0.1", 0, opt);
  auto before = http_get(server.port(), "/ready");
  EXPECT_EQ(before.status, 503);
  EXPECT_EQ(before.body, "waiting\n");
  ready = true;
  auto after = http_get(server.port(), "/ready?probe=1");
  EXPECT_EQ(after.status, 200);
  EXPECT_EQ(after.body, "trains\n");
  EXPECT_EQ(http_get(server.port(), "/metrics").status, 200);
}

// The operator's probes (kube/probe_server.h): named check paths, and no
// registry, so no /metrics.
TEST(MetricsServer, ChecksOnlyWithoutARegistry) {
  std::atomic<bool> synced{false};
  MetricsServerOptions opt;
  opt.checks = {{"/healthz", [](std::string* why) { return *why = "ok", true; }},
                {"/readyz", [&synced](std::string* why) {
                   *why = synced ? "ok" : "informer caches not synced";
                   return synced.load();
                 }}};
  MetricsServer server(nullptr, "127.0.0.1", 0, opt);
  auto live = http_get(server.port(), "/healthz");
  EXPECT_EQ(live.status, 200);
  EXPECT_EQ(live.body, "ok\n");
  auto not_ready = http_get(server.port(), "/readyz");
  EXPECT_EQ(not_ready.status, 503);
  EXPECT_EQ(not_ready.body, "informer caches not synced\n");
  synced = true;
  EXPECT_EQ(http_get(server.port(), "/readyz").status, 200);
  EXPECT_EQ(http_get(server.port(), "/metrics").status, 404);
  EXPECT_EQ(http_get(server.port(), "/ready").status, 503);  // no readiness check given
}

TEST(MetricsServer, BusyPortIsAClearError) {
  auto registry = std::make_shared<prometheus::Registry>();
  MetricsServer first(registry, "127.0.0.1", 0);
  try {
    MetricsServer second(registry, "127.0.0.1", first.port());
    FAIL() << "bound a busy port";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(first.port())), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace weft
