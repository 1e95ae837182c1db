// weft-node: the node agent of a local cluster (see node/agent.h).
//   weft-node [--kubeconfig PATH] [--nodes 1] [--node-prefix weft-node] --state-dir DIR ...
//   weft-node shim LAUNCH.json      (internal: one container run, started by the agent)
//   weft-node cleanup --state-dir DIR  (kill every process recorded under DIR, remove it)
#include <CLI/CLI.hpp>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <regex>
#include <thread>

#include "kube/kube_config.h"
#include "node/agent.h"
#include "node/pod_process.h"

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

// Kills every container process group and shim recorded under the state dir.
int cleanup(const std::string& state_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int killed = 0;
  for (const auto& d : fs::directory_iterator(state_dir + "/pods", ec)) {
    auto rec = weft::node::read_json(d.path().string() + "/record.json");
    if (!rec) continue;
    const int run = rec->value("run", -1);
    if (run >= 0) {
      auto pid = weft::node::read_json(d.path().string() + "/runs/" + std::to_string(run) + "/pid.json");
      if (pid && pid->value("pid", -1) > 0 && weft::node::process_alive(pid->value("pid", -1)))
        killed += ::kill(-pid->value("pid", -1), SIGKILL) == 0;
      const pid_t shim = rec->value("shimPid", -1);
      if (weft::node::process_alive(shim, rec->value("shimTicks", 0ull))) ::kill(shim, SIGKILL);
    }
  }
  fs::remove_all(state_dir, ec);
  std::printf("weft-node cleanup: killed %d container process groups, removed %s\n", killed, state_dir.c_str());
  return 0;
}

// The flags, with their defaults; AgentOptions is filled from them.
struct Flags {
  std::string kubeconfig, state_dir, prefix = "weft-node", bin_dir, log_level = "info";
  int nodes = 1, octet = 1, burst = 200;
  double qps = 100;
  std::vector<std::string> taints, delays;
  weft::node::AgentOptions opts;
};

void add_flags(CLI::App& app, Flags& f) {
  app.add_option("--kubeconfig", f.kubeconfig, "kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)");
  app.add_option("--state-dir", f.state_dir, "pod directories, records and logs")->required();
  app.add_option("--nodes", f.nodes, "number of Nodes to register (<prefix>-0 ...)")->check(CLI::Range(1, 256));
  app.add_option("--node-prefix", f.prefix, "Node name prefix");
  app.add_option("--bin-dir", f.bin_dir,
                 "where commands without '/' are looked up first (default: $WEFT_NODE_BIN_DIR, "
                 "else this binary's directory)");
  app.add_option("--cpu", f.opts.capacity.cpu, "cpu capacity per Node");
  app.add_option("--memory", f.opts.capacity.memory, "memory capacity per Node");
  app.add_option("--pods", f.opts.capacity.pods, "pod capacity per Node");
  app.add_option("--kubelet-version", f.opts.capacity.kubelet_version,
                 "the kubeletVersion the Nodes report (the control plane's release)");
  app.add_option("--pod-ip-octet", f.octet, "pod IPs are 127.<octet>.x.y")->check(CLI::Range(1, 254));
  app.add_option("--qps", f.qps, "client-side API rate limit");
  app.add_option("--burst", f.burst, "client-side API burst");
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error");
  app.add_option("--taint", f.taints, "KEY=VALUE:EFFECT taint on every Node (repeatable)");
  app.add_option("--start-delay", f.delays,
                 "REGEX=SECONDS: admit pods whose namespace/name matches that late, as if scheduled late "
                 "(a test hook; repeatable)");
  app.add_flag("--simulate-pods", f.opts.simulate_pods,
               "start no processes: bound pods are Running at once and one thread serves their ranks' canned "
               "/metrics and /ready on their pod IPs (as kwok does; for scale tests)");
  app.add_option("--simulated-step-seconds", f.opts.simulated_step_seconds,
                 "a simulated rank's step advances this often")
      ->check(CLI::Range(0.01, 3600.0));
}

// --taint and --start-delay into the agent's options; false (logged) on a bad one.
bool parse_taints_and_delays(Flags& f) {
  for (const auto& t : f.taints) {
    const auto eq = t.find('='), colon = t.rfind(':');
    if (eq == std::string::npos || colon == std::string::npos || colon < eq) {
      spdlog::error("--taint {}: expected KEY=VALUE:EFFECT", t);
      return false;
    }
    f.opts.taints.push_back({{"key", t.substr(0, eq)}, {"value", t.substr(eq + 1, colon - eq - 1)},
                             {"effect", t.substr(colon + 1)}});
  }
  for (const auto& d : f.delays) {
    const auto eq = d.rfind('=');
    char* end = nullptr;
    const long secs = eq == std::string::npos ? -1 : std::strtol(d.c_str() + eq + 1, &end, 10);
    if (eq == std::string::npos || eq == 0 || secs < 0 || !end || *end != '\0' || end == d.c_str() + eq + 1) {
      spdlog::error("--start-delay {}: expected REGEX=SECONDS", d);
      return false;
    }
    try {
      std::regex(d.substr(0, eq));
    } catch (const std::regex_error& e) {
      spdlog::error("--start-delay {}: bad regex: {}", d, e.what());
      return false;
    }
    f.opts.start_delays.push_back({d.substr(0, eq), std::chrono::seconds(secs)});
  }
  return true;
}

// The agent's options from the flags and the process; false (logged) on bad input.
bool agent_options(Flags& f) {
  weft::node::AgentOptions& opts = f.opts;
  opts.self_exe = self_exe();
  if (opts.simulate_pods) {
    // One listening socket per simulated rank: a thousand pods need more
    // descriptors than a default soft limit of 1024.
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
      lim.rlim_cur = lim.rlim_max;
      ::setrlimit(RLIMIT_NOFILE, &lim);
    }
  }
  if (f.bin_dir.empty()) {
    const char* env = std::getenv("WEFT_NODE_BIN_DIR");
    f.bin_dir = env && *env ? env : std::filesystem::path(opts.self_exe).parent_path().string();
  }
  opts.bin_dirs = {std::filesystem::absolute(f.bin_dir).string()};
  opts.state_dir = std::filesystem::absolute(f.state_dir).string();
  opts.ip_second_octet = f.octet;
  opts.nodes.clear();
  for (int i = 0; i < f.nodes; ++i) opts.nodes.push_back(f.prefix + "-" + std::to_string(i));
  return parse_taints_and_delays(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "shim") return weft::node::run_shim(argv[2]);

  CLI::App app{"weft-node: runs the pods bound to its Nodes as local processes (a kubelet for local clusters)"};
  Flags f;
  add_flags(app, f);
  auto* cleanup_cmd = app.add_subcommand("cleanup", "kill every process recorded under --state-dir and remove it");
  cleanup_cmd->fallthrough();  // `weft-node cleanup --state-dir DIR`
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(f.log_level));
  spdlog::set_pattern("[%H:%M:%S.%e] [weft-node] [%^%l%$] %v");
  if (cleanup_cmd->parsed()) return cleanup(f.state_dir);
  if (!agent_options(f)) return 1;

  weft::kube::ClusterConfig cfg;
  try {
    cfg = weft::kube::load_default_config(f.kubeconfig);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
  weft::kube::ApiOptions api_opts;
  api_opts.qps = f.qps;
  api_opts.burst = f.burst;
  api_opts.user_agent = "weft-node/0.1";
  weft::kube::KubeApi api(cfg, api_opts);
  weft::node::NodeAgent agent(api, f.opts);

  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  std::jthread runner([&](std::stop_token st) { agent.run(st); });
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  spdlog::info("stopping; pods keep running (a restarted agent adopts them; `weft-node cleanup` removes them)");
  runner.request_stop();
  return 0;
}
