#include "node/sim_ranks.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "weft_contract.h"
#include "weft_metrics.h"

namespace weft::node {

namespace cm = contract::metrics;

namespace {

int env_int(const nlohmann::json& env, const char* name, int fallback) {
  for (const auto& e : env)
    if (e.value("name", "") == name && e.contains("value") && e["value"].is_string()) try {
        return std::stoi(e["value"].get<std::string>());
      } catch (const std::exception&) {
        return fallback;
      }
  return fallback;
}

std::string env_str(const nlohmann::json& env, const char* name) {
  for (const auto& e : env)
    if (e.value("name", "") == name && e.contains("value") && e["value"].is_string()) return e["value"];
  return "";
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

std::vector<SimulatedRank> simulated_ranks_of(const nlohmann::json& pod) {
  std::vector<SimulatedRank> out;
  const nlohmann::json& cs = pod["spec"]["containers"];
  if (!cs.is_array() || cs.empty()) return out;
  const nlohmann::json& c = cs[0];
  const nlohmann::json env = c.value("env", nlohmann::json::array());
  const int local_world = std::max(1, env_int(env, contract::kEnvLocalWorldSize, 1));
  const int node_rank = env_int(env, contract::kEnvNodeRank, 0);
  for (const auto& p : c.value("ports", nlohmann::json::array())) {
    const std::string name = p.value("name", "");
    int local = -1;
    if (name == "metrics") local = 0;
    else if (name.rfind("metrics-", 0) == 0) try {
        local = std::stoi(name.substr(8));
      } catch (const std::exception&) {
      }
    if (local < 0 || !p.contains("containerPort") || !p["containerPort"].is_number_integer()) continue;
    SimulatedRank r;
    r.job_uid = env_str(env, contract::kEnvJobUid);
    r.attempt = env_int(env, contract::kEnvAttempt, 0);
    r.node_rank = node_rank;
    r.local_rank = local;
    r.rank = local_world > 1 ? node_rank * local_world + local : env_int(env, contract::kEnvRank, node_rank);
    r.world = env_int(env, contract::kEnvWorldSize, 1);
    r.port = p["containerPort"].get<int>();
    out.push_back(r);
  }
  return out;
}

std::string simulated_exposition(const SimulatedRank& r, long steps, double step_s) {
  const std::string rank = "{" + std::string(cm::kLabelRank) + "=\"" + std::to_string(r.rank) + "\"";
  const std::string l = rank + "}";
  std::string o;
  auto family = [&](const cm::Family& f) {
    o += "# TYPE " + std::string(f.name) + " " +
         (f.type == cm::Type::Gauge ? "gauge" : f.type == cm::Type::Counter ? "counter" : "histogram") + "\n";
  };
  auto line = [&](const std::string& series, const std::string& labels, double v) {
    o += series + labels + " " + num(v) + "\n";
  };
  const double s = static_cast<double>(steps);
  family(cm::kRankInfo);
  o += std::string(cm::kRankInfo.name) + "{" + cm::kLabelInfoJobUid + "=\"" + r.job_uid + "\"," +
       cm::kLabelInfoAttempt + "=\"" + std::to_string(r.attempt) + "\"," + cm::kLabelInfoRank + "=\"" +
       std::to_string(r.rank) + "\"," + cm::kLabelInfoNodeRank + "=\"" + std::to_string(r.node_rank) + "\"," +
       cm::kLabelInfoLocalRank + "=\"" + std::to_string(r.local_rank) + "\"} 1\n";
  family(cm::kStep), line(cm::kStep.name, l, s);
  family(cm::kLoss), line(cm::kLoss.name, l, 2.0 + 8.0 / (1.0 + 0.01 * s));
  family(cm::kEvalLoss), line(cm::kEvalLoss.name, l, 0);
  family(cm::kEvalStep), line(cm::kEvalStep.name, l, 0);
  family(cm::kTokensPerSecond), line(cm::kTokensPerSecond.name, l, r.world * 4096.0 / step_s);
  family(cm::kOverlapRatio), line(cm::kOverlapRatio.name, l, 0.9);
  family(cm::kExposedCommLastStep), line(cm::kExposedCommLastStep.name, l, 0.02 * step_s);
  family(cm::kBucketCapBytes), line(cm::kBucketCapBytes.name, l, 25.0 * 1024 * 1024);
  family(cm::kStepSeconds);
  const std::string hist = cm::kStepSeconds.name;
  for (double le : {0.1, 1.0, 10.0})
    line(hist + "_bucket", rank + ",le=\"" + num(le) + "\"}", step_s <= le ? s : 0);
  line(hist + "_bucket", rank + ",le=\"+Inf\"}", s);
  line(cm::kStepSecondsSum, l, s * step_s);
  line(cm::kStepSecondsCount, l, s);
  family(cm::kExposedCommSeconds);
  line(cm::kExposedCommSeconds.name, rank + "," + cm::kLabelGroup + "=\"dp\"}", s * 0.02 * step_s);
  family(cm::kComputeSeconds), line(cm::kComputeSeconds.name, l, s * 0.8 * step_s);
  family(cm::kWaitSeconds), line(cm::kWaitSeconds.name, l, s * 0.2 * step_s);
  family(cm::kPhaseSeconds);
  const std::pair<const char*, double> phases[] = {{cm::kPhaseData, 0.05},     {cm::kPhaseForward, 0.3},
                                                   {cm::kPhaseBackward, 0.45}, {cm::kPhaseOptimizer, 0.1},
                                                   {cm::kPhaseExposedComm, 0.02}, {cm::kPhaseOther, 0.08}};
  for (const auto& [phase, share] : phases)
    line(cm::kPhaseSeconds.name, rank + "," + cm::kLabelPhase + "=\"" + phase + "\"}", s * share * step_s);
  return o;
}

SimulatedRanks::SimulatedRanks(double step_seconds) : step_seconds_(step_seconds) {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  thread_ = std::jthread([this] { serve(); });
}

SimulatedRanks::~SimulatedRanks() {
  thread_.request_stop();
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  for (auto& [fd, l] : listeners_) ::close(fd);
  ::close(wake_fd_);
  ::close(epoll_fd_);
}

std::string SimulatedRanks::add(const std::string& uid, const std::string& ip, const std::vector<SimulatedRank>& ranks) {
  std::vector<Listener> opened;
  auto fail = [&](const std::string& why) {
    for (auto& l : opened) ::close(l.fd);
    return why;
  };
  const auto now = std::chrono::steady_clock::now();
  for (const auto& r : ranks) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(r.port));
    if (::inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1) return fail("bad pod IP " + ip);
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return fail(std::string("socket: ") + std::strerror(errno));
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 64) != 0) {
      const std::string why = ip + ":" + std::to_string(r.port) + ": " + std::strerror(errno);
      ::close(fd);
      return fail(why);
    }
    opened.push_back({r, now, fd});
  }
  std::lock_guard lock(mu_);
  for (auto& l : opened) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = l.fd;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, l.fd, &ev);
    by_pod_[uid].push_back(l.fd);
    listeners_[l.fd] = l;
  }
  return "";
}

void SimulatedRanks::remove(const std::string& uid) {
  std::lock_guard lock(mu_);
  auto it = by_pod_.find(uid);
  if (it == by_pod_.end()) return;
  for (int fd : it->second) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    ::close(fd);
    listeners_.erase(fd);
  }
  by_pod_.erase(it);
}

size_t SimulatedRanks::pods() const {
  std::lock_guard lock(mu_);
  return by_pod_.size();
}

void SimulatedRanks::answer(int conn, const Listener& l) {
  // One request, read with a short deadline, then the answer and close.
  std::string req;
  char buf[2048];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (req.find("\r\n\r\n") == std::string::npos && req.size() < 16384) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    pollfd p{conn, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return;
    const ssize_t n = ::recv(conn, buf, sizeof buf, 0);
    if (n <= 0) return;
    req.append(buf, static_cast<size_t>(n));
  }
  const size_t sp1 = req.find(' '), sp2 = sp1 == std::string::npos ? sp1 : req.find(' ', sp1 + 1);
  const std::string path = sp2 == std::string::npos ? "" : req.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string status = "200 OK", type = "text/plain; version=0.0.4", body;
  if (path == "/metrics") {
    const double up = std::chrono::duration<double>(std::chrono::steady_clock::now() - l.started).count();
    body = simulated_exposition(l.rank, 1 + static_cast<long>(std::floor(up / step_seconds_)), step_seconds_);
  } else if (path == "/ready") {
    body = "ready\n";
  } else {
    status = "404 Not Found", body = "not found\n";
  }
  const std::string out = "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
                          "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  size_t sent = 0;
  while (sent < out.size()) {
    pollfd p{conn, POLLOUT, 0};
    if (::poll(&p, 1, 500) <= 0) return;
    const ssize_t n = ::send(conn, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

void SimulatedRanks::serve() {
  epoll_event evs[64];
  while (!thread_.get_stop_token().stop_requested()) {
    const int n = ::epoll_wait(epoll_fd_, evs, 64, 1000);
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.fd == wake_fd_) continue;
      std::lock_guard lock(mu_);
      auto it = listeners_.find(evs[i].data.fd);
      if (it == listeners_.end()) continue;
      for (;;) {
        const int conn = ::accept4(it->first, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (conn < 0) break;
        answer(conn, it->second);
        ::close(conn);
      }
    }
  }
}

}  // namespace weft::node
