#include "support/run_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

namespace weft::testing {

namespace fs = std::filesystem;

ProcessResult run_process(const std::vector<std::string>& args, const std::vector<std::string>& extra_env,
                          int sig, const std::string& signal_when, std::chrono::seconds timeout,
                          std::chrono::milliseconds signal_delay) {
  return run_and_signal(
      args, extra_env, sig,
      [&](const std::string& output) -> std::optional<std::chrono::milliseconds> {
        if (signal_when.empty() || output.find(signal_when) != std::string::npos) return signal_delay;
        return std::nullopt;
      },
      timeout);
}

ProcessResult run_and_signal(const std::vector<std::string>& args, const std::vector<std::string>& extra_env, int sig,
                             const SignalWhen& when, std::chrono::seconds timeout) {
  static std::atomic<int> counter = 0;  // tests run processes from several threads at once
  fs::path log = fs::temp_directory_path() /
                 ("weft-proc-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".log");
  pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::fopen(log.c_str(), "w");
    dup2(fileno(f), 1);
    dup2(fileno(f), 2);
    for (const std::string& kv : extra_env) putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    std::fprintf(stderr, "cannot exec %s\n", argv[0]);
    _exit(127);
  }
  const auto start = std::chrono::steady_clock::now();
  bool signalled = sig == 0, timed_out = false;
  std::optional<std::chrono::steady_clock::time_point> signal_at, signalled_at;
  int status = 0;
  while (true) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    auto now = std::chrono::steady_clock::now();
    if (!signalled) {
      std::ifstream so_far(log);
      std::stringstream ss;
      ss << so_far.rdbuf();
      if (!signal_at)
        if (const std::optional<std::chrono::milliseconds> delay = when(ss.str())) signal_at = now + *delay;
      if (signal_at && now >= *signal_at) {
        kill(pid, sig);
        signalled = true;
        signalled_at = now;
      }
    }
    if (now - start >= timeout) {
      kill(pid, SIGKILL);
      timed_out = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ProcessResult res;
  res.pid = pid;
  if (signalled_at)
    res.seconds_after_signal = std::chrono::duration<double>(std::chrono::steady_clock::now() - *signalled_at).count();
  res.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  res.output = ss.str();
  if (timed_out) res.output += "\n[test: killed after timeout]\n";
  fs::remove(log);
  return res;
}

fs::path fresh_dir(const std::string& tag) {
  fs::path p = fs::temp_directory_path() / ("weft-test-" + tag + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::string write_file(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
  return p.string();
}

std::string bin(const std::string& program) { return std::string(WEFT_BIN_DIR) + "/" + program; }

}  // namespace weft::testing
