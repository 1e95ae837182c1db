// The rendezvous store's server (comm/tcp_store.h): one thread, one epoll set.
//
// Why the indexes: a full-mesh rendezvous parks up to one request per rank at
// once, and every set may complete some of them. Scanning every parked
// request and rebuilding every descriptor on each wakeup made each event cost
// O(N), a gang rendezvous O(N^2) on top of its traffic. Here a parked request
// sits under the first of its keys still missing (State::waiters) and in one
// ordered deadline index, connections before their token check sit in a queue
// in arrival order, and only the connections an event touched are flushed.
#include "comm/tcp_store.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <deque>
#include <map>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include <spdlog/spdlog.h>

#include "comm/tcp_store_wire.h"
#include "weft_contract.h"

namespace weft::comm {
using namespace store_wire;
namespace {

using Clock = std::chrono::steady_clock;
using Deadlines = std::multimap<Clock::time_point, uint64_t>;  // -> connection id

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

// What an entry costs against max_bytes: its bytes and the map's bookkeeping,
// so that a flood of empty keys is bounded too.
size_t entry_bytes(const std::string& key, const std::string& value) { return key.size() + value.size() + 64; }

// The integer an add starts from: a missing or empty value is 0; anything but
// a whole decimal number is not a counter.
bool counter_value(const std::string& v, int64_t* out) {
  *out = 0;
  if (v.empty()) return true;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), *out);
  return ec == std::errc() && end == v.data() + v.size();
}

}  // namespace

struct TcpStoreServer::Conn {
  uint64_t id = 0;
  int fd = -1;
  std::string peer;              // "address:port", for the log
  bool member = false;           // passed the token check
  bool closing = false;          // close once `out` is sent
  bool queued = false;           // in State::touched
  uint32_t events = 0;           // the epoll interest registered now
  Clock::time_point hello_by;    // before the token check: the deadline for it
  std::string in, out;           // bytes received and not parsed; to send
  // A get, wait or multi_get whose keys are not all there yet: keys before
  // wait_next are known to exist; it is indexed under wait_keys[wait_next].
  bool waiting = false;
  uint8_t wait_cmd = 0;
  std::vector<std::string> wait_keys;
  std::vector<std::pair<uint32_t, uint32_t>> wait_slices;  // multi_get: (offset, length) per key
  size_t wait_next = 0;
  // gather: keys are gather_prefix + "0".."<gather_n - 1>" but not gather_self.
  std::string gather_prefix;
  uint32_t gather_n = 0, gather_self = 0, gather_head = 0, gather_width = 0;
  uint64_t wait_seq = 0;         // tells a current index entry from a stale one
  Deadlines::iterator deadline;
};

struct TcpStoreServer::State {
  std::unordered_map<std::string, std::string> kv;
  size_t bytes = 0;  // entry_bytes of every kv entry
  // Refusals by scope (an attempt's key prefix): (who, reason) of the first.
  std::map<std::string, std::pair<std::string, std::string>> refusals;
  std::unordered_set<uint64_t> heard;  // connections that posted or were told a refusal
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
  // key -> parked requests (connection id, wait_seq) whose first missing key it is.
  std::unordered_map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> waiters;
  Deadlines deadlines;
  std::deque<uint64_t> pending;  // before the token check, oldest first (stale ids skipped)
  size_t pending_open = 0;
  size_t members = 0;
  std::vector<uint64_t> touched;  // connections with output or state to settle
  std::vector<uint64_t> dead;     // closed this round, erased at its end
  uint64_t next_id = 1;
  uint64_t next_seq = 1;

  Conn* find(uint64_t id) {
    auto it = conns.find(id);
    return it == conns.end() || it->second->fd < 0 ? nullptr : it->second.get();
  }
  void touch(Conn& c) {
    if (!c.queued) touched.push_back(c.id);
    c.queued = true;
  }
};

TcpStoreServer::TcpStoreServer(const std::string& bind_host, uint16_t port, std::string token,
                               TcpStoreServerOptions options)
    : token_(std::move(token)), opt_(std::move(options)), st_(std::make_unique<State>()) {
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
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 4096) == 0) {
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
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (wake_fd_ < 0 || epoll_fd_ < 0) {
    const std::string err = std::strerror(errno);
    ::close(listen_fd_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    throw RendezvousError("rendezvous store: eventfd/epoll: " + err);
  }
  // Ids 0 and 1 are never connection ids (State::next_id starts above them).
  epoll_event wake{EPOLLIN, {.u64 = 0}}, listen{EPOLLIN, {.u64 = 1}};
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wake);
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &listen);
  st_->next_id = 2;
  thread_ = std::thread([this] { loop(); });
}

TcpStoreServer::~TcpStoreServer() {
  stop_ = true;
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  thread_.join();
  for (auto& [id, c] : st_->conns)
    if (c->fd >= 0) ::close(c->fd);
  ::close(listen_fd_);
  ::close(wake_fd_);
  ::close(epoll_fd_);
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

void TcpStoreServer::publish_counts() {
  std::lock_guard<std::mutex> lk(counts_mu_);
  counts_.open = st_->conns.size() - st_->dead.size();
  counts_.members = st_->members;
  counts_.bytes = st_->bytes;
  counts_.heard_refusal = st_->heard.size();
  // Only after a refusal: a walk over every connection is no cost per event
  // then.
  counts_.members_unheard = 0;
  if (!st_->refusals.empty())
    for (const auto& [id, c] : st_->conns)
      counts_.members_unheard += c->fd >= 0 && c->member && !st_->heard.count(id);
}

bool TcpStoreServer::wait_until_heard(size_t connections, std::chrono::milliseconds limit,
                                      std::chrono::milliseconds settle) const {
  const auto until = Clock::now() + limit;
  Counts last = counts();
  auto changed = Clock::now();
  for (Counts n = last; n.heard_refusal < connections || n.members_unheard > 0; n = counts()) {
    const auto now = Clock::now();
    if (n.heard_refusal != last.heard_refusal || n.open != last.open) changed = now;
    last = n;
    if (now >= until) return false;
    if (n.members_unheard == 0 && now - changed >= settle) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
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

void TcpStoreServer::close_conn(Conn& c) {
  if (c.fd < 0) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  ::close(c.fd);
  c.fd = -1;
  if (c.member) --st_->members;
  else --st_->pending_open;
  if (c.waiting) st_->deadlines.erase(c.deadline);
  c.waiting = false;
  st_->dead.push_back(c.id);
}

void TcpStoreServer::accept_new() {
  for (int i = 0; i < 64; ++i) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN, or out of descriptors: the next round tries again
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // Hold at most max_pending connections before their token check: the
    // newest displaces the oldest, so a client that says hello at once gets
    // through however many idle ones are open.
    while (st_->pending_open >= std::max<size_t>(opt_.max_pending, 1) && !st_->pending.empty()) {
      Conn* oldest = st_->find(st_->pending.front());
      st_->pending.pop_front();
      if (!oldest || oldest->member) continue;
      log_refusal("closed " + oldest->peer + ": no token within " + std::to_string(opt_.max_pending) +
                  " newer connections");
      close_conn(*oldest);
    }
    auto c = std::make_unique<Conn>();
    c->id = st_->next_id++;
    c->fd = fd;
    uint16_t peer_port = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                                       : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
    c->peer = addr_string(reinterpret_cast<sockaddr*>(&ss)) + ":" + std::to_string(peer_port);
    c->hello_by = Clock::now() + opt_.hello_timeout;
    c->events = EPOLLIN | EPOLLRDHUP;
    epoll_event ev{c->events, {.u64 = c->id}};
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    st_->pending.push_back(c->id);
    ++st_->pending_open;
    st_->conns.emplace(c->id, std::move(c));
  }
}

// Reads what the socket has (at most 64 KiB a call). False: close the connection.
bool TcpStoreServer::read_some(Conn& c) {
  char buf[65536];
  ssize_t k = ::recv(c.fd, buf, sizeof buf, 0);
  if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return true;
  if (k <= 0) return false;
  c.in.append(buf, static_cast<size_t>(k));
  return true;
}

// Handles every complete message in c.in, stopping at a parked request (its
// reply comes first).
void TcpStoreServer::parse(Conn& c) {
  size_t pos = 0;
  while (c.fd >= 0 && !c.waiting && !c.closing && c.in.size() - pos >= 4) {
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
      return close_conn(c);
    }
    if (c.in.size() - pos < 4 + size_t{n}) break;
    std::string msg = c.in.substr(pos + 4, n);
    pos += 4 + size_t{n};
    if (c.member) handle(c, msg);
    else hello(c, msg);
  }
  c.in.erase(0, pos);
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
    // The reply is the status alone: whoever reaches the port learns nothing
    // of this job. The log (rank 0's) tells another job from a wrong token.
    const bool other_job = !job.empty() && !opt_.job.empty() && job != opt_.job;
    log_refusal("refused " + c.peer + ": wrong " + contract::kEnvRdzvToken +
                (job.empty() ? std::string()
                 : other_job ? " (its job: " + job + "; this store's: " + opt_.job +
                                   ": another job shares " + contract::kEnvMasterPort + ")"
                             : " (its job: " + job + ")"));
    resp.push_back(static_cast<char>(kBadToken));
  } else if (membership_closed_) {
    log_refusal("refused " + c.peer + ": the gang has formed; the store takes no new members");
    resp.push_back(static_cast<char>(kMembershipClosed));
  } else {
    c.member = true;
    --st_->pending_open;
    ++st_->members;
    resp.push_back(static_cast<char>(kOk));
  }
  c.closing = !c.member;
  c.out += framed(resp);
  st_->touch(c);
}

void TcpStoreServer::handle(Conn& c, const std::string& req) {
  Reader r{req};
  uint8_t cmd = r.u8();
  std::string resp;
  if (cmd == kSet) {
    std::string key = r.str(), value = r.str();
    if (r.bad) return void(c.closing = true);
    if (store_value(c, key, std::move(value), resp)) resp.push_back(static_cast<char>(kOk));
  } else if (cmd == kAdd) {
    std::string key = r.str();
    int64_t delta = r.i64();
    if (r.bad) return void(c.closing = true);
    auto it = st_->kv.find(key);
    const std::string old = it == st_->kv.end() ? std::string() : it->second;
    int64_t now = 0;
    if (!counter_value(old, &now) || __builtin_add_overflow(now, delta, &now)) {
      resp.push_back(static_cast<char>(kNotACounter));
      put_str(resp, old.substr(0, 64));
    } else if (store_value(c, key, std::to_string(now), resp)) {
      resp.push_back(static_cast<char>(kOk));
      put_i64(resp, now);
    }
  } else if (cmd == kRefuse) {
    std::string scope = r.str(), who = r.str(), reason = r.str();
    if (r.bad) return void(c.closing = true);
    refuse(c, std::move(scope), std::move(who), std::move(reason));
    resp.push_back(static_cast<char>(kOk));
  } else if (cmd == kGather) {
    c.gather_prefix = r.str();
    c.gather_n = r.u32();
    c.gather_self = r.u32();
    c.gather_head = r.u32();
    c.gather_width = r.u32();
    int64_t wait_ms = r.i64();
    if (r.bad || c.gather_self >= c.gather_n) return void(c.closing = true);
    if (answer_if_refused(c, c.gather_prefix)) return;
    return park(c, cmd, {}, wait_ms);
  } else if (cmd == kGet || cmd == kWait || cmd == kMultiGet) {
    std::vector<std::string> keys;
    uint32_t n = cmd == kGet ? 1 : r.u32();
    // Each key takes at least its 4-byte length: a count the message cannot
    // hold is malformed, not a reason to reserve memory.
    if (n > req.size() / 4) return void(c.closing = true);
    keys.reserve(n);
    c.wait_slices.clear();
    for (uint32_t i = 0; i < n && !r.bad; ++i) {
      keys.push_back(r.str());
      if (cmd == kMultiGet) {
        uint32_t offset = r.u32(), length = r.u32();
        c.wait_slices.emplace_back(offset, length);
      }
    }
    int64_t wait_ms = r.i64();
    if (r.bad) return void(c.closing = true);
    if (answer_if_refused(c, keys.empty() ? std::string() : keys[0])) return;
    return park(c, cmd, std::move(keys), wait_ms);
  } else {
    resp.push_back(static_cast<char>(kBadRequest));
  }
  c.out += framed(resp);
  st_->touch(c);
}

// Writes key = value unless the store would then hold more than max_bytes;
// then `resp` says so and nothing changes. True: written.
bool TcpStoreServer::store_value(Conn& c, const std::string& key, std::string value, std::string& resp) {
  auto it = st_->kv.find(key);
  const size_t old = it == st_->kv.end() ? 0 : entry_bytes(key, it->second);
  const size_t now = entry_bytes(key, value);
  if (st_->bytes - old + now > opt_.max_bytes) {
    log_refusal(fmt::format("refused {} bytes under '{}' from {}: the store holds {} of its {} bytes", value.size(),
                            key, c.peer, st_->bytes, opt_.max_bytes));
    resp.push_back(static_cast<char>(kFull));
    put_i64(resp, static_cast<int64_t>(opt_.max_bytes));
    return false;
  }
  st_->bytes = st_->bytes - old + now;
  if (it == st_->kv.end()) st_->kv.emplace(key, std::move(value));
  else it->second = std::move(value);
  key_written(key);
  return true;
}

// A rank will not join: the first refusal under a scope is kept, and every
// request parked under it is answered with it now.
void TcpStoreServer::refuse(Conn& c, std::string scope, std::string who, std::string reason) {
  st_->heard.insert(c.id);
  if (st_->refusals.count(scope)) return;
  spdlog::warn("rendezvous store: {} refused to join: {}", who, reason);
  st_->refusals.emplace(std::move(scope), std::make_pair(std::move(who), std::move(reason)));
  for (auto& [id, other] : st_->conns)
    if (other->fd >= 0 && other->waiting)
      answer_if_refused(*other, other->wait_cmd == kGather ? other->gather_prefix : other->wait_keys.at(0));
}

// Answers c's read with the refusal whose scope `key` falls under, if any
// (a parked read is unparked). True: answered.
bool TcpStoreServer::answer_if_refused(Conn& c, const std::string& key) {
  auto it = st_->refusals.begin();  // one per attempt at most, in practice one
  while (it != st_->refusals.end() && key.compare(0, it->first.size(), it->first) != 0) ++it;
  if (it == st_->refusals.end()) return false;
  if (c.waiting) {
    st_->deadlines.erase(c.deadline);
    c.waiting = false;
    c.wait_keys.clear();
  }
  std::string resp(1, static_cast<char>(kRefused));
  put_str(resp, it->second.first);
  put_str(resp, it->second.second);
  c.out += framed(resp);
  st_->heard.insert(c.id);
  st_->touch(c);
  return true;
}

// Parks a get, wait or multi_get until its keys exist or its deadline; answers
// at once when they already exist.
void TcpStoreServer::park(Conn& c, uint8_t cmd, std::vector<std::string> keys, int64_t wait_ms) {
  c.waiting = true;
  c.wait_cmd = cmd;
  c.wait_keys = std::move(keys);
  c.wait_next = 0;
  c.wait_seq = st_->next_seq++;
  wait_ms = std::clamp<int64_t>(wait_ms, 0, int64_t{1} << 40);
  c.deadline = st_->deadlines.emplace(Clock::now() + std::chrono::milliseconds(wait_ms), c.id);
  if (advance(c)) answer(c, false);
  else st_->waiters[wait_key(c, c.wait_next)].emplace_back(c.id, c.wait_seq);
}

// The key a parked request waits for at position j.
std::string TcpStoreServer::wait_key(const Conn& c, size_t j) const {
  return c.wait_cmd == kGather ? c.gather_prefix + std::to_string(j) : c.wait_keys[j];
}

// Moves past the keys that exist now. True: all do.
bool TcpStoreServer::advance(Conn& c) {
  const size_t n = c.wait_cmd == kGather ? c.gather_n : c.wait_keys.size();
  while (c.wait_next < n && ((c.wait_cmd == kGather && c.wait_next == c.gather_self) ||
                             st_->kv.count(wait_key(c, c.wait_next))))
    ++c.wait_next;
  return c.wait_next == n;
}

void TcpStoreServer::answer(Conn& c, bool timed_out) {
  std::string resp;
  if (timed_out) {
    resp.push_back(static_cast<char>(kTimedOut));
    put_str(resp, wait_key(c, c.wait_next));
  } else if (c.wait_cmd == kGet) {
    resp.push_back(static_cast<char>(kOk));
    put_str(resp, st_->kv[c.wait_keys[0]]);
  } else if (c.wait_cmd == kGather) {
    const size_t col = c.gather_self;  // its place among peer i's: self, or self-1 once i < self
    std::string out;
    out.push_back(static_cast<char>(kOk));
    put_u32(out, c.gather_n - 1);
    for (uint32_t i = 0; i < c.gather_n; ++i) {
      if (i == c.gather_self) continue;
      std::string_view v = st_->kv[wait_key(c, i)];
      std::string_view head = v.substr(0, c.gather_head);
      const size_t at = std::min(v.size(), size_t{c.gather_head} + (i < c.gather_self ? col - 1 : col) * size_t{c.gather_width});
      std::string_view cell = v.substr(at, c.gather_width);
      put_u32(out, static_cast<uint32_t>(head.size() + cell.size()));
      out.append(head);
      out.append(cell);
      if (out.size() > kMaxStoreValue) break;
    }
    if (out.size() > kMaxStoreValue) resp.push_back(static_cast<char>(kBadRequest));
    else resp = std::move(out);
  } else if (c.wait_cmd == kMultiGet) {
    auto slice = [&](size_t i) {
      const std::string& v = st_->kv[c.wait_keys[i]];
      const size_t off = std::min<size_t>(c.wait_slices[i].first, v.size());
      return std::string_view(v).substr(off, c.wait_slices[i].second);
    };
    size_t bytes = 5;
    for (size_t i = 0; i < c.wait_keys.size(); ++i) bytes += 4 + slice(i).size();
    if (bytes > kMaxStoreValue) {
      // The client would refuse a larger reply; say so instead.
      resp.push_back(static_cast<char>(kBadRequest));
    } else {
      resp.reserve(bytes);
      resp.push_back(static_cast<char>(kOk));
      put_u32(resp, static_cast<uint32_t>(c.wait_keys.size()));
      for (size_t i = 0; i < c.wait_keys.size(); ++i) {
        std::string_view v = slice(i);
        put_u32(resp, static_cast<uint32_t>(v.size()));
        resp.append(v);
      }
    }
  } else {
    resp.push_back(static_cast<char>(kOk));
  }
  st_->deadlines.erase(c.deadline);
  c.waiting = false;
  c.wait_keys.clear();
  c.out += framed(resp);
  st_->touch(c);
}

// A set or add wrote `key`: the requests parked on it move on to their next
// missing key or are answered.
void TcpStoreServer::key_written(const std::string& key) {
  auto it = st_->waiters.find(key);
  if (it == st_->waiters.end()) return;
  auto parked = std::move(it->second);
  st_->waiters.erase(it);
  for (auto [id, seq] : parked) {
    Conn* c = st_->find(id);
    if (!c || !c->waiting || c->wait_seq != seq) continue;  // closed, answered or timed out
    if (advance(*c)) answer(*c, false);
    else st_->waiters[wait_key(*c, c->wait_next)].emplace_back(id, seq);
  }
}

void TcpStoreServer::expire_deadlines() {
  const auto now = Clock::now();
  while (!st_->deadlines.empty() && st_->deadlines.begin()->first <= now) {
    Conn* c = st_->find(st_->deadlines.begin()->second);
    if (!c) {
      st_->deadlines.erase(st_->deadlines.begin());
      continue;
    }
    // A key may have appeared that a stale index entry missed: answer with it.
    answer(*c, !advance(*c));
  }
  while (!st_->pending.empty()) {
    Conn* c = st_->find(st_->pending.front());
    if (c && !c->member && now < c->hello_by) break;
    st_->pending.pop_front();
    if (!c || c->member) continue;
    log_refusal("closed " + c->peer + ": no valid hello within " + std::to_string(opt_.hello_timeout.count()) +
                " ms");
    close_conn(*c);
  }
}

// Sends what the socket takes, then registers the interest the connection's
// state asks for: input unless a request is parked or it is closing, output
// while bytes are queued, and always a hang-up.
void TcpStoreServer::flush(Conn& c) {
  if (c.fd < 0) return;
  if (!c.out.empty()) {
    ssize_t k = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (k > 0) c.out.erase(0, static_cast<size_t>(k));
    else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return close_conn(c);
  }
  if (c.closing && c.out.empty()) return close_conn(c);
  uint32_t want = EPOLLRDHUP;
  if (!c.waiting && !c.closing) want |= EPOLLIN;
  if (!c.out.empty()) want |= EPOLLOUT;
  if (want != c.events) {
    epoll_event ev{want, {.u64 = c.id}};
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
    c.events = want;
  }
}

void TcpStoreServer::loop() {
  std::vector<epoll_event> events(1024);
  while (!stop_) {
    auto next = Clock::now() + std::chrono::seconds(1);
    if (!st_->deadlines.empty()) next = std::min(next, st_->deadlines.begin()->first);
    for (uint64_t id : st_->pending)  // the oldest live one bounds the wait
      if (Conn* c = st_->find(id); c && !c->member) {
        next = std::min(next, c->hello_by);
        break;
      }
    int wait_ms = static_cast<int>(std::clamp<int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count() + 1, 0, 1000));
    int r = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), wait_ms);
    if (r < 0 && errno != EINTR) {
      spdlog::error("rendezvous store: epoll_wait: {}", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (stop_) break;
    for (int e = 0; e < r; ++e) {
      const uint64_t id = events[e].data.u64;
      const uint32_t rev = events[e].events;
      if (id == 0) {
        uint64_t v;
        (void)!::read(wake_fd_, &v, sizeof v);
        continue;
      }
      if (id == 1) {
        accept_new();
        continue;
      }
      Conn* c = st_->find(id);
      if (!c) continue;
      bool ok = true;
      if ((rev & EPOLLIN) && !c->waiting && !c->closing) {
        ok = read_some(*c);
        if (ok) parse(*c);
      } else if (rev & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
        ok = false;  // a parked request's client hung up
      }
      if (!ok) close_conn(*c);
      else st_->touch(*c);
    }
    // Sets and adds may have completed parked requests; deadlines may have passed.
    expire_deadlines();
    // A connection whose parked request was answered may hold its next
    // request already; flushing it can answer others in turn.
    for (size_t i = 0; i < st_->touched.size(); ++i) {
      Conn* c = st_->find(st_->touched[i]);
      if (!c) continue;
      c->queued = false;
      if (!c->waiting && !c->closing && !c->in.empty()) parse(*c);
      flush(*c);
    }
    st_->touched.clear();
    for (uint64_t id : st_->dead) st_->conns.erase(id);
    st_->dead.clear();
    publish_counts();
  }
}

}  // namespace weft::comm
