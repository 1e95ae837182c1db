// The running weft-operator's HTTP endpoints (/metrics on --metrics-port,
// /healthz and /readyz on --health-port) while clients hold connections open
// without asking anything (idle keep-alive ones, as a scraper's pool leaves
// them) or send a request a byte at a time: a scrape and a kubelet probe must
// still be answered at once. Under prometheus::Exposer (civetweb, 2 threads,
// 120 s keep-alive) two idle clients made a scrape wait 9.5 s and 60 idle
// plus 4 slow ones over 300 s (issue #70); cpprest's probe listener kept idle
// connections forever, so enough of them took every descriptor and the
// probes went unanswered. The operator runs as a user runs it, against a
// kubeconfig whose API server does not answer: it serves both ports while
// its informers retry.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/net.h"
#include "support/run_process.h"

namespace {

using namespace std::chrono_literals;
using weft::testing::seconds_since;

// weft-operator in the background, its output in `log`, with at most
// `nofile` descriptors when given; SIGTERM (then SIGKILL) on destruction.
class OperatorProcess {
 public:
  OperatorProcess(const std::vector<std::string>& args, const std::string& log, rlim_t nofile = 0) : log_(log) {
    const std::string bin = weft::testing::bin("weft-operator");
    pid_ = ::fork();
    if (pid_ == 0) {
      if (nofile > 0) {
        const rlimit lim{nofile, nofile};
        ::setrlimit(RLIMIT_NOFILE, &lim);
      }
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      std::vector<char*> argv{const_cast<char*>(bin.c_str())};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(bin.c_str(), argv.data());
      _exit(127);
    }
  }
  ~OperatorProcess() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 200; ++i, std::this_thread::sleep_for(50ms))
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  std::string log_tail() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    const std::string all = s.str();
    return all.size() > 3000 ? all.substr(all.size() - 3000) : all;
  }

 private:
  std::string log_;
  int pid_ = -1;
};

// A socket connected to 127.0.0.1:port within `limit`, or -1: a server that
// stopped accepting (its accept queue full) leaves connect() waiting for
// minutes.
int connect_within(int port, std::chrono::milliseconds limit) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int err = 0;
  socklen_t len = sizeof err;
  pollfd p{fd, POLLOUT, 0};
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 &&
      (errno != EINPROGRESS || ::poll(&p, 1, static_cast<int>(limit.count())) != 1 ||
       ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0)) {
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

// Connections that ask nothing: half sent one keep-alive request (and read
// nothing more), half never sent a byte; and `slow` more that trickle a
// request one byte every 300 ms until the server closes them or stop(). Stops
// opening them at the first that the server leaves unconnected for a second.
class IdleAndSlowClients {
 public:
  IdleAndSlowClients(int port, int idle, int slow) {
    for (int i = 0; i < idle; ++i) {
      const int fd = connect_within(port, 1s);
      if (fd < 0) return;
      if (i % 2 == 0)
        weft::testing::send_all(fd, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n");
      fds_.push_back(fd);
    }
    for (int i = 0; i < slow; ++i) {
      const int fd = connect_within(port, 1s);
      if (fd < 0) return;
      fds_.push_back(fd);
      threads_.emplace_back([this, fd] {
        const std::string req = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow\r\n\r\n";
        for (char c : req) {
          if (stop_ || !weft::testing::send_all(fd, &c, 1)) return;
          for (int k = 0; k < 6 && !stop_; ++k) std::this_thread::sleep_for(50ms);
        }
      });
    }
  }
  ~IdleAndSlowClients() {
    stop_ = true;
    for (auto& t : threads_) t.join();
    for (int fd : fds_) ::close(fd);
  }
  size_t connected() const { return fds_.size(); }

 private:
  std::vector<int> fds_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
};

struct Timed {
  weft::testing::HttpResponse r;
  double seconds;
};

Timed timed_get(int port, const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  // Long enough to measure the old defect, short of the test's 60 s.
  auto r = weft::testing::http_get(port, path, 15s);
  return {r, seconds_since(t0)};
}

// A running operator whose API server refuses connections: it serves its
// ports and retries its lists.
struct RunningOperator {
  explicit RunningOperator(const std::string& tag, rlim_t nofile = 0)
      : dir(weft::testing::fresh_dir(tag)),
        metrics_port(weft::testing::free_port()),
        health_port(weft::testing::free_port()),
        op({"--kubeconfig",
            weft::testing::write_file(dir / "kubeconfig",
                                      "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
                                      "    server: http://127.0.0.1:" +
                                          std::to_string(weft::testing::free_port()) +
                                          "\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\n"
                                          "current-context: c\nusers:\n- name: u\n  user: {token: t}\n"),
            "--bind-address", "127.0.0.1", "--metrics-port", std::to_string(metrics_port), "--health-port",
            std::to_string(health_port), "--log-level", "error"},
           (dir / "operator.log").string(), nofile) {}
  // Whether both ports answer within 20 s of the start.
  bool serving() const {
    const auto t0 = std::chrono::steady_clock::now();
    while (seconds_since(t0) < 20) {
      if (weft::testing::http_get(metrics_port, "/metrics", 1s).status == 200 &&
          weft::testing::http_get(health_port, "/healthz", 1s).status == 200)
        return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }

  std::filesystem::path dir;
  int metrics_port, health_port;
  OperatorProcess op;
};

// One scrape and both probes, each answered within `bound` seconds (a
// loaded machine answers in well under one). Stops at the first failure: the
// old endpoints took the whole 15 s of each attempt.
void expect_answered(const RunningOperator& o, const std::string& round, double bound = 5.0) {
  const Timed live = timed_get(o.health_port, "/healthz");
  ASSERT_EQ(live.r.status, 200) << round << ": liveness probe unanswered after " << live.seconds << " s";
  EXPECT_LT(live.seconds, bound) << round << ": liveness probe";
  // Not ready (the API server does not answer, so the caches never sync),
  // but answered at once with the reason.
  const Timed ready = timed_get(o.health_port, "/readyz");
  ASSERT_EQ(ready.r.status, 503) << round << ": readiness probe unanswered after " << ready.seconds << " s";
  EXPECT_NE(ready.r.body.find("not synced"), std::string::npos) << ready.r.body;
  EXPECT_LT(ready.seconds, bound) << round << ": readiness probe";
  const Timed m = timed_get(o.metrics_port, "/metrics");
  ASSERT_EQ(m.r.status, 200) << round << ": scrape unanswered after " << m.seconds << " s";
  EXPECT_NE(m.r.body.find("weft_operator_reconciles_total"), std::string::npos) << m.r.body.substr(0, 300);
  EXPECT_LT(m.seconds, bound) << round << ": scrape waited behind idle and slow clients";
  std::printf("%s: /healthz %.3f s, /readyz %.3f s, /metrics %.3f s\n", round.c_str(), live.seconds,
              ready.seconds, m.seconds);
}

TEST(OperatorEndpoints, IdleAndSlowClientsDelayNoScrapeAndNoProbe) {
  RunningOperator o("operator-endpoints-idle");
  ASSERT_TRUE(o.serving()) << o.op.log_tail();
  IdleAndSlowClients on_metrics(o.metrics_port, 60, 4), on_health(o.health_port, 60, 4);
  ASSERT_EQ(on_metrics.connected(), 64u);
  ASSERT_EQ(on_health.connected(), 64u);
  std::this_thread::sleep_for(500ms);  // every connection accepted and idle
  for (int round = 0; round < 3; ++round) {
    expect_answered(o, "60 idle and 4 slow clients on each port, round " + std::to_string(round));
    if (HasFatalFailure()) return;
  }
}

// More idle connections than the operator has descriptors (a limit of 256):
// the probes and a scrape are still answered, since each server holds at most
// 64 connections and a new one displaces the oldest idle one.
TEST(OperatorEndpoints, IdleConnectionsCannotTakeTheDescriptorsOfTheProbes) {
  RunningOperator o("operator-endpoints-nofile", 256);
  ASSERT_TRUE(o.serving()) << o.op.log_tail();
  IdleAndSlowClients on_metrics(o.metrics_port, 300, 0), on_health(o.health_port, 300, 0);
  std::printf("idle connections: %zu to /metrics, %zu to the probes\n", on_metrics.connected(),
              on_health.connected());
  std::this_thread::sleep_for(500ms);
  for (int round = 0; round < 2; ++round) {
    expect_answered(o, "300 idle clients on each port, 256 descriptors, round " + std::to_string(round));
    if (HasFatalFailure()) return;
  }
}

}  // namespace
