#include "metrics/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <prometheus/text_serializer.h>
#include <stdexcept>

namespace weft {

namespace {

void send_all(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the scraper went away; nothing to do
    off += static_cast<size_t>(n);
  }
}

std::string response(int code, const char* reason, const std::string& type, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(code) + " " + reason + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace

MetricsServer::MetricsServer(std::shared_ptr<prometheus::Registry> registry,
                             const std::string& bind_addr, int port)
    : registry_(std::move(registry)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, bind_addr.c_str(), &addr.sin_addr) != 1) {
    ::close(listen_fd_);
    throw std::runtime_error("bad bind address " + bind_addr);
  }
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, 16) != 0) {
    int err = errno;
    ::close(listen_fd_);
    throw std::runtime_error("cannot listen on " + bind_addr + ":" + std::to_string(port) + ": " +
                             std::strerror(err));
  }
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { serve(); });
}

MetricsServer::~MetricsServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void MetricsServer::serve() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;  // wakes up to notice stop_
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    timeval tv{5, 0};  // a stuck client must not hold the server
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    handle(fd);
    ::close(fd);
  }
}

void MetricsServer::handle(int fd) {
  std::string req;
  char buf[2048];
  while (req.find("\r\n\r\n") == std::string::npos && req.size() < 16384) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    req.append(buf, static_cast<size_t>(n));
  }
  const size_t sp1 = req.find(' '), sp2 = req.find(' ', sp1 + 1);
  const std::string method = req.substr(0, sp1);
  std::string path = sp1 == std::string::npos ? "" : req.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  if (method != "GET" && method != "HEAD") {
    send_all(fd, response(405, "Method Not Allowed", "text/plain", "GET /metrics\n"));
  } else if (path != "/metrics") {
    send_all(fd, response(404, "Not Found", "text/plain", "weft serves /metrics\n"));
  } else {
    std::string body = prometheus::TextSerializer().Serialize(registry_->Collect());
    std::string r = response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", body);
    if (method == "HEAD") r.resize(r.size() - body.size());
    send_all(fd, r);
  }
}

}  // namespace weft
