#include "comm/launch_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "support/net.h"

namespace weft::comm::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Forks a child whose stdout+stderr go to `out_path`; extra env on top of ours.
pid_t spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
            const std::string& out_path, int delay_ms) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  if (delay_ms > 0) usleep(static_cast<useconds_t>(delay_ms) * 1000);
  int fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  dup2(fd, 1);
  dup2(fd, 2);
  for (auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> a;
  for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  execv(a[0], a.data());
  std::perror("execv");
  _exit(127);
}

int decode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::string temp_path(const std::string& tag) {
  static std::atomic<int> counter = 0;  // tests launch from several threads at once
  return "/tmp/weft_comm_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + "_" + tag;
}

}  // namespace

std::string bin_path(const std::string& name) { return std::string(WEFT_BIN_DIR) + "/" + name; }

std::vector<RankResult> launch_ranks(const std::string& program, const LaunchSpec& spec) {
  int port = weft::testing::free_port();
  std::vector<pid_t> pids(spec.world, -1);
  std::vector<std::string> outs(spec.world);
  std::vector<Clock::time_point> started(spec.world);
  std::vector<RankResult> res(spec.world);
  std::vector<int> order = spec.start_order;
  if (order.empty())
    for (int r = 0; r < spec.world; ++r) order.push_back(r);
  std::vector<std::string> argv{program};
  argv.insert(argv.end(), spec.args.begin(), spec.args.end());
  for (int r : order) {
    std::map<std::string, std::string> env{{"RANK", std::to_string(r)},
                                           {"WORLD_SIZE", std::to_string(spec.world)},
                                           {"MASTER_ADDR", "127.0.0.1"},
                                           {"MASTER_PORT", std::to_string(port)},
                                           {"WEFT_RDZV_TOKEN", "test-token"},
                                           {"WEFT_ATTEMPT", "0"}};
    if (spec.env_by_rank.count(r))
      for (auto& [k, v] : spec.env_by_rank.at(r)) env[k] = v;
    outs[r] = temp_path("rank" + std::to_string(r));
    int delay = spec.start_delay_ms.count(r) ? spec.start_delay_ms.at(r) : 0;
    started[r] = Clock::now() + std::chrono::milliseconds(delay);
    pids[r] = spawn(argv, env, outs[r], delay);
  }
  auto deadline = Clock::now() + std::chrono::duration<double>(spec.limit_s);
  int running = spec.world;
  while (running > 0) {
    for (int r = 0; r < spec.world; ++r) {
      if (pids[r] < 0) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        res[r].code = decode(status);
        res[r].seconds = std::chrono::duration<double>(Clock::now() - started[r]).count();
        pids[r] = -1;
        --running;
      }
    }
    bool only_doomed_left = !spec.kill_when_others_exit.empty();
    for (int r = 0; r < spec.world; ++r)
      if (pids[r] > 0 && std::find(spec.kill_when_others_exit.begin(), spec.kill_when_others_exit.end(), r) ==
                             spec.kill_when_others_exit.end())
        only_doomed_left = false;
    if (running > 0 && (only_doomed_left || Clock::now() > deadline)) {
      for (int r = 0; r < spec.world; ++r)
        if (pids[r] > 0) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          res[r].code = -1;
          res[r].seconds = std::chrono::duration<double>(Clock::now() - started[r]).count();
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int r = 0; r < spec.world; ++r) {
    res[r].output = read_file(outs[r]);
    unlink(outs[r].c_str());
  }
  return res;
}

RankResult run_command(const std::vector<std::string>& argv, double limit_s,
                       const std::map<std::string, std::string>& env, double send_sigterm_after_s) {
  std::string out = temp_path("cmd");
  auto start = Clock::now();
  pid_t pid = spawn(argv, env, out, 0);
  RankResult r;
  bool termed = false;
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      r.code = decode(status);
      break;
    }
    double t = std::chrono::duration<double>(Clock::now() - start).count();
    if (!termed && send_sigterm_after_s >= 0 && t > send_sigterm_after_s) {
      kill(pid, SIGTERM);
      termed = true;
    }
    if (t > limit_s) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      r.code = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.output = read_file(out);
  unlink(out.c_str());
  return r;
}

}  // namespace weft::comm::testing
