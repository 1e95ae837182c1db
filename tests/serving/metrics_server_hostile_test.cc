// The /metrics server of weft-worker and weft-operator (serving/) against
// slow, idle and hostile clients: a scrape must get through while they are
// connected, none of them may hold a connection past the whole-request
// deadline, a bad request gets a 4xx and a close, and the server never takes
// the descriptors training needs.
#include "metrics_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <prometheus/counter.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <dirent.h>
#include <thread>
#include <vector>

#include "support/net.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using weft::testing::http_get;

std::shared_ptr<prometheus::Registry> registry_with_a_counter() {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter().Name("weft_test_total").Help("t").Register(*registry).Add({}).Increment(7);
  return registry;
}

// True when the server closed `fd` within `limit` (EOF or reset); bytes it
// sent before closing are read and dropped.
bool closed_by_peer(int fd, std::chrono::milliseconds limit) {
  auto until = Clock::now() + limit;
  char buf[4096];
  while (Clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count());
    if (::poll(&p, 1, std::max(left, 1)) <= 0) continue;
    if (::recv(fd, buf, sizeof buf, 0) <= 0) return true;
  }
  return false;
}

struct Exchange {
  std::string data;  // every byte the server sent
  bool eof = false;  // it closed the connection (EOF, not a reset) within the limit
  std::string status_line() const { return data.substr(0, data.find("\r\n")); }
};

// Connects, sends `request` (as much as the server takes; a failed send is
// not an error here), optionally half-closes, and reads until the server
// closes or `limit` passes.
Exchange exchange(int port, const std::string& request, std::chrono::milliseconds limit = 20000ms,
                  bool half_close = false, int rcvbuf = 0) {
  Exchange e;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return e;
  }
  weft::testing::send_all(fd, request);
  if (half_close) ::shutdown(fd, SHUT_WR);
  auto until = Clock::now() + limit;
  char buf[65536];
  while (Clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count());
    if (::poll(&p, 1, std::max(left, 1)) <= 0) continue;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      e.data.append(buf, static_cast<size_t>(n));
      continue;
    }
    e.eof = n == 0;
    break;
  }
  ::close(fd);
  return e;
}

// CPU seconds (user + system) this process has used.
double process_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// CPU seconds the server's thread ("weft-metrics") has used; the whole
// process's when no thread has that name.
double server_thread_cpu_seconds() {
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d)) {
      const std::string task = std::string("/proc/self/task/") + e->d_name;
      FILE* f = std::fopen((task + "/comm").c_str(), "r");
      if (!f) continue;
      char name[64] = {};
      const bool ours = std::fgets(name, sizeof name, f) && std::string(name) == "weft-metrics\n";
      std::fclose(f);
      if (!ours) continue;
      f = std::fopen((task + "/stat").c_str(), "r");
      char buf[1024] = {};
      const size_t n = f ? std::fread(buf, 1, sizeof buf - 1, f) : 0;
      if (f) std::fclose(f);
      ::closedir(d);
      std::string stat(buf, n);
      std::istringstream rest(stat.substr(stat.rfind(')') + 2));
      std::string field;
      double utime = 0, stime = 0;
      for (int i = 3; i <= 15 && rest >> field; ++i) {
        if (i == 14) utime = std::stod(field);
        if (i == 15) stime = std::stod(field);
      }
      return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
    }
    ::closedir(d);
  }
  return process_cpu_seconds();
}

size_t open_descriptors() {
  size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d)) ++n;
    ::closedir(d);
  }
  return n >= 3 ? n - 3 : 0;  // ., .. and the directory's own descriptor
}

// A child process that opens `count` connections to `port` and holds them,
// idle, until it is killed. Forked with the soft descriptor limit raised to
// `nofile`, so the parent's lowered limit does not bound the flood.
pid_t fork_flood(int port, int count, rlim_t nofile) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = nofile;
  ::setrlimit(RLIMIT_NOFILE, &lim);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < count; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd >= 0) ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  for (;;) ::pause();
}

// Puts back the descriptor limit, closes descriptors and kills a child however
// a test ends.
struct Restore {
  rlimit limit{};
  std::vector<int> fds;
  pid_t child = -1;
  Restore() { ::getrlimit(RLIMIT_NOFILE, &limit); }
  void release() {
    for (int f : fds) ::close(f);
    fds.clear();
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
  ~Restore() {
    release();
    if (child > 0) {
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, 0);
    }
  }
};

TEST(MetricsServerHostile, ScrapesSucceedWhileSlowClientsAreConnected) {
  auto registry = registry_with_a_counter();
  MetricsServerOptions o;
  o.request_deadline = 30s;  // the slow clients stay for the whole test
  MetricsServer server(registry, "127.0.0.1", 0, o);
  // Eight clients that send a request a byte at a time, one byte every 200 ms.
  std::vector<int> slow;
  for (int i = 0; i < 8; ++i) {
    int fd = weft::testing::connect_loopback(server.port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(weft::testing::send_all(fd, "G"));
    slow.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread drip([&] {
    while (!stop) {
      for (int fd : slow) weft::testing::send_all(fd, "E");
      std::this_thread::sleep_for(200ms);
    }
  });
  // The server counts a connection once its loop has accepted it; scrape only
  // when all eight are held, or the scrapes may run before they are.
  const auto until = Clock::now() + 20s;
  while (server.open_connections() < 8u && Clock::now() < until) std::this_thread::sleep_for(10ms);
  EXPECT_GE(server.open_connections(), 8u) << "the server never accepted the slow clients";
  for (int i = 0; i < 5; ++i) {
    auto r = http_get(server.port(), "/metrics");
    EXPECT_EQ(r.status, 200) << "scrape " << i;
    EXPECT_NE(r.body.find("weft_test_total 7"), std::string::npos) << r.body;
  }
  EXPECT_GE(server.open_connections(), 8u) << "the slow clients are still connected";
  stop = true;
  drip.join();
  for (int fd : slow) ::close(fd);
}

TEST(MetricsServerHostile, ASlowClientIsClosedAtTheWholeRequestDeadline) {
  auto registry = registry_with_a_counter();
  MetricsServerOptions o;
  o.request_deadline = 1s;
  MetricsServer server(registry, "127.0.0.1", 0, o);
  int fd = weft::testing::connect_loopback(server.port());
  ASSERT_GE(fd, 0);
  // One byte every 100 ms, far inside any per-receive timeout.
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: a-very-slow-client.example\r\nX-Pad: ";
  const auto t0 = Clock::now();
  bool closed = false;
  for (size_t i = 0; !closed && Clock::now() - t0 < 20s; ++i) {
    if (!weft::testing::send_all(fd, std::string(1, req[i % req.size()]))) break;
    closed = closed_by_peer(fd, 100ms);
  }
  if (!closed) closed = closed_by_peer(fd, 10000ms);
  EXPECT_TRUE(closed) << "a slow-loris connection must be closed";
  EXPECT_GE(Clock::now() - t0, 800ms);
  EXPECT_LT(Clock::now() - t0, 15s);
  ::close(fd);
  EXPECT_EQ(http_get(server.port(), "/metrics").status, 200);
}

TEST(MetricsServerHostile, ConnectionsAreBoundedAndANewScrapeGetsIn) {
  auto registry = registry_with_a_counter();
  MetricsServerOptions o;
  o.request_deadline = 60s;
  o.max_connections = 16;
  MetricsServer server(registry, "127.0.0.1", 0, o);
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i) {
    int fd = weft::testing::connect_loopback(server.port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  auto until = Clock::now() + 20s;
  while (server.open_connections() < o.max_connections && Clock::now() < until) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(server.open_connections(), o.max_connections);
  auto r = http_get(server.port(), "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_LE(server.open_connections(), o.max_connections);
  // An oversized request ends the connection; it is not buffered.
  int fd = weft::testing::connect_loopback(server.port());
  weft::testing::send_all(fd, "GET /metrics HTTP/1.1\r\nX: " + std::string(64 * 1024, 'a'));
  EXPECT_TRUE(closed_by_peer(fd, 10000ms));
  ::close(fd);
  for (int f : idle) ::close(f);
}

// Clients that send what is not an HTTP/1.x GET: binary bytes (a TLS hello),
// an HTTP/0.9 request line, other versions, a bad or overflowing
// Content-Length, a chunked body, a request cut off by a half-close, a
// control byte in the path. Each gets a 4xx and the connection closed at once,
// not at the whole-request deadline (60 s here; 20 s is the "at once" bound).
TEST(MetricsServerHostile, MalformedRequestsGetA4xxAndACloseAtOnce) {
  auto registry = registry_with_a_counter();
  MetricsServerOptions o;
  o.request_deadline = 60s;
  MetricsServer server(registry, "127.0.0.1", 0, o);
  struct Case {
    const char* what;
    std::string request;
    bool half_close;
    const char* status;
  };
  const std::vector<Case> cases = {
      {"TLS ClientHello", std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11), false, "400"},
      {"NUL bytes", std::string(64, '\0'), false, "400"},
      {"HTTP/0.9", "GET /metrics\r\n", false, "400"},
      {"HTTP/0.9 with a blank line", "GET /metrics\r\n\r\n", false, "400"},
      {"HTTP/2.0", "GET /metrics HTTP/2.0\r\n\r\n", false, "400"},
      {"HTTP/9.9", "GET /metrics HTTP/9.9\r\n\r\n", false, "400"},
      {"tabs for spaces", "GET\t/metrics\tHTTP/1.1\r\n\r\n", false, "400"},
      {"overflowing Content-Length", "GET /metrics HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
       false, "400"},
      {"negative Content-Length", "GET /metrics HTTP/1.1\r\nContent-Length: -1\r\n\r\n", false, "400"},
      {"two Content-Lengths", "GET /metrics HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\n", false,
       "400"},
      {"chunked GET", "GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffff\r\nabc", false, "400"},
      {"header without a colon", "GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n", false, "400"},
      {"request line, then half-close", "GET /metrics HTTP/1.1\r\nHost: x", true, "400"},
      {"NUL in the path", std::string("GET /metrics\0 HTTP/1.1\r\n\r\n", 27), false, "400"},
      {"16 KiB path", "GET /" + std::string(16384, 'a') + " HTTP/1.1\r\n\r\n", false, "414"},
      {"DELETE", "DELETE /metrics HTTP/1.1\r\n\r\n", false, "405"},
      {"//metrics", "GET //metrics HTTP/1.1\r\n\r\n", false, "404"},
      {"/ready/..", "GET /ready/.. HTTP/1.1\r\n\r\n", false, "404"},
  };
  for (const auto& c : cases) {
    Exchange e = exchange(server.port(), c.request, 20000ms, c.half_close);
    EXPECT_EQ(e.status_line().substr(0, 12), std::string("HTTP/1.1 ") + c.status)
        << c.what << ": got '" << e.status_line() << "'";
    EXPECT_TRUE(e.eof) << c.what << ": the connection must be closed";
  }
  // Leading blank lines are ignored; a bare LF ends lines; a proxy's absolute
  // form names the same path.
  EXPECT_EQ(exchange(server.port(), "\r\nGET /metrics HTTP/1.1\r\n\r\n").status_line(), "HTTP/1.1 200 OK");
  EXPECT_EQ(exchange(server.port(), "GET /metrics HTTP/1.0\n\n").status_line(), "HTTP/1.1 200 OK");
  EXPECT_EQ(exchange(server.port(), "GET http://127.0.0.1/metrics HTTP/1.1\r\n\r\n").status_line(),
            "HTTP/1.1 200 OK");
  // HEAD: the head only, whatever the status.
  Exchange head = exchange(server.port(), "HEAD /nothing-here HTTP/1.1\r\n\r\n");
  EXPECT_EQ(head.status_line(), "HTTP/1.1 404 Not Found");
  EXPECT_EQ(head.data.substr(head.data.find("\r\n\r\n") + 4), "") << head.data;
  EXPECT_EQ(http_get(server.port(), "/metrics").status, 200);
}

// Clients that send more than the server reads before it answers: 8 MiB of
// headers in one send, a POST with a 2 MiB body, 50 pipelined requests. Each
// must read its response (431, 405, the first request's 200) and then EOF,
// not a connection reset that loses the response.
TEST(MetricsServerHostile, TheResponseIsReadNotResetWhenTheClientSentMore) {
  auto registry = registry_with_a_counter();
  MetricsServer server(registry, "127.0.0.1", 0);
  for (int i = 0; i < 3; ++i) {  // a reset is a race the client usually, not always, loses
    Exchange huge =
        exchange(server.port(), "GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(8 << 20, 'a') + "\r\n\r\n");
    EXPECT_EQ(huge.status_line(), "HTTP/1.1 431 Request Header Fields Too Large");
    EXPECT_TRUE(huge.eof);
    Exchange post = exchange(server.port(), "POST /metrics HTTP/1.1\r\nContent-Length: 2097152\r\n\r\n" +
                                                std::string(2 << 20, 'x'));
    EXPECT_EQ(post.status_line(), "HTTP/1.1 405 Method Not Allowed");
    EXPECT_TRUE(post.eof);
  }
  std::string pipelined;
  for (int i = 0; i < 50; ++i) pipelined += "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  Exchange pipe = exchange(server.port(), pipelined);
  EXPECT_EQ(pipe.status_line(), "HTTP/1.1 200 OK");
  EXPECT_NE(pipe.data.find("weft_test_total 7"), std::string::npos);
  EXPECT_TRUE(pipe.eof);
  EXPECT_EQ(http_get(server.port(), "/metrics").status, 200);
}

// A scraper whose large response is still being sent (it reads slowly) while
// 100 idle connections arrive at a server of 16: the idle ones are displaced,
// not the answer in flight, so the scraper reads the whole body.
TEST(MetricsServerHostile, AnAnswerInFlightIsNotDisplacedByIdleConnections) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& family = prometheus::BuildCounter().Name("weft_big_total").Help("t").Register(*registry);
  const std::string pad(200, 'p');
  for (int i = 0; i < 30000; ++i) family.Add({{"i", std::to_string(i)}, {"pad", pad}}).Increment();  // ~7 MiB
  MetricsServerOptions o;
  o.request_deadline = 60s;
  o.max_connections = 16;
  MetricsServer server(registry, "127.0.0.1", 0, o);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int small = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(server.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_TRUE(weft::testing::send_all(fd, "GET /metrics HTTP/1.1\r\n\r\n"));
  // Wait for the first bytes of the answer, read no more for now.
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 20000), 1);
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i) {
    int c = weft::testing::connect_loopback(server.port());
    ASSERT_GE(c, 0);
    idle.push_back(c);
  }
  auto until = Clock::now() + 20s;
  while (server.open_connections() < o.max_connections && Clock::now() < until) std::this_thread::sleep_for(20ms);
  std::this_thread::sleep_for(200ms);  // let the server accept what is queued
  std::string got;
  char buf[65536];
  until = Clock::now() + 30s;
  while (Clock::now() < until) {
    if (::poll(&p, 1, 1000) <= 0) continue;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  for (int c : idle) ::close(c);
  const size_t head_end = got.find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos);
  const size_t cl = got.find("Content-Length: ");
  ASSERT_NE(cl, std::string::npos);
  const size_t want = std::stoul(got.substr(cl + 16));
  EXPECT_GT(want, size_t{4} << 20);
  EXPECT_EQ(got.size() - head_end - 4, want) << "the answer was cut off";
}

// Four clients scrape a registry of about 2 MiB back to back for 3 s (each
// scrape costs the server milliseconds of serialization): the server's
// thread keeps to its share of a core (a tenth, with short bursts) rather
// than taking a whole one from training, and the scrapes are still answered.
TEST(MetricsServerHostile, ScrapersHammeringTheServerGetATenthOfACore) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& family = prometheus::BuildCounter().Name("weft_big_total").Help("t").Register(*registry);
  for (int i = 0; i < 20000; ++i) family.Add({{"i", std::to_string(i)}, {"pad", std::string(60, 'p')}}).Increment();
  MetricsServer server(registry, "127.0.0.1", 0);
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 4; ++i)
    clients.emplace_back([&] {
      while (!stop)
        if (http_get(server.port(), "/metrics", 30s).status == 200) ++answered;
    });
  std::this_thread::sleep_for(1s);  // past the first burst
  const double cpu0 = server_thread_cpu_seconds();
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(3s);
  const double cpu = server_thread_cpu_seconds() - cpu0;
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_LT(cpu, 0.4 * wall) << "the server thread used " << cpu << " s of CPU in " << wall << " s";
  EXPECT_GT(answered.load(), 0);
  EXPECT_EQ(http_get(server.port(), "/ready", 30s).status, 503);
}

// A flood of idle connections (200, from another process) at a process whose
// soft descriptor limit leaves little room: the server keeps a reserve of
// descriptors free for training (a checkpoint must still open its files), and
// a scrape still gets in.
TEST(MetricsServerHostile, AConnectionFloodLeavesDescriptorsForTraining) {
  auto registry = registry_with_a_counter();
  MetricsServerOptions o;
  o.request_deadline = 60s;
  MetricsServer server(registry, "127.0.0.1", 0, o);
  Restore restore;
  ASSERT_GE(restore.limit.rlim_cur, 512u) << "the flood needs descriptors";
  rlimit low = restore.limit;
  low.rlim_cur = open_descriptors() + 64;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  restore.child = fork_flood(server.port(), 200, restore.limit.rlim_cur);
  ASSERT_GT(restore.child, 0);
  std::this_thread::sleep_for(5s);  // the flood arrives and is accepted
  // Training opens 16 files at once; the server has left that many free.
  for (int i = 0; i < 16; ++i) {
    int f = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    EXPECT_GE(f, 0) << "descriptor " << i << " of 16: " << std::strerror(errno) << "; the server holds "
                    << server.open_connections();
    if (f >= 0) restore.fds.push_back(f);
  }
  restore.release();
  EXPECT_EQ(http_get(server.port(), "/metrics", 20s).status, 200);
}

// Connections keep arriving when the process has no descriptor left at all
// (training took them): accept fails with EMFILE and the connection stays
// queued, so the listener stays readable. The server must wait, not spin on
// it; once descriptors are back, scrapes are answered again.
TEST(MetricsServerHostile, NoBusyLoopWhenAcceptHasNoDescriptor) {
  auto registry = registry_with_a_counter();
  MetricsServer server(registry, "127.0.0.1", 0);
  Restore restore;
  rlimit low = restore.limit;
  low.rlim_cur = std::min<rlim_t>(restore.limit.rlim_cur, open_descriptors() + 64);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  // "Training" holds every descriptor.
  for (int f; (f = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) restore.fds.push_back(f);
  restore.child = fork_flood(server.port(), 20, restore.limit.rlim_cur);
  ASSERT_GT(restore.child, 0);
  std::this_thread::sleep_for(500ms);
  const double cpu0 = process_cpu_seconds();
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(2s);
  const double cpu = process_cpu_seconds() - cpu0;
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  restore.release();
  // A spinning poll loop burns a core while nothing else here runs.
  EXPECT_LT(cpu, 0.25 * wall) << "the server used " << cpu << " s of CPU in " << wall << " s";
  EXPECT_EQ(http_get(server.port(), "/metrics", 20s).status, 200);
}

}  // namespace
}  // namespace weft
