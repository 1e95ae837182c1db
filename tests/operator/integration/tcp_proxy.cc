#include "integration/tcp_proxy.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace weft::it {

TcpProxy::TcpProxy(int upstream_port) : upstream_port_(upstream_port) {
  acceptor_ = std::thread([this] { accept_loop(); });
}

TcpProxy::~TcpProxy() {
  stop_ = true;
  listener_.shutdown();
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
    int client = listener_.accept();
    if (client < 0) return;
    int up = weft::testing::connect_loopback(upstream_port_);
    if (up < 0) {
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
      if (!weft::testing::send_all(fds[1 - i].fd, buf, static_cast<size_t>(n))) done = true;
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
