// The worker's /metrics server against slow and idle clients: a scrape must
// get through while they are connected, and none of them may hold a
// connection past the whole-request deadline.
#include "metrics/metrics_server.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <prometheus/counter.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "support/net.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using weft::testing::http_get;

std::shared_ptr<prometheus::Registry> registry_with_a_counter() {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter().Name("weft_test_total").Help("t").Register(*registry).Add({}).Increment(7);
  return registry;
}

// True when the server closed `fd` within `limit` (EOF or reset); bytes it
// sent before closing are read and dropped.
bool closed_by_peer(int fd, std::chrono::milliseconds limit) {
  auto until = Clock::now() + limit;
  char buf[4096];
  while (Clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count());
    if (::poll(&p, 1, std::max(left, 1)) <= 0) continue;
    if (::recv(fd, buf, sizeof buf, 0) <= 0) return true;
  }
  return false;
}

TEST(MetricsServerHostile, ScrapesSucceedWhileSlowClientsAreConnected) {
  auto registry = registry_with_a_counter();
  MetricsServerOptions o;
  o.request_deadline = 30s;  // the slow clients stay for the whole test
  MetricsServer server(registry, "127.0.0.1", 0, o);
  // Eight clients that send a request a byte at a time, one byte every 200 ms.
  std::vector<int> slow;
  for (int i = 0; i < 8; ++i) {
    int fd = weft::testing::connect_loopback(server.port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(weft::testing::send_all(fd, "G"));
    slow.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread drip([&] {
    while (!stop) {
      for (int fd : slow) weft::testing::send_all(fd, "E");
      std::this_thread::sleep_for(200ms);
    }
  });
  for (int i = 0; i < 5; ++i) {
    auto r = http_get(server.port(), "/metrics");
    EXPECT_EQ(r.status, 200) << "scrape " << i;
    EXPECT_NE(r.body.find("weft_test_total 7"), std::string::npos) << r.body;
  }
  EXPECT_GE(server.open_connections(), 8u) << "the slow clients are still connected";
  stop = true;
  drip.join();
  for (int fd : slow) ::close(fd);
}

TEST(MetricsServerHostile, ASlowClientIsClosedAtTheWholeRequestDeadline) {
  auto registry = registry_with_a_counter();
  MetricsServerOptions o;
  o.request_deadline = 1s;
  MetricsServer server(registry, "127.0.0.1", 0, o);
  int fd = weft::testing::connect_loopback(server.port());
  ASSERT_GE(fd, 0);
  // One byte every 100 ms, far inside any per-receive timeout.
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: a-very-slow-client.example\r\nX-Pad: ";
  const auto t0 = Clock::now();
  bool closed = false;
  for (size_t i = 0; !closed && Clock::now() - t0 < 20s; ++i) {
    if (!weft::testing::send_all(fd, std::string(1, req[i % req.size()]))) break;
    closed = closed_by_peer(fd, 100ms);
  }
  if (!closed) closed = closed_by_peer(fd, 10000ms);
  EXPECT_TRUE(closed) << "a slow-loris connection must be closed";
  EXPECT_GE(Clock::now() - t0, 800ms);
  EXPECT_LT(Clock::now() - t0, 15s);
  ::close(fd);
  EXPECT_EQ(http_get(server.port(), "/metrics").status, 200);
}

TEST(MetricsServerHostile, ConnectionsAreBoundedAndANewScrapeGetsIn) {
  auto registry = registry_with_a_counter();
  MetricsServerOptions o;
  o.request_deadline = 60s;
  o.max_connections = 16;
  MetricsServer server(registry, "127.0.0.1", 0, o);
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i) {
    int fd = weft::testing::connect_loopback(server.port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  auto until = Clock::now() + 20s;
  while (server.open_connections() < o.max_connections && Clock::now() < until) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(server.open_connections(), o.max_connections);
  auto r = http_get(server.port(), "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_LE(server.open_connections(), o.max_connections);
  // An oversized request ends the connection; it is not buffered.
  int fd = weft::testing::connect_loopback(server.port());
  weft::testing::send_all(fd, "GET /metrics HTTP/1.1\r\nX: " + std::string(64 * 1024, 'a'));
  EXPECT_TRUE(closed_by_peer(fd, 10000ms));
  ::close(fd);
  for (int f : idle) ::close(f);
}

}  // namespace
}  // namespace weft
