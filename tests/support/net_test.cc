// The loopback helpers against a listener and a one-request HTTP server run
// here, so every test that talks to a server stands on checked ground.
#include "support/net.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

namespace weft::testing {
namespace {

using namespace std::chrono_literals;

TEST(Net, AFreePortCanBeListenedOnAndConnectedTo) {
  const int port = free_port();
  Listener l(port);
  EXPECT_EQ(l.port(), port);
  int c = connect_loopback(port);
  ASSERT_GE(c, 0);
  int s = l.accept();
  ASSERT_GE(s, 0);
  EXPECT_TRUE(send_all(c, "ping"));
  char buf[4];
  EXPECT_EQ(::recv(s, buf, sizeof buf, MSG_WAITALL), 4);
  EXPECT_EQ(std::string(buf, 4), "ping");
  ::close(c);
  ::close(s);
}

TEST(Net, ConnectRetriesUntilTheServerListens) {
  const int port = free_port();
  EXPECT_EQ(connect_loopback(port), -1);  // one attempt, nobody listens
  std::unique_ptr<Listener> late;
  std::thread t([&] {
    std::this_thread::sleep_for(200ms);
    late = std::make_unique<Listener>(port);
  });
  int c = connect_loopback(port, 10s);
  t.join();
  EXPECT_GE(c, 0);
  ::close(c);
}

TEST(Net, ShutdownWakesABlockedAccept) {
  Listener l;
  std::thread t([&] { EXPECT_EQ(l.accept(), -1); });
  std::this_thread::sleep_for(50ms);
  l.shutdown();
  t.join();
}

TEST(Net, HttpGetReturnsStatusAndBody) {
  Listener l;
  std::string request;
  std::thread server([&] {
    int s = l.accept();
    char buf[1024];
    while (request.find("\r\n\r\n") == std::string::npos) {
      ssize_t n = ::recv(s, buf, sizeof buf, 0);
      if (n <= 0) break;
      request.append(buf, static_cast<size_t>(n));
    }
    send_all(s, "HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnope");
    ::close(s);
  });
  HttpResponse r = http_get(l.port(), "/missing?x=1");
  server.join();
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body, "nope");
  EXPECT_EQ(request.rfind("GET /missing?x=1 HTTP/1.0\r\n", 0), 0u) << request;
}

TEST(Net, HttpGetOfANonListeningPortIsStatusZero) {
  EXPECT_EQ(http_get(free_port(), "/").status, 0);
}

TEST(Net, FreePortRangeIsConsecutiveAndFree) {
  const int base = free_port_range(3);
  std::vector<std::unique_ptr<Listener>> held;
  for (int i = 0; i < 3; ++i) EXPECT_NO_THROW(held.push_back(std::make_unique<Listener>(base + i)));
}

}  // namespace
}  // namespace weft::testing
