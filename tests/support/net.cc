#include "support/net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace weft::testing {
namespace {

using Clock = std::chrono::steady_clock;

sockaddr_in address(uint32_t host, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(host);
  return a;
}

int bound_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

bool bindable(uint32_t host, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = address(host, port);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}
bool bindable_on_any(int port) { return bindable(INADDR_ANY, port); }
bool bindable_on_loopback(int port) { return bindable(INADDR_LOOPBACK, port); }

}  // namespace

// A port the kernel never hands out on its own: 20000-29999, below the
// ephemeral range (ip_local_port_range, 32768-60999 by default). A port of
// that range, free when picked, could be taken as the source port of any
// outgoing connection on the machine before the program under test binds it
// (on a CI machine also starting a cluster, a rank's metrics port was), which
// a port below it cannot. Where the ephemeral range reaches down into it, the
// kernel's own choice, as before.
int free_port() {
  static std::atomic<unsigned> seq{static_cast<unsigned>(::getpid()) * 7919u +
                                   static_cast<unsigned>(Clock::now().time_since_epoch().count())};
  int low = 32768;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d", &low) != 1) low = 32768;
    std::fclose(f);
  }
  if (low >= 30000) {
    for (int attempt = 0; attempt < 200; ++attempt) {
      const int port = 20000 + static_cast<int>((seq.fetch_add(1) * 2654435761u) % 10000u);
      if (bindable_on_any(port) && bindable_on_loopback(port)) return port;
    }
  }
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = address(INADDR_LOOPBACK, 0);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    throw std::runtime_error("free_port: binding 127.0.0.1:0 failed");
  }
  int port = bound_port(fd);
  ::close(fd);
  return port;
}

int free_port_range(int count) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    int p = free_port();
    bool ok = p + count - 1 <= 65535;
    for (int i = 0; ok && i < count; ++i) ok = bindable_on_any(p + i);
    if (ok) return p;
  }
  throw std::runtime_error("free_port_range: no " + std::to_string(count) +
                           " consecutive free ports found");
}

Listener::Listener(int port, int backlog) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = address(INADDR_LOOPBACK, port);
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, backlog) != 0) {
    ::close(fd_);
    throw std::runtime_error("Listener: cannot listen on 127.0.0.1:" + std::to_string(port));
  }
  port_ = bound_port(fd_);
}

Listener::~Listener() { ::close(fd_); }

int Listener::accept() { return ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC); }

void Listener::shutdown() { ::shutdown(fd_, SHUT_RDWR); }

int connect_loopback(int port, std::chrono::milliseconds retry_for) {
  const auto give_up = Clock::now() + retry_for;
  for (;;) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = address(INADDR_LOOPBACK, port);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
    ::close(fd);
    if (Clock::now() >= give_up) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool send_all(int fd, const char* data, size_t n) {
  for (size_t off = 0; off < n;) {
    ssize_t w = ::send(fd, data + off, n - off, MSG_NOSIGNAL);
    if (w <= 0) return false;
    off += static_cast<size_t>(w);
  }
  return true;
}

bool send_all(int fd, const std::string& s) { return send_all(fd, s.data(), s.size()); }

HttpResponse http_get(int port, const std::string& path, std::chrono::milliseconds timeout) {
  HttpResponse r;
  int fd = connect_loopback(port);
  if (fd < 0) return r;
  if (!send_all(fd, "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")) {
    ::close(fd);
    return r;
  }
  std::string raw;
  const auto deadline = Clock::now() + timeout;
  char buf[65536];
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    ssize_t k = ::read(fd, buf, sizeof buf);
    if (k <= 0) break;
    raw.append(buf, static_cast<size_t>(k));
  }
  ::close(fd);
  size_t sp = raw.find(' '), head_end = raw.find("\r\n\r\n");
  if (sp == std::string::npos || head_end == std::string::npos) return r;
  r.status = std::atoi(raw.c_str() + sp + 1);
  r.body = raw.substr(head_end + 4);
  return r;
}

}  // namespace weft::testing
