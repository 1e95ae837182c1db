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

#include "comm/tcp_store_wire.h"
#include "weft_contract.h"

namespace weft::comm {
using namespace store_wire;
namespace {

using Clock = std::chrono::steady_clock;

// The largest reply a client accepts.
constexpr uint32_t kMaxReply = kMaxStoreValue + 64;

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
  // The store says no more than "no": which job it serves is not for
  // whoever reaches its port. Rank 0's log names this rank's job.
  throw TokenRejectedError("rendezvous: the store at " + endpoint() + " rejected this rank's token: " +
                           contract::kEnvRdzvToken + " must be the same on every rank, or another job's store holds " +
                           contract::kEnvMasterPort + " " + std::to_string(opt_.port) + " on " + opt_.host +
                           " (rank 0's log names the job it refused)");
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
  if (resp[0] == kRefused) {
    Reader r{resp, 1};
    std::string who = r.str(), reason = r.str();
    throw RankRefusedError("rendezvous: " + (r.bad ? std::string("a rank") : who) + " refused to join the job: " +
                           (r.bad ? std::string("(no reason given)") : reason));
  }
  if (resp[0] == kFull) {
    Reader r{resp, 1};
    throw RendezvousError(fmt::format("rendezvous: the store at {} is full (its keys and values may hold {} bytes)",
                                      endpoint(), r.i64()));
  }
  return resp;
}

void TcpStore::refuse(const std::string& who, const std::string& reason) {
  std::string m(1, static_cast<char>(kRefuse));
  put_str(m, prefix_);
  put_str(m, who);
  put_str(m, reason.substr(0, 4096));
  request(m, std::chrono::milliseconds(0));
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

// A batched read's reply that says a key never came: the error names it
// (without this client's attempt prefix).
void TcpStore::throw_if_timed_out(const std::string& resp, Reader& r, std::chrono::milliseconds timeout) const {
  if (resp[0] != kTimedOut) return;
  std::string missing = r.str();
  if (missing.rfind(prefix_, 0) == 0) missing = missing.substr(prefix_.size());
  throw RendezvousError("rendezvous: timed out after " + std::to_string(timeout.count()) + " ms waiting for key '" +
                        missing + "' in the store at " + endpoint());
}

std::vector<std::string> TcpStore::multi_get(const std::vector<std::string>& keys,
                                             std::chrono::milliseconds timeout) {
  std::vector<Slice> slices;
  slices.reserve(keys.size());
  for (auto& k : keys) slices.push_back({k});
  return multi_get_slices(slices, timeout);
}

std::vector<std::string> TcpStore::multi_get_slices(const std::vector<Slice>& keys, std::chrono::milliseconds timeout) {
  std::string m(1, static_cast<char>(kMultiGet));
  put_u32(m, static_cast<uint32_t>(keys.size()));
  for (auto& k : keys) {
    put_str(m, full_key(k.key));
    put_u32(m, k.offset);
    put_u32(m, k.length);
  }
  put_i64(m, timeout.count());
  if (m.size() > kMaxStoreValue)
    throw RendezvousError(fmt::format("rendezvous: a multi_get of {} keys takes {} bytes; the store's limit is {}",
                                      keys.size(), m.size(), kMaxStoreValue));
  std::string resp = request(m, timeout);
  Reader r{resp, 1};
  throw_if_timed_out(resp, r, timeout);
  if (resp[0] != kOk)
    throw RendezvousError(fmt::format("rendezvous: the store at {} refused a multi_get of {} keys (its reply would "
                                      "exceed {} bytes)", endpoint(), keys.size(), kMaxStoreValue));
  std::vector<std::string> values;
  uint32_t n = r.u32();
  if (r.bad || n != keys.size())
    throw RendezvousError("rendezvous: malformed multi_get reply from the store at " + endpoint());
  values.reserve(n);
  for (uint32_t i = 0; i < n && !r.bad; ++i) values.push_back(r.str());
  if (r.bad) throw RendezvousError("rendezvous: malformed multi_get reply from the store at " + endpoint());
  return values;
}

std::vector<std::string> TcpStore::gather_column(const std::string& prefix, uint32_t n, uint32_t self,
                                                uint32_t head, uint32_t width, std::chrono::milliseconds timeout) {
  std::string m(1, static_cast<char>(kGather));
  put_str(m, full_key(prefix));
  put_u32(m, n);
  put_u32(m, self);
  put_u32(m, head);
  put_u32(m, width);
  put_i64(m, timeout.count());
  std::string resp = request(m, timeout);
  Reader r{resp, 1};
  throw_if_timed_out(resp, r, timeout);
  if (resp[0] != kOk)
    throw RendezvousError(fmt::format("rendezvous: the store at {} refused to gather {} rows under '{}' (its reply "
                                      "would exceed {} bytes)", endpoint(), n, prefix, kMaxStoreValue));
  std::vector<std::string> values;
  uint32_t count = r.u32();
  if (r.bad || count + 1 != n)
    throw RendezvousError("rendezvous: malformed gather reply from the store at " + endpoint());
  values.reserve(count);
  for (uint32_t i = 0; i < count && !r.bad; ++i) values.push_back(r.str());
  if (r.bad) throw RendezvousError("rendezvous: malformed gather reply from the store at " + endpoint());
  return values;
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  std::string m(1, static_cast<char>(kAdd));
  put_str(m, full_key(key));
  put_i64(m, delta);
  std::string resp = request(m, std::chrono::milliseconds(0));
  Reader r{resp, 1};
  if (resp[0] == kNotACounter) {
    std::string value = r.str();
    throw RendezvousError(fmt::format("rendezvous: add of {} to key '{}' refused by the store at {}: its value '{}' "
                                      "is not an integer, or the sum does not fit 64 bits (the value is unchanged)",
                                      delta, key, endpoint(), value));
  }
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
