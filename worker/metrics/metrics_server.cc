#include "metrics/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <prometheus/text_serializer.h>
#include <stdexcept>
#include <vector>

namespace weft {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxRequest = 16384;  // a GET with headers; anything longer is not a scrape

std::string response(int code, const char* reason, const std::string& type, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(code) + " " + reason + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace

struct MetricsServer::Conn {
  int fd = -1;
  Clock::time_point deadline;  // request read and response sent by then
  std::string in, out;
  bool answered = false;  // `out` holds the whole response
};

MetricsServer::MetricsServer(std::shared_ptr<prometheus::Registry> registry, const std::string& bind_addr,
                             int port, MetricsServerOptions options)
    : registry_(std::move(registry)), opt_(options) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
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
      ::listen(listen_fd_, 64) != 0) {
    int err = errno;
    ::close(listen_fd_);
    throw std::runtime_error("cannot listen on " + bind_addr + ":" + std::to_string(port) + ": " +
                             std::strerror(err));
  }
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    int err = errno;
    ::close(listen_fd_);
    throw std::runtime_error(std::string("eventfd: ") + std::strerror(err));
  }
  thread_ = std::thread([this] { serve(); });
}

MetricsServer::~MetricsServer() {
  stop_ = true;
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_fd_);
}

std::string MetricsServer::respond(const std::string& req) const {
  const size_t sp1 = req.find(' '), sp2 = req.find(' ', sp1 + 1);
  const std::string method = req.substr(0, sp1);
  std::string path = sp1 == std::string::npos ? "" : req.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  if (method != "GET" && method != "HEAD")
    return response(405, "Method Not Allowed", "text/plain", "GET /metrics or /ready\n");
  if (path == "/ready") {
    std::string why = "no readiness check";
    const bool ready = opt_.ready && opt_.ready(&why);
    std::string body = why + "\n";
    std::string r = ready ? response(200, "OK", "text/plain", body)
                          : response(503, "Service Unavailable", "text/plain", body);
    if (method == "HEAD") r.resize(r.size() - body.size());
    return r;
  }
  if (path != "/metrics") return response(404, "Not Found", "text/plain", "weft serves /metrics and /ready\n");
  std::string body = prometheus::TextSerializer().Serialize(registry_->Collect());
  std::string r = response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", body);
  if (method == "HEAD") r.resize(r.size() - body.size());
  return r;
}

void MetricsServer::serve() {
  std::vector<Conn> conns;
  std::vector<pollfd> pfds;
  auto close_conn = [](Conn& c) {
    ::close(c.fd);
    c.fd = -1;
  };
  while (!stop_) {
    const auto now = Clock::now();
    auto next = now + std::chrono::seconds(1);
    pfds.clear();
    pfds.push_back({wake_fd_, POLLIN, 0});
    pfds.push_back({listen_fd_, POLLIN, 0});
    for (auto& c : conns) {
      pfds.push_back({c.fd, static_cast<short>(c.answered ? POLLOUT : POLLIN), 0});
      next = std::min(next, c.deadline);
    }
    int wait_ms = static_cast<int>(std::clamp<int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1, 0, 1000));
    int r = ::poll(pfds.data(), pfds.size(), wait_ms);
    if (stop_) break;
    if (r < 0) continue;  // EINTR
    const size_t polled = conns.size();
    for (size_t i = 0; r > 0 && i < polled; ++i) {
      Conn& c = conns[i];
      const short rev = pfds[i + 2].revents;
      if (rev == 0) continue;
      if (!c.answered) {
        char buf[4096];
        ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (n <= 0) {
          close_conn(c);
          continue;
        }
        c.in.append(buf, static_cast<size_t>(n));
        if (c.in.find("\r\n\r\n") != std::string::npos) {
          c.out = respond(c.in);
          c.answered = true;
        } else if (c.in.size() >= kMaxRequest) {
          c.out = response(431, "Request Header Fields Too Large", "text/plain", "GET /metrics\n");
          c.answered = true;
        }
      }
      if (c.answered) {
        ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (n > 0) c.out.erase(0, static_cast<size_t>(n));
        else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          close_conn(c);
          continue;
        }
        if (c.out.empty()) close_conn(c);
      }
    }
    if (r > 0 && (pfds[0].revents & POLLIN)) {
      uint64_t v;
      (void)!::read(wake_fd_, &v, sizeof v);
    }
    if (r > 0 && (pfds[1].revents & POLLIN)) {
      for (int k = 0; k < 64; ++k) {
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        size_t open = 0;
        Conn* oldest = nullptr;
        for (auto& c : conns)
          if (c.fd >= 0) {
            ++open;
            if (!oldest || c.deadline < oldest->deadline) oldest = &c;
          }
        // Full: the oldest connection goes, so a new scrape always gets in.
        if (open >= std::max<size_t>(opt_.max_connections, 1) && oldest) close_conn(*oldest);
        conns.push_back(Conn{fd, Clock::now() + opt_.request_deadline, {}, {}, false});
      }
    }
    const auto after = Clock::now();
    for (auto& c : conns)
      if (c.fd >= 0 && after >= c.deadline) close_conn(c);
    conns.erase(std::remove_if(conns.begin(), conns.end(), [](const Conn& c) { return c.fd < 0; }), conns.end());
    open_ = conns.size();
  }
  for (auto& c : conns)
    if (c.fd >= 0) ::close(c.fd);
}

}  // namespace weft
