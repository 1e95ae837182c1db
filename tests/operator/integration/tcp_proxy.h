// A loopback TCP proxy that can cut every connection through it on demand,
// to test that the operator's watches resume (or relist) and converge when
// the network drops long-lived streams. TLS passes through untouched.
#pragma once

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "support/net.h"

namespace weft::it {

class TcpProxy {
 public:
  explicit TcpProxy(int upstream_port);
  ~TcpProxy();
  int port() const { return listener_.port(); }
  void cut_all();           // closes every open connection (both sides)
  long connections() const { return accepted_.load(); }
  long cuts() const { return cuts_.load(); }

 private:
  void accept_loop();
  void pump(int client, int upstream);

  int upstream_port_;
  weft::testing::Listener listener_;
  std::atomic<bool> stop_{false};
  std::atomic<long> accepted_{0}, cuts_{0};
  std::mutex mu_;
  std::set<int> open_fds_;
  std::thread acceptor_;
  std::vector<std::thread> pumps_;
};

}  // namespace weft::it
