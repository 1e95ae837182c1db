#include "metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <prometheus/text_serializer.h>
#include <stdexcept>
#include <vector>

namespace weft {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
constexpr size_t kMaxRequest = 16384;     // a GET with headers; anything longer is not a scrape
constexpr size_t kMaxRequestLine = 8192;  // of that, the request line
// After the response: the connection is half-closed and what the client still
// sends (a body, pipelined requests, the rest of oversized headers) is read
// and dropped for up to kLinger and kMaxDrain bytes, so the client reads the
// response instead of a reset (closing a socket with unread input sends RST).
constexpr milliseconds kLinger{2000};
constexpr size_t kMaxDrain = size_t{16} << 20;
// Descriptors kept free for training (checkpoints, data, communicators): a
// connection whose descriptor would leave fewer free is refused, or displaces
// one of ours. max(kMinFdReserve, soft RLIMIT_NOFILE / 4).
constexpr rlim_t kMinFdReserve = 32;
// Accept fails for lack of descriptors and none of ours can go: the listener
// is left alone this long instead of polled (it stays readable: a busy loop).
constexpr milliseconds kAcceptBackoff{100};
constexpr milliseconds kConnCapRegrow{1000};
// The thread's CPU, averaged: at most kCpuShare of a core (a tenth), in bursts of up to
// kCpuBurst, so clients hammering the port cannot take training's cores. A
// scrape every second costs well under 1% of that.
constexpr double kCpuShare = 0.1;
constexpr double kCpuBurstSeconds = 0.25;

double thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

const char* const kUsage = "weft serves GET /metrics and GET /ready over HTTP/1.x\n";

std::string response(int code, const char* reason, const std::string& type, const std::string& body,
                     bool head = false, const char* extra_header = "") {
  std::string r = "HTTP/1.1 " + std::to_string(code) + " " + reason + "\r\nContent-Type: " + type +
                  "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra_header +
                  "Connection: close\r\n\r\n";
  if (!head) r += body;
  return r;
}

std::string bad_request() { return response(400, "Bad Request", "text/plain", kUsage); }

bool is_tchar(unsigned char c) {
  return std::isalnum(c) || std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

bool is_token(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return is_tchar(c); });
}

// Bytes a request line may hold besides CR at its end: visible ASCII and SP.
bool line_byte_ok(unsigned char c) { return c == ' ' || (c > 0x20 && c < 0x7f); }

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

// One connection: it reads a request, writes the response, then lingers
// (half-closed, dropping input) until the client closes.
struct MetricsServer::Conn {
  enum State { kReading, kWriting, kLingering };
  int fd = -1;
  Clock::time_point deadline;  // request read and response sent by then
  State state = kReading;
  std::string in, out;
  size_t sent = 0;  // bytes of `out` sent
  // Request parsing, resumed where the last bytes ended.
  size_t scan = 0;        // bytes of `in` looked at
  size_t line_start = 0;  // start of the line being read
  bool have_request_line = false;
  std::string method, path;
  bool head = false;
  std::string content_length;  // as sent; empty: none
  Clock::time_point linger_until;
  size_t drained = 0;
};

MetricsServer::MetricsServer(std::shared_ptr<prometheus::Registry> registry, const std::string& bind_addr,
                             int port, MetricsServerOptions options)
    : registry_(std::move(registry)), opt_(std::move(options)) {
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
  // A deep accept queue: a burst of connections waits there (kernel memory,
  // no descriptors) instead of having SYNs dropped and retried a second later.
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, SOMAXCONN) != 0) {
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
  thread_ = std::thread([this] {
    ::pthread_setname_np(::pthread_self(), "weft-metrics");
    serve();
  });
}

MetricsServer::~MetricsServer() {
  stop_ = true;
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_fd_);
}

std::string MetricsServer::respond(const std::string& method, const std::string& path) const {
  const bool head = method == "HEAD";
  if (method != "GET" && !head)
    return response(405, "Method Not Allowed", "text/plain", kUsage, false, "Allow: GET, HEAD\r\n");
  const auto check = opt_.checks.find(path);
  if (path == "/ready" || check != opt_.checks.end()) {
    std::string why = "no readiness check";
    const ServerCheck& fn = check != opt_.checks.end() ? check->second : opt_.ready;
    const bool ok = fn && fn(&why);
    return ok ? response(200, "OK", "text/plain", why + "\n", head)
              : response(503, "Service Unavailable", "text/plain", why + "\n", head);
  }
  if (path != "/metrics" || !registry_) return response(404, "Not Found", "text/plain", kUsage, head);
  return response(200, "OK", "text/plain; version=0.0.4; charset=utf-8",
                  prometheus::TextSerializer().Serialize(registry_->Collect()), head);
}

// Reads the request in c.in from c.scan on. Returns false while it is
// incomplete; true once c.out holds the response (the answer, or a 4xx for a
// request that is malformed, oversized or asks what weft does not serve).
// Malformed input is answered as soon as it shows, not at the deadline.
bool MetricsServer::parse(Conn& c) const {
  std::string& in = c.in;
  for (; c.scan < in.size(); ++c.scan) {
    const unsigned char b = static_cast<unsigned char>(in[c.scan]);
    if (!c.have_request_line) {
      if (b != '\n') {
        // Binary input (TLS, garbage) is refused at its first byte.
        if (!line_byte_ok(b) && b != '\r') return c.out = bad_request(), true;
        if (c.scan - c.line_start >= kMaxRequestLine)
          return c.out = response(414, "URI Too Long", "text/plain", kUsage), true;
        continue;
      }
      std::string line = in.substr(c.line_start, c.scan - c.line_start);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) {  // empty lines before the request line are ignored (RFC 9112 2.2)
        c.line_start = c.scan + 1;
        continue;
      }
      // METHOD SP request-target SP HTTP/1.x; no version is HTTP/0.9, which weft does not speak.
      const size_t sp1 = line.find(' '), sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
      if (sp2 == std::string::npos || line.find(' ', sp2 + 1) != std::string::npos) return c.out = bad_request(), true;
      c.method = line.substr(0, sp1);
      std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
      const std::string version = line.substr(sp2 + 1);
      if (!is_token(c.method) || target.empty() || version.size() != 8 || version.compare(0, 7, "HTTP/1.") != 0 ||
          version[7] < '0' || version[7] > '9' ||
          std::any_of(line.begin(), line.end(), [](char ch) { return !line_byte_ok(static_cast<unsigned char>(ch)); }))
        return c.out = bad_request(), true;
      // The absolute form (a proxy's) names the same path.
      if (lower(target.substr(0, 7)) == "http://") {
        const size_t slash = target.find('/', 7);
        target = slash == std::string::npos ? "/" : target.substr(slash);
      }
      if (target[0] != '/' && c.method != "OPTIONS" && c.method != "CONNECT") return c.out = bad_request(), true;
      c.path = target.substr(0, target.find_first_of("?#"));
      c.head = c.method == "HEAD";
      c.have_request_line = true;
      c.line_start = c.scan + 1;
      continue;
    }
    if (b != '\n') {
      if (b == 0 || b == 0x7f || (b < 0x20 && b != '\t' && b != '\r')) return c.out = bad_request(), true;
      continue;
    }
    std::string line = in.substr(c.line_start, c.scan - c.line_start);
    c.line_start = c.scan + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) {  // the end of the headers: answer (a body is never read, only dropped)
      c.scan = in.size();
      c.out = respond(c.method, c.path);
      return true;
    }
    // name ":" value; a folded line (leading whitespace) or a bad name is refused.
    const size_t colon = line.find(':');
    if (colon == std::string::npos || !is_token(line.substr(0, colon))) return c.out = bad_request(), true;
    const std::string name = lower(line.substr(0, colon));
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    value.erase(value.find_last_not_of(" \t") + 1);
    if (name == "content-length") {
      // Digits only, at most 18 (no overflow), and one value however often sent.
      if (value.empty() || value.size() > 18 || !std::all_of(value.begin(), value.end(), [](char d) { return d >= '0' && d <= '9'; }) ||
          (!c.content_length.empty() && c.content_length != value))
        return c.out = bad_request(), true;
      c.content_length = value;
    } else if (name == "transfer-encoding") {
      return c.out = bad_request(), true;  // a scrape has no body; chunked framing is not parsed
    }
  }
  if (in.size() >= kMaxRequest) {
    c.out = response(431, "Request Header Fields Too Large", "text/plain", kUsage);
    return true;
  }
  return false;
}

// The serving thread's state and its steps: one turn polls, services the
// connections that are ready, accepts new ones and closes expired ones.
struct MetricsServer::Loop {
  explicit Loop(MetricsServer& server)
      : s(server), conn_cap(std::max<size_t>(server.opt_.max_connections, 1)) {}

  MetricsServer& s;
  std::vector<Conn> conns;
  std::vector<pollfd> pfds;  // wake, listen, then one per connection of `conns`
  Clock::time_point listen_paused_until{};
  // Connections allowed now: max_connections, lowered to what fits when
  // descriptors run short, and raised by one a second after.
  size_t conn_cap;
  Clock::time_point conn_cap_grows_at{};
  double cpu_credit = kCpuBurstSeconds;
  Clock::time_point credit_wall = Clock::now();
  double credit_cpu = thread_cpu_seconds();

  void run() {
    while (!s.stop_) {
      if (over_cpu_share()) {
        pollfd p{s.wake_fd_, POLLIN, 0};
        ::poll(&p, 1, static_cast<int>(std::clamp(-cpu_credit / kCpuShare * 1000 + 1, 1.0, 1000.0)));
        continue;
      }
      const int r = poll_once();
      if (s.stop_) break;
      if (r < 0) continue;  // EINTR
      if (r > 0) service_ready();
      grow_cap();
      if (r > 0 && (pfds[1].revents & POLLIN)) accept_new();
      expire();
    }
    for (auto& c : conns)
      if (c.fd >= 0) ::close(c.fd);
  }

  // True while the thread has used more than its share: what is left waits
  // (readable connections stay readable, new ones queue in the kernel).
  bool over_cpu_share() {
    const auto wall = Clock::now();
    const double cpu = thread_cpu_seconds();
    cpu_credit = std::min(kCpuBurstSeconds, cpu_credit +
                                                std::chrono::duration<double>(wall - credit_wall).count() * kCpuShare -
                                                (cpu - credit_cpu));
    credit_wall = wall;
    credit_cpu = cpu;
    return cpu_credit < 0;
  }

  // Waits for the wake descriptor, the listener (unless paused) and every
  // connection, until the next deadline; poll()'s result.
  int poll_once() {
    const auto now = Clock::now();
    auto next = now + std::chrono::seconds(1);
    pfds.clear();
    pfds.push_back({s.wake_fd_, POLLIN, 0});
    const bool listen_paused = now < listen_paused_until;
    pfds.push_back({s.listen_fd_, static_cast<short>(listen_paused ? 0 : POLLIN), 0});
    if (listen_paused) next = std::min(next, listen_paused_until);
    for (auto& c : conns) {
      pfds.push_back({c.fd, static_cast<short>(c.state == Conn::kWriting ? POLLOUT : POLLIN), 0});
      next = std::min(next, c.state == Conn::kLingering ? c.linger_until : c.deadline);
    }
    const int wait_ms = static_cast<int>(std::clamp<int64_t>(
        std::chrono::duration_cast<milliseconds>(next - now).count() + 1, 0, 1000));
    return ::poll(pfds.data(), pfds.size(), wait_ms);
  }

  void service_ready() {
    const size_t polled = pfds.size() - 2;
    for (size_t i = 0; i < polled; ++i) {
      Conn& c = conns[i];
      if (pfds[i + 2].revents == 0 || c.fd < 0) continue;
      if (over_cpu_share()) break;
      service(c);
    }
    if (pfds[0].revents & POLLIN) {
      uint64_t v;
      (void)!::read(s.wake_fd_, &v, sizeof v);
    }
  }

  void grow_cap() {
    const size_t max_conns = std::max<size_t>(s.opt_.max_connections, 1);
    if (conn_cap < max_conns && Clock::now() >= conn_cap_grows_at) {
      ++conn_cap;  // descriptors may have been freed since; a shortage lowers it again
      conn_cap_grows_at = Clock::now() + kConnCapRegrow;
    }
  }

  void accept_new() {
    rlimit lim{};
    ::getrlimit(RLIMIT_NOFILE, &lim);
    const rlim_t reserve = std::max(kMinFdReserve, lim.rlim_cur / 4);
    const rlim_t fd_cap = lim.rlim_cur == RLIM_INFINITY ? RLIM_INFINITY
                          : lim.rlim_cur > reserve       ? lim.rlim_cur - reserve
                                                         : 0;
    for (int k = 0; k < 64 && !over_cpu_share(); ++k) {
      int fd = ::accept4(s.listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          if (evict_one()) continue;
          listen_paused_until = Clock::now() + kAcceptBackoff;
        }
        break;
      }
      size_t open = 0;
      for (auto& c : conns) open += c.fd >= 0;
      // Descriptors are handed out lowest first, so this one's number says
      // that all below it are in use: past the cap, training's reserve is at
      // stake, and the connections held now are all that fit. (The number
      // of a later one says nothing: it may reuse the one an eviction freed.)
      const bool over_fds = static_cast<rlim_t>(fd) >= fd_cap;
      if (over_fds) {
        conn_cap = std::max<size_t>(open, 1);
        conn_cap_grows_at = Clock::now() + kConnCapRegrow;
      }
      if ((over_fds || open >= conn_cap) && !evict_one()) {
        // Full, and none of ours to give up: the descriptors are training's.
        ::close(fd);
        continue;
      }  // else full: the oldest connection went, so a new scrape always gets in
      Conn c;
      c.fd = fd;
      c.deadline = Clock::now() + s.opt_.request_deadline;
      conns.push_back(std::move(c));
      // A scraper's request is usually there already: answered now, it
      // needs no slot for long and cannot be displaced by the next arrivals.
      service(conns.back());
    }
  }

  // Closes what is past its deadline, and forgets closed connections.
  void expire() {
    const auto after = Clock::now();
    for (auto& c : conns) {
      if (c.fd < 0) continue;
      if (c.state == Conn::kLingering ? after >= c.linger_until : after >= c.deadline) {
        if (c.state == Conn::kReading) {
          // Best effort: a client that is still there learns why it is closed.
          static const std::string timeout = response(408, "Request Timeout", "text/plain", kUsage);
          (void)!::send(c.fd, timeout.data(), timeout.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        close_conn(c);
      }
    }
    conns.erase(std::remove_if(conns.begin(), conns.end(), [](const Conn& c) { return c.fd < 0; }), conns.end());
    s.open_ = conns.size();
  }

  static void close_conn(Conn& c) {
    ::close(c.fd);
    c.fd = -1;
  }

  // Frees a slot: a lingering connection (answered) goes first, then the
  // oldest still sending its request, and a response being sent last.
  bool evict_one() {
    Conn* victim = nullptr;
    auto rank = [](const Conn& c) { return c.state == Conn::kLingering ? 0 : c.state == Conn::kReading ? 1 : 2; };
    for (auto& c : conns)
      if (c.fd >= 0 && (!victim || rank(c) < rank(*victim) ||
                        (rank(c) == rank(*victim) && c.deadline < victim->deadline)))
        victim = &c;
    if (!victim) return false;
    close_conn(*victim);
    return true;
  }

  static void start_writing(Conn& c) {
    c.state = Conn::kWriting;
    c.sent = 0;
    c.in.clear();
    c.in.shrink_to_fit();
  }

  // Response sent: half-close, then drop input until the client closes.
  static void start_lingering(Conn& c, Clock::time_point now) {
    ::shutdown(c.fd, SHUT_WR);
    c.state = Conn::kLingering;
    c.out.clear();
    c.out.shrink_to_fit();
    c.linger_until = std::min(c.deadline, now + kLinger);
  }

  // Reads, answers or drains `c`, whichever its state asks, without blocking.
  void service(Conn& c) {
    char buf[16384];
    if (c.state == Conn::kReading) {
      ssize_t n = ::recv(c.fd, buf, std::min(sizeof buf, kMaxRequest + 1 - std::min(kMaxRequest, c.in.size())), 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n < 0 || (n == 0 && c.in.find_first_not_of("\r\n") == std::string::npos)) {
        close_conn(c);
        return;
      }
      if (n == 0) {
        c.out = bad_request();  // the client ended its side inside a request
      } else {
        c.in.append(buf, static_cast<size_t>(n));
        if (!s.parse(c)) return;
      }
      start_writing(c);
    }
    if (c.state == Conn::kWriting) {
      ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n > 0) c.sent += static_cast<size_t>(n);
      else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        close_conn(c);
        return;
      }
      if (c.sent == c.out.size()) start_lingering(c, Clock::now());
      return;
    }
    // Lingering: drop what arrives, a few reads a turn.
    for (int k = 0; k < 4; ++k) {
      ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n > 0 && (c.drained += static_cast<size_t>(n)) <= kMaxDrain) continue;
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) break;
      close_conn(c);  // EOF, an error, or too much
      break;
    }
  }
};

void MetricsServer::serve() { Loop(*this).run(); }

}  // namespace weft
