// The rendezvous store under a simulated gang (issue 59, docs/benchmarks/store.md).
//
// Runs weft's TcpStoreServer in a child process (so its CPU time and peak RSS
// are the child's rusage) and drives it over loopback with N simulated ranks:
// one non-blocking connection per rank, multiplexed with epoll in a few
// threads, each rank a script of requests sent one at a time, in weft's wire
// format (comm/tcp_store_wire.h). Patterns:
//   gloo-old : Gloo's connectFullMesh as weft ran it before batched reads: per
//              mesh (groups x (lanes+1) meshes) every rank sets one key holding
//              its N-1 pair addresses (136 bytes each), then for every peer
//              waits for and gets that peer's whole key; keys carry the
//              member list, as weft's prefix did.
//   gloo     : weft's full mesh (comm/gloo_mesh.cc): per group every rank sets
//              one record (its pairs' shared address and a port per peer and
//              mesh) and reads, with one gather request, every peer's header
//              and its own ports.
//   nccl     : rank 0 sets a 128-byte id; every rank gets it.
// Only the store traffic is simulated: Gloo's N^2 TCP pair connections are not.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "comm/tcp_store.h"
#include "comm/tcp_store_wire.h"

using namespace weft::comm;
using namespace weft::comm::store_wire;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kGlooAddressBytes = 136;  // sockaddr_storage + sequence number
constexpr int64_t kWaitMs = 300000;

struct Rank {
  int fd = -1;
  int rank = 0;
  size_t steps = 0;  // requests in this rank's script
  size_t next = 0;   // index of the request in flight
  std::string in;
  Clock::time_point sent;
  double max_wait_s = 0;   // longest single request
  double total_wait_s = 0; // all requests
  size_t reply_bytes = 0;
  bool failed = false;
};

std::string key(const std::string& k) { return "attempt/0/" + k; }

std::string req_set(const std::string& k, const std::string& v) {
  std::string m(1, char(kSet));
  put_str(m, key(k));
  put_str(m, v);
  return framed(m);
}
std::string req_keys(Cmd cmd, const std::vector<std::string>& keys) {
  std::string m(1, char(cmd));
  if (cmd == kGet) put_str(m, key(keys[0]));
  else {
    put_u32(m, uint32_t(keys.size()));
    for (auto& k : keys) put_str(m, key(k));
  }
  put_i64(m, kWaitMs);
  return framed(m);
}

// The requests of every rank, made when sent: the gloo-old scripts alone
// would not fit in memory (2 (N-1) requests per mesh, each key carrying the
// member list).
struct Script {
  std::string pattern;
  int n = 0, meshes = 1, groups = 1;
  std::string members;  // "0,1,...,n-1," as weft's old key prefix had it

  size_t size(int r) const {
    if (pattern == "gloo-old") return size_t(groups) * meshes * (1 + 2 * size_t(n - 1));
    if (pattern == "gloo") return size_t(groups) * 2;
    return r == 0 ? 2 : 1;
  }
  std::string make(int r, size_t k) const {
    if (pattern == "gloo-old") {
      const size_t per_mesh = 1 + 2 * size_t(n - 1);
      const size_t mesh = k / per_mesh, j = k % per_mesh;
      const int g = int(mesh) / meshes, l = int(mesh) % meshes;
      std::string prefix = "gloo/g" + std::to_string(g) + "/" + members;
      if (l > 0) prefix += "/lane" + std::to_string(l) + "/";
      prefix += "/";
      if (j == 0) return req_set(prefix + std::to_string(r), std::string((n - 1) * kGlooAddressBytes, 'a'));
      int i = int((j - 1) / 2);
      if (i >= r) ++i;
      return req_keys((j - 1) % 2 == 0 ? kWait : kGet, {prefix + std::to_string(i)});
    }
    if (pattern == "gloo") {
      // comm/gloo_mesh.cc: a 32-byte header (lanes, the shared sockaddr) and a
      // u16 port per (peer, mesh); each peer gathers the headers and its ports.
      const int g = int(k / 2);
      const std::string prefix = "gloo/g" + std::to_string(g) + "/" + std::to_string(n) + "/0123456789abcdef/";
      if (k % 2 == 0) return req_set(prefix + std::to_string(r), std::string(32 + size_t(n - 1) * meshes * 2, 'a'));
      std::string m(1, char(kGather));
      put_str(m, key(prefix));
      put_u32(m, uint32_t(n));
      put_u32(m, uint32_t(r));
      put_u32(m, 32);
      put_u32(m, uint32_t(meshes * 2));
      put_i64(m, kWaitMs);
      return framed(m);
    }
    if (r == 0 && k == 0) return req_set("nccl/world/id", std::string(128, 'i'));
    return req_keys(kGet, {"nccl/world/id"});
  }
};

int connect_loopback(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int tries = 0; tries < 200; ++tries) {
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) break;
    if (tries == 199) { perror("connect"); std::exit(2); }
    ::close(fd);
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::string m(1, char(kHello));
  put_str(m, "bench");
  put_str(m, "");
  std::string f = framed(m);
  if (::send(fd, f.data(), f.size(), MSG_NOSIGNAL) != ssize_t(f.size())) std::exit(2);
  char reply[5];
  if (::recv(fd, reply, 5, MSG_WAITALL) != 5 || reply[4] != kOk) { fprintf(stderr, "hello refused\n"); std::exit(2); }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

bool send_next(const Script& script, Rank& rk) {
  const std::string f = script.make(rk.rank, rk.next);
  rk.sent = Clock::now();
  size_t off = 0;
  // The server reads a request whole before answering, so a short write
  // (large gloo-old blobs) is finished with a bounded blocking retry.
  for (int spins = 0; off < f.size() && spins < 1000000; ++spins) {
    ssize_t k = ::send(rk.fd, f.data() + off, f.size() - off, MSG_NOSIGNAL);
    if (k > 0) off += size_t(k);
    else if (k < 0 && errno != EAGAIN && errno != EINTR) return false;
    else std::this_thread::yield();
  }
  return off == f.size();
}

// Drives ranks [begin, end) to the end of their scripts or the deadline.
void drive(const Script& script, std::vector<Rank>& ranks, size_t begin, size_t end, Clock::time_point deadline,
           std::atomic<size_t>& done) {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  size_t live = 0;
  for (size_t i = begin; i < end; ++i) {
    epoll_event ev{EPOLLIN, {.u64 = i}};
    epoll_ctl(ep, EPOLL_CTL_ADD, ranks[i].fd, &ev);
    if (!send_next(script, ranks[i])) ranks[i].failed = true;
    else ++live;
  }
  std::vector<epoll_event> evs(1024);
  std::vector<char> buf(1 << 20);
  while (live > 0 && Clock::now() < deadline) {
    int n = epoll_wait(ep, evs.data(), int(evs.size()), 100);
    for (int e = 0; e < n; ++e) {
      Rank& rk = ranks[evs[e].data.u64];
      ssize_t k = ::recv(rk.fd, buf.data(), buf.size(), 0);
      if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
        rk.failed = true;
        epoll_ctl(ep, EPOLL_CTL_DEL, rk.fd, nullptr);
        --live;
        continue;
      }
      if (k < 0) continue;
      rk.in.append(buf.data(), size_t(k));
      uint32_t len = 0;
      if (rk.in.size() < 4) continue;
      std::memcpy(&len, rk.in.data(), 4);
      if (rk.in.size() < 4 + size_t(len)) continue;
      const bool ok = rk.in[4] == char(kOk);
      rk.in.erase(0, 4 + size_t(len));
      rk.reply_bytes += 4 + size_t(len);
      const double w = std::chrono::duration<double>(Clock::now() - rk.sent).count();
      rk.max_wait_s = std::max(rk.max_wait_s, w);
      rk.total_wait_s += w;
      if (!ok || ++rk.next == rk.steps || !send_next(script, rk)) {
        rk.failed |= !ok || rk.next < rk.steps;
        epoll_ctl(ep, EPOLL_CTL_DEL, rk.fd, nullptr);
        --live;
        ++done;
      }
    }
  }
  ::close(ep);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"weft rendezvous store benchmark: N simulated ranks over loopback"};
  int n = 1024, lanes = 2, groups = 2, threads = 2, limit_s = 300;
  std::string pattern = "gloo";
  app.add_option("--ranks", n, "simulated ranks")->check(CLI::Range(2, 65536));
  app.add_option("--pattern", pattern, "gloo-old | gloo | nccl")->check(CLI::IsMember({"gloo-old", "gloo", "nccl"}));
  app.add_option("--lanes", lanes, "comm.lanes (meshes per group: lanes+1, or 1 when lanes is 1)");
  app.add_option("--groups", groups, "Gloo groups spanning all ranks (world and dp: 2)");
  app.add_option("--threads", threads, "client threads")->check(CLI::Range(1, 64));
  app.add_option("--limit-s", limit_s, "give up after this many seconds")->check(CLI::Range(1, 3600));
  CLI11_PARSE(app, argc, argv);

  rlimit nofile{};
  getrlimit(RLIMIT_NOFILE, &nofile);
  nofile.rlim_cur = nofile.rlim_max;
  setrlimit(RLIMIT_NOFILE, &nofile);
  if (nofile.rlim_cur < rlim_t(n) + 64) {
    fprintf(stderr, "RLIMIT_NOFILE %llu is below %d ranks\n", (unsigned long long)nofile.rlim_cur, n);
    return 2;
  }

  // The server in a child: its rusage is the server's alone.
  int port_pipe[2], stop_pipe[2];
  if (pipe(port_pipe) != 0 || pipe(stop_pipe) != 0) return 2;
  pid_t child = fork();
  if (child == 0) {
    ::close(port_pipe[0]);
    ::close(stop_pipe[1]);
    {
      TcpStoreServerOptions opt;
      opt.max_pending = size_t(n) + 64;
      opt.hello_timeout = std::chrono::milliseconds(kWaitMs);
      TcpStoreServer server("127.0.0.1", 0, "bench", opt);
      uint16_t port = server.port();
      (void)!::write(port_pipe[1], &port, sizeof port);
      char c;
      (void)!::read(stop_pipe[0], &c, 1);  // the parent closes it when done
    }
    _exit(0);
  }
  ::close(port_pipe[1]);
  ::close(stop_pipe[0]);
  uint16_t port = 0;
  if (::read(port_pipe[0], &port, sizeof port) != sizeof port) return 2;

  const auto connect_start = Clock::now();
  std::vector<Rank> ranks(n);
  for (int r = 0; r < n; ++r) ranks[r].fd = connect_loopback(port);
  const double connect_s = std::chrono::duration<double>(Clock::now() - connect_start).count();
  size_t requests = 0, request_bytes = 0;
  Script script;
  script.pattern = pattern;
  script.n = n;
  script.meshes = lanes == 1 ? 1 : lanes + 1;
  script.groups = groups;
  for (int m = 0; m < n; ++m) script.members += std::to_string(m) + ",";
  for (int r = 0; r < n; ++r) {
    ranks[r].rank = r;
    ranks[r].steps = script.size(r);
    requests += ranks[r].steps;
    // Rank 1's sizes stand for every rank's (rank 0 differs only in nccl).
    if (r <= 1 || pattern != "gloo-old") {
      size_t bytes = 0;
      for (size_t k = 0; k < ranks[r].steps; ++k) bytes += script.make(r, k).size();
      request_bytes += r == 1 && pattern == "gloo-old" ? bytes * size_t(n - 1) : bytes;
    }
  }

  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::seconds(limit_s);
  std::atomic<size_t> done{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    size_t b = size_t(n) * t / threads, e = size_t(n) * (t + 1) / threads;
    pool.emplace_back([&, b, e] { drive(script, ranks, b, e, deadline, done); });
  }
  for (auto& t : pool) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  // Connection setup and hellos are not part of the timed pattern, but the
  // server's rusage covers them too (small next to the pattern).
  for (auto& rk : ranks) ::close(rk.fd);
  ::close(stop_pipe[1]);
  int status = 0;
  rusage child_ru{};
  wait4(child, &status, 0, &child_ru);

  double max_wait = 0, max_total = 0;
  size_t failed = 0, reply_bytes = 0;
  for (auto& rk : ranks) {
    reply_bytes += rk.reply_bytes;
    max_wait = std::max(max_wait, rk.max_wait_s);
    max_total = std::max(max_total, rk.total_wait_s);
    failed += rk.failed;
  }
  const double server_cpu = child_ru.ru_utime.tv_sec + child_ru.ru_utime.tv_usec / 1e6 +
                            child_ru.ru_stime.tv_sec + child_ru.ru_stime.tv_usec / 1e6;
  printf("pattern=%s ranks=%d lanes=%d groups=%d threads=%d requests=%zu request_bytes=%zu reply_bytes=%zu "
         "connect_s=%.3f complete=%s elapsed_s=%.3f server_cpu_s=%.3f server_peak_rss_mib=%.1f "
         "max_request_wait_s=%.3f max_rank_wait_s=%.3f ranks_done=%zu failed=%zu\n",
         pattern.c_str(), n, lanes, groups, threads, requests, request_bytes, reply_bytes, connect_s,
         done == size_t(n) && failed == 0 ? "yes" : "no", elapsed, server_cpu, child_ru.ru_maxrss / 1024.0,
         max_wait, max_total, done.load(), failed);
  return done == size_t(n) && failed == 0 ? 0 : 1;
}
