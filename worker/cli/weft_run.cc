// weft-run: starts N ranks of a weft worker on this machine, like torchrun.
//
//   weft-run -n N [--worker PATH] [--master-port P] [--] config.yaml [worker args]
//   weft-run -n N --nnodes M --node-rank K --master-addr HOST --master-port P [--] config.yaml
//   weft-run --from-env [--] config.yaml
//
// Each rank gets the environment contract (contract/weft_contract.h: RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT, WEFT_ATTEMPT, WEFT_RDZV_TOKEN,
// LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK). On one machine (--nnodes 1, the
// default) MASTER_ADDR is 127.0.0.1, the port a free one and the token a
// fresh one unless WEFT_RDZV_TOKEN is set. With --nnodes M it is one of M
// launchers: its ranks are K·N .. K·N+N-1 of M·N, rank 0's host is
// --master-addr, and every launcher must be given the same port and
// WEFT_RDZV_TOKEN. --from-env takes the same facts from the launch
// environment a pod already carries (LOCAL_WORLD_SIZE = N, WORLD_SIZE = M·N,
// NODE_RANK = K, MASTER_ADDR, MASTER_PORT; contract/launch_env.h): the
// operator's pods with spec.procsPerPod > 1 run `weft-run --from-env`, so
// the pod states its gang once. Each rank gets an
// equal share of the cores
// as OMP_NUM_THREADS and OPENBLAS_NUM_THREADS (unless already set). Every
// output line is prefixed with "[rank R] ". Gang semantics: the first rank to
// exit non-zero makes weft-run SIGTERM the others (SIGKILL after --grace
// seconds) and exit with that rank's code (a rank killed that way is
// reported as hung, and its 137 is not taken for the cause). SIGINT/SIGTERM
// are forwarded to every rank; a second one kills them. Ranks die with
// weft-run (PR_SET_PDEATHSIG), even when it is killed with SIGKILL. At start
// it prints where each rank serves Prometheus metrics (metrics.port + local
// rank, metrics/metrics_port.h).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "metrics/metrics_port.h"
#include "config/config.h"
#include "launch_env.h"
#include "weft_contract.h"

extern char** environ;

using namespace weft::contract;  // exit codes and environment names

namespace {

using Clock = std::chrono::steady_clock;

struct Rank {
  int index = 0;  // position among this launcher's ranks (LOCAL_RANK)
  int rank = 0;   // global RANK, in messages and line prefixes
  pid_t pid = -1;
  bool running = false;
  bool killed = false;  // weft-run sent it SIGKILL (it ignored SIGTERM for --grace seconds)
  int code = -1;
  int out_fd = -1, err_fd = -1;
  std::string out_partial, err_partial;
};

std::string random_token() {
  std::random_device rd;
  std::string t;
  const char* hex = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) t += hex[rd() % 16];
  return t;
}

int free_port() {
  // Port 0 on loopback, then released: the rendezvous server binds it next.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return 29500;
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

void write_all(int fd, const std::string& s) {
  const char* p = s.data();
  size_t n = s.size();
  while (n > 0) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return;
    p += k;
    n -= static_cast<size_t>(k);
  }
}

// Emits the complete lines in `partial` (all of it at EOF) with the prefix.
void emit_lines(int out, int rank, std::string& partial, bool eof) {
  std::string prefix = "[rank " + std::to_string(rank) + "] ";
  std::string chunk;
  size_t start = 0, nl;
  while ((nl = partial.find('\n', start)) != std::string::npos) {
    chunk += prefix + partial.substr(start, nl - start + 1);
    start = nl + 1;
  }
  partial.erase(0, start);
  if (eof && !partial.empty()) {
    chunk += prefix + partial + "\n";
    partial.clear();
  }
  if (!chunk.empty()) write_all(out, chunk);
}

int decode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

void signal_all(std::vector<Rank>& ranks, int sig) {
  for (auto& r : ranks)
    if (r.running) kill(-r.pid, sig);  // the rank's process group: its children too
}

// The config the ranks will run, as far as weft-run can tell from the worker
// arguments (weft-worker's `config` positional or --preset, default preset
// tiny) and the WEFT_* environment the ranks inherit. Only used to print
// where each rank serves metrics; the worker still validates it itself.
weft::WorkerConfig config_from_worker_args(const std::vector<std::string>& args) {
  std::string path, preset = "tiny", init_from;
  static const char* kValued[] = {"--preset", "--steps", "--out", "--checkpoint-dir", "--init-from"};
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--preset=", 0) == 0) {
      preset = a.substr(9);
    } else if (a == "--preset" && i + 1 < args.size()) {
      preset = args[++i];
    } else if (a.rfind("--init-from=", 0) == 0) {
      init_from = a.substr(12);
    } else if (a == "--init-from" && i + 1 < args.size()) {
      init_from = args[++i];
    } else if (std::find(std::begin(kValued), std::end(kValued), a) != std::end(kValued)) {
      ++i;  // skip the option's value
    } else if (!a.empty() && a[0] != '-' && path.empty()) {
      path = a;
    }
  }
  weft::WorkerConfig cfg;
  if (!path.empty())
    cfg = weft::load_config_file(path, init_from);
  else if (!init_from.empty())
    cfg = weft::parse_config("preset: " + preset + "\n", "--preset", init_from);
  else
    cfg = weft::preset(preset);
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  weft::apply_env_overrides(cfg, env);
  return cfg;
}

// One line per rank, printed before the ranks start, so a user (or a test)
// knows where to scrape: the same rule weft-worker binds with.
void print_metrics_endpoints(const std::vector<std::string>& worker_args, int nproc, int first_rank) {
  weft::MetricsConfig m;
  try {
    m = config_from_worker_args(worker_args).metrics;
  } catch (const weft::ConfigError& e) {
    // The worker (not necessarily weft-worker) decides; weft-worker exits 1 with the same message.
    std::printf("weft-run: bad config: %s\n", e.what());
    std::fflush(stdout);
    return;
  } catch (const std::exception& e) {
    std::printf("weft-run: cannot tell where metrics are served: %s\n", e.what());
    std::fflush(stdout);
    return;
  }
  if (m.port == 0) {
    std::printf("weft-run: metrics are disabled (metrics.port 0)\n");
  } else {
    for (int r = 0; r < nproc; ++r) {
      weft::MetricsEndpoint ep = weft::metrics_endpoint(m, r);
      if (ep.port > 0)
        std::printf("weft-run: rank %d metrics at http://127.0.0.1:%d/metrics\n", first_rank + r, ep.port);
      else
        std::printf("weft-run: rank %d metrics disabled: %s\n", first_rank + r, ep.problem.c_str());
    }
  }
  std::fflush(stdout);
}

// What is wrong with a launch over several machines ("" when nothing): the
// ranks of all launchers must meet at one store with one secret, which a
// launcher cannot make up on its own.
std::string check_nodes(int nnodes, int node_rank, int nproc, const std::string& master_addr, int master_port,
                        bool token_set) {
  if (node_rank >= nnodes)
    return "--node-rank " + std::to_string(node_rank) + " is not below --nnodes " + std::to_string(nnodes);
  if (static_cast<long>(nnodes) * nproc > 65536)
    return "--nnodes " + std::to_string(nnodes) + " x -n " + std::to_string(nproc) + " is more than 65536 ranks";
  if (master_addr.empty()) return "--master-addr is empty";
  if (nnodes == 1) return "";
  if (master_port == 0) return "--nnodes " + std::to_string(nnodes) + " needs --master-port (the same on every machine)";
  if (!token_set)
    return std::string("--nnodes ") + std::to_string(nnodes) + " needs " + kEnvRdzvToken +
           " set to the same secret on every machine";
  return "";
}

// ---- main's steps: each returns what the next needs or throws ExitNow with
// the exit code (its reason already printed).

struct ExitNow {
  int code;
};

struct RunArgs {
  int nproc = 1;
  std::string worker;
  int master_port = 0;
  int nnodes = 1, node_rank = 0;
  std::string master_addr = "127.0.0.1";
  double grace_s = 10;
  bool from_env = false;
  std::vector<std::string> worker_args;  // everything after the options
};

RunArgs parse_args(int argc, char** argv) {
  CLI::App app{"weft-run: start N weft ranks on this machine"};
  RunArgs a;
  CLI::Option* nproc_opt =
      app.add_option("-n,--nproc", a.nproc, "number of ranks on this machine")->check(CLI::Range(1, 4096));
  CLI::Option* env_opt = app.add_flag("--from-env", a.from_env,
                                      "the gang from the launch environment: LOCAL_WORLD_SIZE ranks here, "
                                      "WORLD_SIZE in all, NODE_RANK, MASTER_ADDR, MASTER_PORT (as a pod sets them)");
  CLI::Option* gang_opts[] = {
      nproc_opt,
      app.add_option("--nnodes", a.nnodes, "number of machines (launchers) in the job")->check(CLI::Range(1, 4096)),
      app.add_option("--node-rank", a.node_rank, "this machine's index, 0 .. nnodes-1")->check(CLI::Range(0, 4095)),
      app.add_option("--master-addr", a.master_addr, "host of rank 0's rendezvous store (default 127.0.0.1)"),
      app.add_option("--master-port", a.master_port, "rendezvous port (default: a free port)")
          ->check(CLI::Range(1, 65535))};
  for (CLI::Option* o : gang_opts) env_opt->excludes(o);
  app.add_option("--worker", a.worker, "worker program (default: weft-worker next to weft-run)");
  // NaN passes every comparison (CLI::Range included) and inf or 1e300
  // overflow the deadline's arithmetic into the past: both killed at once.
  app.add_option("--grace", a.grace_s, "seconds between SIGTERM and SIGKILL when a rank fails (0 to 86400)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(text.c_str(), &end);
            if (end == text.c_str() || *end != '\0' || !std::isfinite(v) || v < 0 || v > 86400)
              return "--grace: '" + text + "' is not a number of seconds from 0 to 86400";
            return "";
          },
          "SECONDS"));
  app.prefix_command();  // everything after the options goes to the worker
  app.footer("Everything after the options (or after --) is passed to every rank.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; a usage error is bad input like any other (exit 1).
    throw ExitNow{app.exit(e) == 0 ? kExitDone : kExitBadConfig};
  }
  if (!a.from_env && nproc_opt->count() == 0) {
    std::fprintf(stderr, "weft-run: -n/--nproc or --from-env is required (run with --help for more information)\n");
    throw ExitNow{kExitBadConfig};
  }
  a.worker_args = app.remaining();
  if (!a.worker_args.empty() && a.worker_args.front() == "--") a.worker_args.erase(a.worker_args.begin());
  return a;
}

// The gang's attempt and rendezvous secret, when an operator started this
// launcher, read by the ranks' own rules (every rank gets the same); with
// --from-env also this launcher's share of the gang, which replaces the
// gang options in `a`.
LaunchEnv gang_from_environment(RunArgs& a) {
  try {
    EnvMap given;
    for (const char* name : {kEnvAttempt, kEnvRdzvToken, kEnvPlannedWorldSize})
      if (const char* v = getenv(name)) given[name] = v;
    if (a.from_env)
      for (const char* name : {kEnvWorldSize, kEnvLocalWorldSize, kEnvNodeRank, kEnvMasterAddr, kEnvMasterPort})
        if (const char* v = getenv(name)) given[name] = v;
    LaunchEnv gang = parse_launch_env(given);
    if (a.from_env) {
      if (given[kEnvLocalWorldSize].empty() || given[kEnvWorldSize].empty())
        throw LaunchEnvError(std::string("--from-env needs ") + kEnvWorldSize + " and " + kEnvLocalWorldSize + " set");
      if (gang.world % gang.local_world != 0)
        throw LaunchEnvError(std::string(kEnvWorldSize) + " " + std::to_string(gang.world) + " is not a multiple of " +
                             kEnvLocalWorldSize + " " + std::to_string(gang.local_world));
      a.nproc = gang.local_world;
      a.nnodes = gang.world / gang.local_world;
      a.node_rank = gang.node_rank;
      if (gang.world > 1) {
        a.master_addr = gang.master_addr;
        a.master_port = gang.master_port;
      }
    }
    return gang;
  } catch (const LaunchEnvError& e) {
    std::fprintf(stderr, "weft-run: bad launch environment: %s\n", e.what());
    throw ExitNow{kExitBadConfig};
  }
}

// The worker program: --worker, or weft-worker next to this launcher.
std::string worker_program(const std::string& given) {
  std::string worker = given;
  if (worker.empty()) {
    std::error_code ec;
    auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    worker = (self.parent_path() / "weft-worker").string();
  }
  if (access(worker.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "weft-run: worker program '%s' is not executable: %s (use --worker)\n", worker.c_str(),
                 std::strerror(errno));
    throw ExitNow{kExitBadConfig};
  }
  // A directory passes access(X_OK) (it is searchable) and then fails every
  // rank's exec with 127.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(worker, ec)) {
    std::fprintf(stderr, "weft-run: worker program '%s' is not a program file (a directory?) (use --worker)\n",
                 worker.c_str());
    throw ExitNow{kExitBadConfig};
  }
  return worker;
}

// Signals are read from a signalfd in the poll loop, never from handlers.
// Returns the signalfd; `old_mask` is what the ranks get back.
int block_signals(sigset_t* old_mask) {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, old_mask);
  int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  // Some kernels (and sandboxes) ignore SFD_NONBLOCK; the drain loop below
  // must never block, or a SIGCHLD would leave the launcher stuck.
  fcntl(sfd, F_SETFL, fcntl(sfd, F_GETFL) | O_NONBLOCK);
  return sfd;
}

// Forks and execs local rank r with the gang's environment, its share of the
// cores and its output on pipes.
Rank spawn_rank(int r, int first_rank, const LaunchEnv& gang, const std::string& worker,
                const std::vector<std::string>& worker_args, const std::string& threads, const sigset_t& old_mask,
                pid_t launcher, std::vector<Rank>& ranks) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    std::perror("weft-run: pipe");
    signal_all(ranks, SIGKILL);
    throw ExitNow{1};
  }
  pid_t pid = fork();
  if (pid == 0) {
    // A rank dies with its launcher (weft-run killed with SIGKILL cannot
    // stop its ranks). If the launcher died before prctl took effect, the
    // child has been re-parented already: exit instead of training alone.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) _exit(kExitPeerLost);
    setpgid(0, 0);  // terminal signals reach weft-run only; it forwards them
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    dup2(out[1], 1);
    dup2(err[1], 2);
    LaunchEnv mine = gang;
    mine.rank = first_rank + r;
    mine.local_rank = r;
    for (const auto& [name, value] : launch_env_vars(mine)) setenv(name.c_str(), value.c_str(), 1);
    setenv("OMP_NUM_THREADS", threads.c_str(), 0);
    setenv("OPENBLAS_NUM_THREADS", threads.c_str(), 0);
    std::vector<char*> a{const_cast<char*>(worker.c_str())};
    for (auto& s : worker_args) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execv(worker.c_str(), a.data());
    std::fprintf(stderr, "weft-run: cannot exec %s: %s\n", worker.c_str(), std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  close(out[1]);
  close(err[1]);
  return Rank{r, first_rank + r, pid, true, false, -1, out[0], err[0], {}, {}};
}

// The running gang, until every rank is gone: forwards their output line by
// line, forwards signals, and on the first failure stops the others (SIGKILL
// after --grace) and keeps the code of the rank that caused it.
class Supervisor {
 public:
  Supervisor(std::vector<Rank>& ranks, int sfd, double grace_s) : ranks_(ranks), sfd_(sfd), grace_s_(grace_s) {}

  int run() {
    while (live()) {
      if (!poll_once()) break;
      reap();
      if (Clock::now() >= kill_at_) {
        for (auto& r : ranks_) r.killed = r.running;
        signal_all(ranks_, SIGKILL);
        kill_at_ = Clock::time_point::max();
      }
      // A rank's own children may keep its pipes open after it exited: stop
      // reading once every rank is gone and a grace second has passed.
      bool any_running = false;
      for (auto& r : ranks_) any_running |= r.running;
      if (!any_running && all_exited_ == Clock::time_point::max()) all_exited_ = Clock::now();
      if (!any_running && Clock::now() - all_exited_ > std::chrono::seconds(1)) break;
    }
    return exit_code_;
  }

 private:
  bool live() const {
    for (auto& r : ranks_)
      if (r.running || r.out_fd >= 0 || r.err_fd >= 0) return true;
    return false;
  }

  // Waits up to a second (less before a pending SIGKILL) for output or a
  // signal, and handles what came; false when poll itself failed.
  bool poll_once() {
    std::vector<pollfd> fds{{sfd_, POLLIN, 0}};
    std::vector<std::pair<int, bool>> owner{{-1, false}};
    for (auto& r : ranks_) {
      if (r.out_fd >= 0) fds.push_back({r.out_fd, POLLIN, 0}), owner.push_back({r.index, false});
      if (r.err_fd >= 0) fds.push_back({r.err_fd, POLLIN, 0}), owner.push_back({r.index, true});
    }
    int timeout_ms = 1000;
    if (kill_at_ != Clock::time_point::max())
      timeout_ms = static_cast<int>(std::clamp<int64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(kill_at_ - Clock::now()).count(), 0, 1000));
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) return false;
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) forward_output(ranks_[owner[i].first], owner[i].second);
    if (fds[0].revents & POLLIN) forward_signals();
    return true;
  }

  void forward_output(Rank& r, bool is_err) {
    int& fd = is_err ? r.err_fd : r.out_fd;
    char buf[65536];
    ssize_t k = read(fd, buf, sizeof buf);
    std::string& partial = is_err ? r.err_partial : r.out_partial;
    if (k > 0) {
      partial.append(buf, static_cast<size_t>(k));
      emit_lines(is_err ? 2 : 1, r.rank, partial, false);
    } else if (k == 0 || errno != EINTR) {
      emit_lines(is_err ? 2 : 1, r.rank, partial, true);
      close(fd);
      fd = -1;
    }
  }

  // SIGINT / SIGTERM go to every rank; a second one kills them.
  void forward_signals() {
    signalfd_siginfo si;
    while (read(sfd_, &si, sizeof si) == sizeof si) {
      if (si.ssi_signo == SIGCHLD) continue;  // reaped below
      int sig = static_cast<int>(si.ssi_signo);
      if (++signals_seen_ == 1) {
        std::fprintf(stderr, "weft-run: got %s, forwarding to all ranks\n", strsignal(sig));
        signal_all(ranks_, sig);
      } else {
        std::fprintf(stderr, "weft-run: got %s again, killing all ranks\n", strsignal(sig));
        signal_all(ranks_, SIGKILL);
      }
      break;
    }
  }

  void reap() {
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
      for (auto& r : ranks_)
        if (r.pid == pid) exited(r, decode(status));
  }

  void exited(Rank& r, int code) {
    r.running = false;
    r.code = code;
    // A rank weft-run killed itself after --grace is a consequence, not the
    // cause: it hung (or ignored SIGTERM) after another rank failed. Its 137
    // is not reported as the gang's code.
    if (r.killed && r.code == 128 + SIGKILL) {
      std::fprintf(stderr,
                   "weft-run: rank %d did not stop within %g s of SIGTERM (hung?); weft-run killed it "
                   "(code 137 is weft-run's own SIGKILL)\n",
                   r.rank, grace_s_);
      return;
    }
    // A rank that lost a peer exits 3 as a consequence; if the rank that
    // caused it (crashed, killed, bad input) is reaped later, report that
    // one. Exits from our own SIGTERM (143) are never a root cause.
    if (r.code != kExitDone && failed_rank_ >= 0 && exit_code_ == kExitPeerLost && r.code != kExitPeerLost &&
        r.code != kExitPreempted) {
      failed_rank_ = r.rank;
      exit_code_ = r.code;
      std::fprintf(stderr, "weft-run: rank %d exited with code %d (the cause)\n", r.rank, r.code);
    }
    // A rank stopped by SIGINT (130) makes the others stop too, with 143
    // ("another rank was asked to stop"): the gang's code is the signal that
    // asked, whichever rank's exit is reaped first.
    if (r.code == kExitInterrupted && exit_code_ == kExitPreempted && signals_seen_ == 0) {
      failed_rank_ = r.rank;
      exit_code_ = r.code;
    }
    if (r.code != kExitDone && failed_rank_ < 0) {
      failed_rank_ = r.rank;
      exit_code_ = r.code;
      if (signals_seen_ == 0)
        std::fprintf(stderr, "weft-run: rank %d exited with code %d; stopping the other ranks\n", r.rank, r.code);
      signal_all(ranks_, SIGTERM);
      kill_at_ = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(grace_s_ * 1000));
    }
  }

  std::vector<Rank>& ranks_;
  const int sfd_;
  const double grace_s_;
  int failed_rank_ = -1, exit_code_ = 0, signals_seen_ = 0;
  Clock::time_point kill_at_ = Clock::time_point::max();
  Clock::time_point all_exited_ = Clock::time_point::max();
};

// The launcher: checks the gang, starts its ranks, supervises them.
int launch(RunArgs& a) {
  LaunchEnv gang = gang_from_environment(a);
  if (std::string err = check_nodes(a.nnodes, a.node_rank, a.nproc, a.master_addr, a.master_port, !gang.token.empty());
      !err.empty()) {
    std::fprintf(stderr, "weft-run: %s\n", err.c_str());
    return kExitBadConfig;
  }
  const int world = a.nnodes * a.nproc, first_rank = a.node_rank * a.nproc;
  const std::string worker = worker_program(a.worker);
  if (a.master_port == 0) a.master_port = free_port();
  print_metrics_endpoints(a.worker_args, a.nproc, first_rank);
  if (gang.token.empty()) gang.token = random_token();
  gang.world = world;
  gang.local_world = a.nproc;
  gang.node_rank = a.node_rank;
  gang.master_addr = a.master_addr;
  gang.master_port = static_cast<uint16_t>(a.master_port);
  const unsigned ncpu = std::max(1u, std::thread::hardware_concurrency());
  const std::string threads = std::to_string(std::max(1u, ncpu / static_cast<unsigned>(a.nproc)));

  sigset_t old_mask;
  const int sfd = block_signals(&old_mask);
  std::vector<Rank> ranks(a.nproc);
  const pid_t launcher = getpid();
  for (int r = 0; r < a.nproc; ++r)
    ranks[r] = spawn_rank(r, first_rank, gang, worker, a.worker_args, threads, old_mask, launcher, ranks);
  return Supervisor(ranks, sfd, a.grace_s).run();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    RunArgs args = parse_args(argc, argv);
    return launch(args);
  } catch (const ExitNow& e) {
    return e.code;
  }
}
