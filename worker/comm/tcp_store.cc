#include "comm/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "comm/tcp_store_wire.h"
#include "weft_contract.h"

namespace weft::comm {
using namespace store_wire;
namespace {

using Clock = std::chrono::steady_clock;

// The largest reply a client accepts.
constexpr uint32_t kMaxReply = kMaxStoreValue + 64;

// Compares two secrets in time that depends on their lengths only, never on
// where they first differ.
bool same_secret(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() != b.size() ? 1u : 0u;
  for (size_t i = 0; i < n; ++i) {
    unsigned x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0u;
    unsigned y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0u;
    diff |= x ^ y;
  }
  return diff == 0;
}

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
  std::string f = framed(m);
  return send_all(fd, f.data(), f.size());
}

bool recv_msg(int fd, std::string& m, Clock::time_point deadline) {
  uint32_t n = 0;
  if (!recv_all(fd, &n, 4, deadline) || n > kMaxReply) return false;
  m.resize(n);
  return recv_all(fd, m.data(), n, deadline);
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

struct TcpStoreServer::Conn {
  int fd = -1;
  std::string peer;              // "address:port", for the log
  bool member = false;           // passed the token check
  bool closing = false;          // close once `out` is sent
  Clock::time_point hello_by;    // before the token check: the deadline for it
  std::string in, out;           // bytes received and not parsed; to send
  // A get or wait whose keys are not all there yet.
  bool waiting = false;
  uint8_t wait_cmd = 0;
  std::vector<std::string> wait_keys;
  Clock::time_point wait_until;
};

TcpStoreServer::TcpStoreServer(const std::string& bind_host, uint16_t port, std::string token,
                               TcpStoreServerOptions options)
    : token_(std::move(token)), opt_(std::move(options)) {
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
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
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
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    ::close(listen_fd_);
    throw RendezvousError(std::string("rendezvous store: eventfd: ") + std::strerror(errno));
  }
  thread_ = std::thread([this] { loop(); });
}

TcpStoreServer::~TcpStoreServer() {
  stop_ = true;
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  thread_.join();
  ::close(listen_fd_);
  ::close(wake_fd_);
}

void TcpStoreServer::close_membership() {
  membership_closed_ = true;
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

TcpStoreServer::Counts TcpStoreServer::counts() const {
  std::lock_guard<std::mutex> lk(counts_mu_);
  return counts_;
}

// Refusals are logged at most once a second: a flood must not flood the log.
void TcpStoreServer::log_refusal(const std::string& what) {
  auto now = Clock::now();
  if (now < next_refusal_log_) {
    ++refusals_unlogged_;
    return;
  }
  if (refusals_unlogged_ > 0)
    spdlog::warn("rendezvous store: {} (and {} more refused connections not logged)", what, refusals_unlogged_);
  else
    spdlog::warn("rendezvous store: {}", what);
  refusals_unlogged_ = 0;
  next_refusal_log_ = now + std::chrono::seconds(1);
}

void TcpStoreServer::accept_new(std::vector<std::unique_ptr<Conn>>& conns) {
  for (int i = 0; i < 64; ++i) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN, or out of descriptors: the next round tries again
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    uint16_t peer_port = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                                       : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
    c->peer = addr_string(reinterpret_cast<sockaddr*>(&ss)) + ":" + std::to_string(peer_port);
    c->hello_by = Clock::now() + opt_.hello_timeout;
    // Hold at most max_pending connections before their token check: the
    // newest displaces the oldest, so a client that says hello at once gets
    // through however many idle ones are open.
    size_t pending = 0;
    Conn* oldest = nullptr;
    for (auto& o : conns)
      if (!o->member && o->fd >= 0) {
        ++pending;
        if (!oldest || o->hello_by < oldest->hello_by) oldest = o.get();
      }
    if (pending >= std::max<size_t>(opt_.max_pending, 1) && oldest) {
      log_refusal("closed " + oldest->peer + ": no token within " + std::to_string(opt_.max_pending) +
                  " newer connections");
      ::close(oldest->fd);
      oldest->fd = -1;
    }
    conns.push_back(std::move(c));
  }
}

// Reads what the socket has (at most 64 KiB a call) and handles every
// complete message. False: close the connection.
bool TcpStoreServer::read_some(Conn& c) {
  char buf[65536];
  ssize_t k = ::recv(c.fd, buf, sizeof buf, 0);
  if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return true;
  if (k <= 0) return false;
  c.in.append(buf, static_cast<size_t>(k));
  size_t pos = 0;
  while (!c.waiting && !c.closing && c.in.size() - pos >= 4) {
    uint32_t n = 0;
    std::memcpy(&n, c.in.data() + pos, 4);
    const uint32_t cap = c.member ? kMaxStoreValue + 64 : kMaxHello;
    if (n > cap) {
      if (c.member)
        spdlog::warn("rendezvous store: closed member {}: a message of {} bytes exceeds the {} byte limit",
                     c.peer, n, cap);
      else
        log_refusal("closed " + c.peer + ": its first message declares " + std::to_string(n) +
                    " bytes; a hello is at most " + std::to_string(cap));
      return false;
    }
    if (c.in.size() - pos < 4 + size_t{n}) break;
    std::string msg = c.in.substr(pos + 4, n);
    pos += 4 + size_t{n};
    if (c.member) handle(c, msg);
    else hello(c, msg);
  }
  c.in.erase(0, pos);
  return true;
}

void TcpStoreServer::hello(Conn& c, const std::string& msg) {
  Reader r{msg};
  uint8_t cmd = r.u8();
  std::string tok = r.str();
  std::string job = !r.bad && r.pos < msg.size() ? r.str() : std::string();
  std::string resp;
  if (cmd != kHello || r.bad) {
    log_refusal("refused " + c.peer + ": its first message is not a hello");
    resp.push_back(static_cast<char>(kBadRequest));
  } else if (!same_secret(tok, token_)) {
    log_refusal("refused " + c.peer + ": wrong " + contract::kEnvRdzvToken +
                (job.empty() ? std::string() : " (its job: " + job + ")"));
    resp.push_back(static_cast<char>(kBadToken));
    put_str(resp, opt_.job);
  } else if (membership_closed_) {
    log_refusal("refused " + c.peer + ": the gang has formed; the store takes no new members");
    resp.push_back(static_cast<char>(kMembershipClosed));
  } else {
    c.member = true;
    resp.push_back(static_cast<char>(kOk));
  }
  c.closing = !c.member;
  c.out += framed(resp);
}

void TcpStoreServer::handle(Conn& c, const std::string& req) {
  Reader r{req};
  uint8_t cmd = r.u8();
  std::string resp;
  if (cmd == kSet) {
    std::string key = r.str(), value = r.str();
    if (r.bad) return void(c.closing = true);
    kv_[key] = std::move(value);
    resp.push_back(static_cast<char>(kOk));
  } else if (cmd == kAdd) {
    std::string key = r.str();
    int64_t delta = r.i64();
    if (r.bad) return void(c.closing = true);
    int64_t now = 0;
    auto it = kv_.find(key);
    if (it != kv_.end()) now = std::strtoll(it->second.c_str(), nullptr, 10);
    now += delta;
    kv_[key] = std::to_string(now);
    resp.push_back(static_cast<char>(kOk));
    put_i64(resp, now);
  } else if (cmd == kGet || cmd == kWait) {
    std::vector<std::string> keys;
    uint32_t n = cmd == kGet ? 1 : r.u32();
    for (uint32_t i = 0; i < n && !r.bad; ++i) keys.push_back(r.str());
    int64_t wait_ms = r.i64();
    if (r.bad) return void(c.closing = true);
    // Parked; answer_waiters replies once the keys exist or at the deadline.
    c.waiting = true;
    c.wait_cmd = cmd;
    c.wait_keys = std::move(keys);
    wait_ms = std::clamp<int64_t>(wait_ms, 0, int64_t{1} << 40);
    c.wait_until = Clock::now() + std::chrono::milliseconds(wait_ms);
    return;
  } else {
    resp.push_back(static_cast<char>(kBadRequest));
  }
  c.out += framed(resp);
}

// Replies to the parked gets and waits whose keys all exist or whose
// deadline passed.
void TcpStoreServer::answer_waiters(std::vector<std::unique_ptr<Conn>>& conns) {
  const auto now = Clock::now();
  for (auto& c : conns) {
    if (c->fd < 0 || !c->waiting) continue;
    const std::string* missing = nullptr;
    for (auto& k : c->wait_keys)
      if (!kv_.count(k)) {
        missing = &k;
        break;
      }
    if (missing && now < c->wait_until) continue;
    std::string resp;
    if (missing) {
      resp.push_back(static_cast<char>(kTimedOut));
      put_str(resp, *missing);
    } else {
      resp.push_back(static_cast<char>(kOk));
      if (c->wait_cmd == kGet) put_str(resp, kv_[c->wait_keys[0]]);
    }
    c->waiting = false;
    c->wait_keys.clear();
    c->out += framed(resp);
  }
}

void TcpStoreServer::loop() {
  std::vector<std::unique_ptr<Conn>> conns;
  std::vector<pollfd> pfds;
  while (!stop_) {
    const auto now = Clock::now();
    auto next = now + std::chrono::seconds(1);
    pfds.clear();
    pfds.push_back({wake_fd_, POLLIN, 0});
    pfds.push_back({listen_fd_, POLLIN, 0});
    for (auto& c : conns) {
      short ev = 0;
      if (!c->waiting && !c->closing) ev |= POLLIN;
      if (!c->out.empty()) ev |= POLLOUT;
      pfds.push_back({c->fd, ev, 0});
      if (!c->member) next = std::min(next, c->hello_by);
      if (c->waiting) next = std::min(next, c->wait_until);
    }
    int wait_ms = static_cast<int>(std::clamp<int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1, 0, 1000));
    int r = ::poll(pfds.data(), pfds.size(), wait_ms);
    if (r < 0 && errno != EINTR) {
      spdlog::error("rendezvous store: poll: {}", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (stop_) break;
    if (r > 0 && (pfds[0].revents & POLLIN)) {
      uint64_t v;
      (void)!::read(wake_fd_, &v, sizeof v);
    }
    // Index i + 2 of pfds is conns[i]; accept_new only appends after this.
    const size_t polled = conns.size();
    for (size_t i = 0; r > 0 && i < polled; ++i) {
      Conn& c = *conns[i];
      short rev = pfds[i + 2].revents;
      if (c.fd < 0 || rev == 0) continue;
      bool ok = true;
      if (rev & (POLLIN | POLLHUP | POLLERR)) {
        if (!c.waiting && !c.closing) {
          ok = read_some(c);
        } else if (rev & (POLLHUP | POLLERR)) {
          ok = false;
        }
      }
      if (ok && !c.out.empty()) {
        ssize_t k = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (k > 0) c.out.erase(0, static_cast<size_t>(k));
        else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ok = false;
      }
      if (!ok || (c.closing && c.out.empty())) {
        ::close(c.fd);
        c.fd = -1;
      }
    }
    if (r > 0 && (pfds[1].revents & POLLIN)) accept_new(conns);
    // Sets and adds may complete parked gets; deadlines may have passed.
    answer_waiters(conns);
    const auto after = Clock::now();
    for (auto& c : conns) {
      if (c->fd < 0) continue;
      if (!c->member && after >= c->hello_by) {
        log_refusal("closed " + c->peer + ": no valid hello within " +
                    std::to_string(opt_.hello_timeout.count()) + " ms");
        ::close(c->fd);
        c->fd = -1;
        continue;
      }
      // Replies just queued go out now rather than after the next poll.
      if (!c->out.empty()) {
        ssize_t k = ::send(c->fd, c->out.data(), c->out.size(), MSG_NOSIGNAL);
        if (k > 0) c->out.erase(0, static_cast<size_t>(k));
        else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          ::close(c->fd);
          c->fd = -1;
          continue;
        }
        if (c->closing && c->out.empty()) {
          ::close(c->fd);
          c->fd = -1;
        }
      }
    }
    conns.erase(std::remove_if(conns.begin(), conns.end(), [](auto& c) { return c->fd < 0; }), conns.end());
    Counts n;
    n.open = conns.size();
    for (auto& c : conns) n.members += c->member;
    std::lock_guard<std::mutex> lk(counts_mu_);
    counts_ = n;
  }
  for (auto& c : conns)
    if (c->fd >= 0) ::close(c->fd);
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
    if (fd_ >= 0 && !hello()) {
      // Closed before answering: a store busy with other connections drops
      // the oldest ones that have not said hello; try again.
      ::close(fd_);
      fd_ = -1;
      last_error = "the store at " + endpoint() + " closed the connection before answering the token check";
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
}

// Presents the token on the fresh connection fd_. False: the store closed the
// connection without an answer. Throws when the store answered "no".
bool TcpStore::hello() {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  local_addr_ = addr_string(reinterpret_cast<sockaddr*>(&ss));

  std::string m(1, static_cast<char>(kHello));
  put_str(m, opt_.token);
  put_str(m, opt_.job);
  if (m.size() > kMaxHello)
    throw RendezvousError(fmt::format("rendezvous: {} and the job description take {} bytes; at most {} fit a hello",
                                      contract::kEnvRdzvToken, m.size(), kMaxHello));
  std::string resp;
  if (!send_msg(fd_, m) || !recv_msg(fd_, resp, Clock::now() + opt_.timeout) || resp.empty()) return false;
  if (resp[0] == kOk) return true;
  ::close(fd_);
  fd_ = -1;
  if (resp[0] == kMembershipClosed)
    throw RendezvousError("rendezvous: the store at " + endpoint() +
                          " takes no new members: its gang has already formed (a rank that restarts alone "
                          "cannot rejoin; the whole gang restarts)");
  Reader r{resp, 1};
  std::string theirs = resp[0] == kBadToken ? r.str() : std::string();
  if (!r.bad && !theirs.empty() && !opt_.job.empty() && theirs != opt_.job)
    throw TokenRejectedError("rendezvous: the store at " + endpoint() + " belongs to another job (" + theirs +
                             "; this rank's job: " + opt_.job + "): two jobs share " + contract::kEnvMasterPort +
                             " on " + opt_.host);
  throw TokenRejectedError("rendezvous: the store at " + endpoint() + " rejected this rank's token: " +
                           contract::kEnvRdzvToken + " must be the same on every rank");
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
  if (key.size() + value.size() + prefix_.size() > kMaxStoreValue)
    throw RendezvousError(fmt::format("rendezvous: key '{}' with a value of {} bytes exceeds the store's limit of {} bytes",
                                      key, value.size(), kMaxStoreValue));
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
