// Test support: loopback TCP for tests that talk to servers — free ports, a
// held listening socket, connect, send, and a blocking HTTP/1.0 GET.
// defines: free_port, free_port_range, Listener, connect_loopback, send_all,
//          HttpResponse, http_get.
//
// Every socket is SOCK_CLOEXEC, so the children a test forks never inherit
// (and so never hold open) a test's listener.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace weft::testing {

// A TCP port on 127.0.0.1 and 0.0.0.0 that was free a moment ago, from
// 20000-29999, below the kernel's ephemeral range, so no outgoing connection
// on the machine takes it before the test's program binds it (net.cc); two
// tests picking the same one at once is the remaining, rare race.
int free_port();
// A port p with p .. p+count-1 all bindable on 0.0.0.0 (where the worker
// serves metrics), for programs that serve on base + rank.
int free_port_range(int count);

// A listening socket on 127.0.0.1:port (0: any free port), with SO_REUSEADDR.
// Throws std::runtime_error when it cannot bind. Closed on destruction.
class Listener {
 public:
  explicit Listener(int port = 0, int backlog = 64);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  int port() const { return port_; }
  // The next connection's socket, or -1 once shutdown() was called.
  int accept();
  // Wakes a thread blocked in accept() and refuses new connections; the
  // descriptor stays open until destruction, so it is never reused under a
  // thread still using it. Idempotent.
  void shutdown();

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A socket connected to 127.0.0.1:port, or -1. Refused connections are
// retried every 20 ms until `retry_for` has passed (0: one attempt).
int connect_loopback(int port, std::chrono::milliseconds retry_for = std::chrono::milliseconds(0));

// Writes all n bytes (MSG_NOSIGNAL); false once the peer is gone.
bool send_all(int fd, const char* data, size_t n);
bool send_all(int fd, const std::string& s);

struct HttpResponse {
  int status = 0;  // 0: unreachable, or no complete response head arrived
  std::string body;
};
// GET http://127.0.0.1:port<path> as HTTP/1.0 with Connection: close; reads
// until the server closes or `timeout` passes.
HttpResponse http_get(int port, const std::string& path,
                      std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace weft::testing
