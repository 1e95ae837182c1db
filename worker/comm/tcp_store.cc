#include "comm/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "weft_contract.h"

namespace weft::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Wire format: every message is a u32 length followed by that many bytes.
// Requests start with a command byte; responses with a status byte.
enum Cmd : uint8_t { kHello = 1, kSet = 2, kGet = 3, kAdd = 4, kWait = 5 };
enum Status : uint8_t { kOk = 0, kTimedOut = 1, kBadToken = 2, kBadRequest = 3 };
constexpr uint32_t kMaxMessage = 64u << 20;  // values are addresses and ids, never data

void put_u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
void put_i64(std::string& s, int64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
void put_str(std::string& s, const std::string& v) {
  put_u32(s, static_cast<uint32_t>(v.size()));
  s += v;
}

// Cursor over a received message; any overrun marks it bad.
struct Reader {
  const std::string& s;
  size_t pos = 0;
  bool bad = false;
  bool take(void* out, size_t n) {
    if (pos + n > s.size()) return !(bad = true);
    std::memcpy(out, s.data() + pos, n);
    pos += n;
    return true;
  }
  uint8_t u8() { uint8_t v = 0; take(&v, 1); return v; }
  uint32_t u32() { uint32_t v = 0; take(&v, 4); return v; }
  int64_t i64() { int64_t v = 0; take(&v, 8); return v; }
  std::string str() {
    uint32_t n = u32();
    if (bad || pos + n > s.size()) { bad = true; return {}; }
    std::string v = s.substr(pos, n);
    pos += n;
    return v;
  }
};

bool send_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// Reads exactly n bytes; a deadline of time_point::max() blocks forever.
bool recv_all(int fd, void* p, size_t n, Clock::time_point deadline) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    if (deadline != Clock::time_point::max()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd pfd{fd, POLLIN, 0};
      int r = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
    }
    ssize_t k = ::recv(fd, c, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool send_msg(int fd, const std::string& m) {
  std::string framed;
  put_u32(framed, static_cast<uint32_t>(m.size()));
  framed += m;
  return send_all(fd, framed.data(), framed.size());
}

bool recv_msg(int fd, std::string& m, Clock::time_point deadline) {
  uint32_t n = 0;
  if (!recv_all(fd, &n, 4, deadline) || n > kMaxMessage) return false;
  m.resize(n);
  return recv_all(fd, m.data(), n, deadline);
}

std::string addr_string(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  else if (sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  return buf;
}

// Non-blocking connect bounded by `limit`, so an unroutable address cannot
// eat the whole rendezvous timeout in one try.
int connect_with_timeout(const addrinfo* ai, std::chrono::milliseconds limit) {
  int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) return -1;
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int r = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
  if (r < 0 && errno == EINPROGRESS) {
    pollfd pfd{fd, POLLOUT, 0};
    r = ::poll(&pfd, 1, static_cast<int>(limit.count()));
    int err = 0;
    socklen_t len = sizeof err;
    if (r == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) r = 0;
    else r = -1;
  }
  if (r != 0) {
    ::close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, flags);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

}  // namespace

// ---------------------------------------------------------------- server --

TcpStoreServer::TcpStoreServer(const std::string& bind_host, uint16_t port, std::string token)
    : token_(std::move(token)) {
  std::string where = (bind_host.empty() ? std::string("*") : bind_host) + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int gai = getaddrinfo(bind_host.empty() ? nullptr : bind_host.c_str(),
                        std::to_string(port).c_str(), &hints, &res);
  if (gai != 0)
    throw RendezvousError("rendezvous store: cannot resolve bind address " + where + ": " +
                          gai_strerror(gai));
  std::string last_error = "no usable address";
  for (addrinfo* ai = res; ai && listen_fd_ < 0; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      listen_fd_ = fd;
    } else {
      last_error = std::strerror(errno);
      ::close(fd);
    }
  }
  freeaddrinfo(res);
  if (listen_fd_ < 0)
    throw RendezvousError("rendezvous store: cannot listen on " + where + " (" +
                          contract::kEnvMasterPort + "): " + last_error);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                        : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

TcpStoreServer::~TcpStoreServer() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    for (int fd : client_fds_) ::shutdown(fd, SHUT_RDWR);
  }
  cv_.notify_all();
  acceptor_.join();
  for (auto& t : client_threads_) t.join();
  ::close(listen_fd_);
}

void TcpStoreServer::accept_loop() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stop_) return;
    }
    // Poll with a short timeout so the destructor never waits on accept().
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (::poll(&pfd, 1, 100) <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) {
      ::close(fd);
      return;
    }
    client_fds_.push_back(fd);
    client_threads_.emplace_back([this, fd] { serve(fd); });
  }
}

void TcpStoreServer::serve(int fd) {
  std::string req;
  bool authed = false;
  while (recv_msg(fd, req, Clock::time_point::max())) {
    Reader r{req};
    uint8_t cmd = r.u8();
    std::string resp;
    if (!authed) {
      std::string tok = r.str();
      if (cmd != kHello || r.bad || tok != token_) {
        resp.push_back(static_cast<char>(kBadToken));
        send_msg(fd, resp);
        break;
      }
      authed = true;
      resp.push_back(static_cast<char>(kOk));
    } else if (cmd == kSet) {
      std::string key = r.str(), value = r.str();
      if (r.bad) break;
      {
        std::lock_guard<std::mutex> lk(mu_);
        kv_[key] = std::move(value);
      }
      cv_.notify_all();
      resp.push_back(static_cast<char>(kOk));
    } else if (cmd == kAdd) {
      std::string key = r.str();
      int64_t delta = r.i64();
      if (r.bad) break;
      int64_t now = 0;
      {
        std::lock_guard<std::mutex> lk(mu_);
        auto it = kv_.find(key);
        if (it != kv_.end()) now = std::strtoll(it->second.c_str(), nullptr, 10);
        now += delta;
        kv_[key] = std::to_string(now);
      }
      cv_.notify_all();
      resp.push_back(static_cast<char>(kOk));
      put_i64(resp, now);
    } else if (cmd == kGet || cmd == kWait) {
      std::vector<std::string> keys;
      uint32_t n = cmd == kGet ? 1 : r.u32();
      for (uint32_t i = 0; i < n && !r.bad; ++i) keys.push_back(r.str());
      int64_t wait_ms = r.i64();
      if (r.bad) break;
      std::unique_lock<std::mutex> lk(mu_);
      auto all_there = [&] {
        for (auto& k : keys)
          if (!kv_.count(k)) return false;
        return true;
      };
      cv_.wait_for(lk, std::chrono::milliseconds(wait_ms), [&] { return stop_ || all_there(); });
      if (stop_) break;
      if (!all_there()) {
        resp.push_back(static_cast<char>(kTimedOut));
        for (auto& k : keys)
          if (!kv_.count(k)) { put_str(resp, k); break; }
      } else {
        resp.push_back(static_cast<char>(kOk));
        if (cmd == kGet) put_str(resp, kv_[keys[0]]);
      }
    } else {
      resp.push_back(static_cast<char>(kBadRequest));
    }
    if (!send_msg(fd, resp)) break;
  }
  std::lock_guard<std::mutex> lk(mu_);
  client_fds_.erase(std::remove(client_fds_.begin(), client_fds_.end(), fd), client_fds_.end());
  ::close(fd);
}

// ---------------------------------------------------------------- client --

TcpStore::TcpStore(StoreOptions options)
    : opt_(std::move(options)), prefix_("attempt/" + std::to_string(opt_.attempt) + "/") {
  const auto started = Clock::now();
  auto deadline = started + opt_.timeout;
  auto backoff = std::chrono::milliseconds(20);
  std::string last_error, logged_error;
  auto next_log = started;
  auto waited_s = [&] { return std::chrono::duration<double>(Clock::now() - started).count(); };
  while (fd_ < 0) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int gai = getaddrinfo(opt_.host.c_str(), std::to_string(opt_.port).c_str(), &hints, &res);
    if (gai != 0) {
      // Pods come up in any order: rank 0's DNS name may not exist yet.
      last_error = std::string("cannot resolve ") + opt_.host + ": " + gai_strerror(gai);
    } else {
      for (addrinfo* ai = res; ai && fd_ < 0; ai = ai->ai_next) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        fd_ = connect_with_timeout(ai, std::clamp(left, std::chrono::milliseconds(1),
                                                  std::chrono::milliseconds(5000)));
        if (fd_ < 0) last_error = "connect to " + endpoint() + ": " + std::strerror(errno);
      }
      freeaddrinfo(res);
    }
    if (fd_ >= 0) break;
    if (Clock::now() >= deadline)
      throw RendezvousError(fmt::format("rendezvous: no store at {} ({}:{}) after {:.1f} s: {}", endpoint(),
                                        contract::kEnvMasterAddr, contract::kEnvMasterPort, waited_s(),
                                        last_error));
    // Say why this rank waits (kubectl logs shows it), at most every 10 s
    // unless the cause changes: rank 0's pod may simply not exist yet.
    if (last_error != logged_error || Clock::now() >= next_log) {
      spdlog::info("rendezvous: waiting for rank 0's store at {} ({:.1f} s of {:.0f} s): {}", endpoint(),
                   waited_s(), opt_.timeout.count() / 1000.0, last_error);
      logged_error = last_error;
      next_log = Clock::now() + std::chrono::seconds(10);
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  local_addr_ = addr_string(reinterpret_cast<sockaddr*>(&ss));

  std::string hello(1, static_cast<char>(kHello));
  put_str(hello, opt_.token);
  std::string resp;
  if (!send_msg(fd_, hello) || !recv_msg(fd_, resp, Clock::now() + opt_.timeout) || resp.empty()) {
    ::close(fd_);
    fd_ = -1;
    throw RendezvousError("rendezvous: the store at " + endpoint() +
                          " closed the connection during the token check");
  }
  if (resp[0] != kOk) {
    ::close(fd_);
    fd_ = -1;
    throw TokenRejectedError("rendezvous: the store at " + endpoint() +
                             " rejected this rank's token: " + contract::kEnvRdzvToken +
                             " must be the same on every rank");
  }
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
}

std::string TcpStore::full_key(const std::string& key) const { return prefix_ + key; }

std::string TcpStore::request(const std::string& payload, std::chrono::milliseconds server_wait) {
  std::lock_guard<std::mutex> lk(mu_);
  std::string resp;
  // The server answers a wait at its deadline; allow it time to say so.
  auto deadline = Clock::now() + server_wait + std::chrono::seconds(30);
  if (!send_msg(fd_, payload) || !recv_msg(fd_, resp, deadline) || resp.empty())
    throw RendezvousError("rendezvous: lost the connection to the store at " + endpoint() +
                          " (rank 0 exited?)");
  return resp;
}

void TcpStore::set(const std::string& key, const std::string& value) {
  std::string m(1, static_cast<char>(kSet));
  put_str(m, full_key(key));
  put_str(m, value);
  request(m, std::chrono::milliseconds(0));
}

std::string TcpStore::get(const std::string& key) { return get(key, opt_.timeout); }

std::string TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::string m(1, static_cast<char>(kGet));
  put_str(m, full_key(key));
  put_i64(m, timeout.count());
  std::string resp = request(m, timeout);
  if (resp[0] != kOk)
    throw RendezvousError("rendezvous: timed out after " + std::to_string(timeout.count()) +
                          " ms waiting for key '" + key + "' in the store at " + endpoint());
  Reader r{resp, 1};
  std::string v = r.str();
  if (r.bad) throw RendezvousError("rendezvous: malformed reply from the store at " + endpoint());
  return v;
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  std::string m(1, static_cast<char>(kAdd));
  put_str(m, full_key(key));
  put_i64(m, delta);
  std::string resp = request(m, std::chrono::milliseconds(0));
  Reader r{resp, 1};
  int64_t v = r.i64();
  if (resp[0] != kOk || r.bad)
    throw RendezvousError("rendezvous: add on key '" + key + "' failed at " + endpoint());
  return v;
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::string m(1, static_cast<char>(kWait));
  put_u32(m, static_cast<uint32_t>(keys.size()));
  for (auto& k : keys) put_str(m, full_key(k));
  put_i64(m, timeout.count());
  std::string resp = request(m, timeout);
  if (resp[0] != kOk) {
    Reader r{resp, 1};
    std::string missing = r.str();
    if (missing.rfind(prefix_, 0) == 0) missing = missing.substr(prefix_.size());
    throw RendezvousError("rendezvous: timed out after " + std::to_string(timeout.count()) +
                          " ms waiting for key '" + missing + "' in the store at " + endpoint());
  }
}

}  // namespace weft::comm
