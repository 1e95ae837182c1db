#include "integration/tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace weft::it {

TcpProxy::TcpProxy(int upstream_port) : upstream_port_(upstream_port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  ::listen(listen_fd_, 64);
  acceptor_ = std::thread([this] { accept_loop(); });
}

TcpProxy::~TcpProxy() {
  stop_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  ::close(listen_fd_);
  acceptor_.join();
  cut_all();
  std::vector<std::thread> pumps;
  {
    std::lock_guard lock(mu_);
    pumps.swap(pumps_);
  }
  for (auto& t : pumps) t.join();
}

void TcpProxy::cut_all() {
  std::lock_guard lock(mu_);
  for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);  // pump threads close them
  if (!open_fds_.empty()) ++cuts_;
}

void TcpProxy::accept_loop() {
  while (!stop_) {
    int client = ::accept(listen_fd_, nullptr, nullptr);
    if (client < 0) return;
    int up = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(upstream_port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(up, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(up);
      ::close(client);
      continue;
    }
    ++accepted_;
    std::lock_guard lock(mu_);
    open_fds_.insert(client);
    open_fds_.insert(up);
    pumps_.emplace_back([this, client, up] { pump(client, up); });
  }
}

void TcpProxy::pump(int client, int upstream) {
  pollfd fds[2] = {{client, POLLIN, 0}, {upstream, POLLIN, 0}};
  char buf[16384];
  while (!stop_) {
    if (::poll(fds, 2, 200) < 0) break;
    bool done = false;
    for (int i = 0; i < 2 && !done; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::recv(fds[i].fd, buf, sizeof buf, 0);
      if (n <= 0) {
        done = true;
        break;
      }
      int to = fds[1 - i].fd;
      for (ssize_t off = 0; off < n;) {
        ssize_t w = ::send(to, buf + off, static_cast<size_t>(n - off), MSG_NOSIGNAL);
        if (w <= 0) {
          done = true;
          break;
        }
        off += w;
      }
    }
    if (done) break;
  }
  std::lock_guard lock(mu_);
  open_fds_.erase(client);
  open_fds_.erase(upstream);
  ::close(client);
  ::close(upstream);
}

}  // namespace weft::it
