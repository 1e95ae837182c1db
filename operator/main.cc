// weft-operator: watches TrainingJobs and runs their gangs of worker pods.
// Owns the process-level pieces only: flags, logging, the metrics registry
// and its server, probes, leader election and signal handling.
#include <CLI/CLI.hpp>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <pthread.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <optional>
#include <thread>

#include "kube/kube_api.h"
#include "kube/kube_config.h"
#include "kube/leader_election.h"
#include "kube/probe_server.h"
#include "trainingjob/controller.h"
#include "trainingjob/operator_metrics.h"

namespace {
std::stop_source g_stop;

// SIGTERM/SIGINT are blocked in every thread and taken by one sigwait()
// thread, because request_stop() runs stop callbacks (mutexes, condition
// variables, cpprest cancellation) that are not async-signal-safe.
std::thread start_signal_thread() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // inherited by threads created later
  return std::thread([set] {
    int sig = 0;
    sigwait(&set, &sig);
    spdlog::info("received signal {}, stopping", sig);
    g_stop.request_stop();
  });
}

// A number flag within [lo, hi], refused by name otherwise. CLI::Range and
// CLI::PositiveNumber let NaN through (every comparison with it is false),
// and 1e300 seconds overflows the durations built from it.
CLI::Validator within(double lo, double hi) {
  const std::string range = fmt::format("[{} - {}]", lo, hi);
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size()) return "Value " + text + " is not a number";
        if (!std::isfinite(v) || v < lo || v > hi) return "Value " + text + " not in range " + range;
        return "";
      },
      "NUMBER in " + range);
}

// Every flag, with its default.
struct Flags {
  std::string kubeconfig, ns, lease_ns = "weft-system", lease_name = "weft-operator", identity, log_level = "info";
  std::string bind_address = "0.0.0.0", metrics_from;
  int scrape_concurrency = weft::tj::PollerOptions{}.rank_concurrency;
  int workers = 4, metrics_port = 8080, health_port = 8081, resync_s = 300, burst = 100, progress_s = 10;
  int pod_start_timeout_s = weft::tj::kDefaultPodStartTimeoutSeconds;
  double qps = 50, tuning_poll_s = 2, lease_s = 15, renew_s = 10, retry_s = 2;
  bool leader_elect = false, no_network_policy = false, kueue = false;
  weft::tj::PodPowers allow;
  nlohmann::json metrics_peers;  // --network-policy-metrics-from parsed; null: the metrics port is open to anyone
};

void add_controller_flags(CLI::App& app, Flags& f) {
  app.add_option("--kubeconfig", f.kubeconfig, "kubeconfig path (default: $KUBECONFIG, in-cluster, ~/.kube/config)");
  app.add_option("--namespace", f.ns, "only watch this namespace (default: all)");
  app.add_option("--workers", f.workers, "concurrent reconciles")->check(CLI::Range(1, 64));
  app.add_option("--resync-seconds", f.resync_s, "periodic full reconcile")->check(CLI::Range(0, 86400));
  app.add_option("--progress-seconds", f.progress_s,
                 "scrape rank 0's /metrics into status.progress this often per running job (0 = off)")
      ->check(CLI::Range(0, 3600));
  app.add_option("--tuning-poll-seconds", f.tuning_poll_s,
                 "seconds between the bucket-size tuner's scrapes of every rank while a trial runs (a trial "
                 "lasts at least two)")
      ->check(within(0.2, 600));
  app.add_option("--scrape-concurrency", f.scrape_concurrency,
                 "ranks of one job whose /metrics are scraped at once when every rank is read (the tuner, "
                 "straggler detection)")
      ->check(CLI::Range(1, 256));
  app.add_option("--pod-start-timeout-seconds", f.pod_start_timeout_s,
                 "how long a pod bound to its node may take to start its worker: then the gang restarts (counted "
                 "against maxRestarts), or the job fails when the kubelet names a cause a restart cannot cure (an "
                 "image not present or not pullable, a bad container config); 0 = no deadline")
      ->check(CLI::Range(0, 86400));
  app.add_option("--qps", f.qps, "client-side API request rate limit")->check(within(0.1, 10000));
  app.add_option("--burst", f.burst, "client-side API burst")->check(CLI::Range(1, 10000));
  app.add_flag("--allow-host-path", f.allow.host_path, "let spec.template.volumes mount hostPath volumes");
  app.add_flag("--allow-service-account", f.allow.service_account,
               "let spec.template set serviceAccountName and project service-account tokens into volumes");
  app.add_flag("--allow-host-network", f.allow.host_network,
               "let spec.template set hostNetwork: true (GPU clusters whose NCCL needs the node's interfaces)");
  app.add_flag("--no-network-policy", f.no_network_policy, "create no NetworkPolicy per job");
  app.add_flag("--kueue", f.kueue,
               "run a TrainingJob labelled kueue.x-k8s.io/queue-name only while Kueue admits its Workload "
               "(needs Kueue's CRDs)");
  app.add_option("--network-policy-metrics-from", f.metrics_from,
                 "JSON list of NetworkPolicyPeers admitted to the ranks' metrics port (default: anyone)");
}

void add_process_flags(CLI::App& app, Flags& f) {
  app.add_flag("--leader-elect", f.leader_elect, "elect one active replica with a Lease");
  app.add_option("--lease-namespace", f.lease_ns,
                 "namespace of the Lease (the operator's own; its Role grants Leases there)");
  app.add_option("--lease-name", f.lease_name, "name of the Lease");
  app.add_option("--identity", f.identity, "leader-election identity (default: $POD_NAME or hostname_pid)");
  app.add_option("--lease-duration", f.lease_s, "seconds a standby waits before taking an unrenewed lease")
      ->check(within(1, 3600));
  app.add_option("--renew-deadline", f.renew_s,
                 "seconds the leader keeps trying to renew before stepping down (below --lease-duration)")
      ->check(within(0.1, 3600));
  app.add_option("--retry-period", f.retry_s, "seconds between lease attempts (below --renew-deadline)")
      ->check(within(0.1, 3600));
  app.add_option("--bind-address", f.bind_address, "address for the metrics and probe ports");
  app.add_option("--metrics-port", f.metrics_port, "Prometheus /metrics port (0 = off)")->check(CLI::Range(0, 65535));
  app.add_option("--health-port", f.health_port, "/healthz and /readyz port (0 = off)")->check(CLI::Range(0, 65535));
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
}

// What the flags say together, and the defaults that depend on the process.
// False (logged): exit 2.
bool check_flags(Flags& f) {
  // client-go's rule: a standby takes an unrenewed lease only after the
  // leader has given up renewing it, and the leader tries more than once.
  if (f.renew_s >= f.lease_s) {
    spdlog::error("--renew-deadline {} must be below --lease-duration {}: a standby would take the lease while "
                  "its leader still believes it leads",
                  f.renew_s, f.lease_s);
    return false;
  }
  if (f.retry_s >= f.renew_s) {
    spdlog::error("--retry-period {} must be below --renew-deadline {}: the leader would step down before its "
                  "second renewal attempt",
                  f.retry_s, f.renew_s);
    return false;
  }
  if (!f.metrics_from.empty()) {
    f.metrics_peers = nlohmann::json::parse(f.metrics_from, nullptr, false);
    bool ok = f.metrics_peers.is_array();
    for (const auto& peer : ok ? f.metrics_peers : nlohmann::json::array()) ok = ok && peer.is_object();
    if (!ok) {
      spdlog::error("--network-policy-metrics-from must be a JSON list of NetworkPolicyPeer objects, got: {}",
                    f.metrics_from);
      return false;
    }
  }
  if (f.identity.empty()) {
    const char* pod = std::getenv("POD_NAME");
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    f.identity = pod && *pod ? pod : std::string(host) + "_" + std::to_string(getpid());
  }
  return true;
}

void warn_pod_powers(const weft::tj::PodPowers& allow) {
  if (allow.host_path) spdlog::warn("--allow-host-path: TrainingJobs may mount the nodes' files into their pods");
  if (allow.host_network)
    spdlog::warn("--allow-host-network: TrainingJobs may run their pods in the nodes' network namespace");
  if (allow.service_account)
    spdlog::warn("--allow-service-account: TrainingJobs may run their pods as any ServiceAccount of their namespace");
}

weft::tj::ControllerOptions controller_options(const Flags& f) {
  return {.ns = f.ns,
          .workers = f.workers,
          .resync = std::chrono::seconds(f.resync_s),
          .progress = std::chrono::seconds(f.progress_s),
          .tuning_poll = std::chrono::milliseconds(std::lround(f.tuning_poll_s * 1000)),
          .scrape_concurrency = f.scrape_concurrency,
          .allow = f.allow,
          .network_policy = !f.no_network_policy,
          .kueue = f.kueue,
          .metrics_from = f.metrics_peers,
          .scrape = {},  // HTTP
          .pod_start_timeout = std::chrono::seconds(f.pod_start_timeout_s)};
}

// Runs the controller's workers until a stop, or while this replica holds
// the Lease. The exit code: 1 when the lease was lost without a stop, so the
// Deployment restarts this replica as a fresh candidate.
int lead(const Flags& f, weft::kube::KubeApi& api, weft::tj::Controller& controller,
         weft::tj::OperatorMetrics& metrics) {
  if (!f.leader_elect) {
    metrics.set_leader(true);
    controller.start_workers();
    while (!g_stop.stop_requested()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return 0;
  }
  auto ms = [](double s) { return std::chrono::milliseconds(static_cast<long>(s * 1000)); };
  weft::kube::LeaderElector elector(
      api, {f.lease_ns, f.lease_name, f.identity, ms(f.lease_s), ms(f.renew_s), ms(f.retry_s)});
  elector.run(
      g_stop.get_token(),
      [&] {
        metrics.set_leader(true);
        controller.start_workers();
      },
      [&] {
        metrics.set_leader(false);
        controller.stop();  // no reconcile may run once another replica can lead
      });
  return g_stop.stop_requested() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"weft-operator: runs TrainingJobs (weft.dev/v1alpha1) as gangs of worker pods"};
  Flags f;
  add_controller_flags(app, f);
  add_process_flags(app, f);
  // A bad flag exits 2, like a bad kubeconfig (docs/operator/running.md),
  // not with CLI11's own codes (105 and up).
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!check_flags(f)) return 2;
  spdlog::set_level(spdlog::level::from_str(f.log_level));

  std::thread signals = start_signal_thread();  // before any other thread exists
  signals.detach();
  std::optional<weft::kube::ClusterConfig> cluster;
  try {
    cluster = weft::kube::load_default_config(f.kubeconfig);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 2;
  }
  spdlog::info("weft-operator {} connecting to {} (namespace: {})", f.identity, cluster->server,
               f.ns.empty() ? "all" : f.ns);
  weft::kube::KubeApi api(*cluster, weft::kube::ApiOptions{f.qps, f.burst});

  auto registry = std::make_shared<prometheus::Registry>();
  weft::tj::OperatorMetrics metrics(*registry);
  std::unique_ptr<weft::MetricsServer> metrics_server;
  if (f.metrics_port > 0)
    metrics_server = weft::tj::serve_operator_metrics(f.bind_address, f.metrics_port, registry);
  warn_pod_powers(f.allow);
  weft::tj::Controller controller(api, controller_options(f), &metrics);
  std::optional<weft::kube::ProbeServer> probes;
  if (f.health_port > 0) {
    probes.emplace(
        f.bind_address, f.health_port, [] { return std::string(); },
        [&] { return controller.synced() ? std::string() : std::string("informer caches not synced"); });
  }
  controller.start_informers();
  const int rc = lead(f, api, controller, metrics);
  controller.stop();
  spdlog::info("weft-operator {} stopped", f.identity);
  return rc;
}
