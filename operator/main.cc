// weft-operator: watches TrainingJobs and runs their gangs of worker pods.
// Owns the process-level pieces only: flags, logging, the metrics registry
// and exposer, probes, leader election and signal handling.
#include <CLI/CLI.hpp>
#include <prometheus/exposer.h>
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"weft-operator: runs TrainingJobs (weft.dev/v1alpha1) as gangs of worker pods"};
  std::string kubeconfig, ns, lease_ns = "weft-system", lease_name = "weft-operator", identity, log_level = "info";
  std::string bind_address = "0.0.0.0", metrics_from;
  int scrape_concurrency = weft::tj::PollerOptions{}.rank_concurrency;
  int workers = 4, metrics_port = 8080, health_port = 8081, resync_s = 300, burst = 100, progress_s = 10;
  double qps = 50, tuning_poll_s = 2, lease_s = 15, renew_s = 10, retry_s = 2;
  bool leader_elect = false, no_network_policy = false;
  weft::tj::PodPowers allow;
  app.add_option("--kubeconfig", kubeconfig, "kubeconfig path (default: $KUBECONFIG, in-cluster, ~/.kube/config)");
  app.add_option("--namespace", ns, "only watch this namespace (default: all)");
  app.add_option("--workers", workers, "concurrent reconciles")->check(CLI::Range(1, 64));
  app.add_option("--resync-seconds", resync_s, "periodic full reconcile")->check(CLI::Range(0, 86400));
  app.add_option("--progress-seconds", progress_s,
                 "scrape rank 0's /metrics into status.progress this often per running job (0 = off)")
      ->check(CLI::Range(0, 3600));
  app.add_option("--tuning-poll-seconds", tuning_poll_s,
                 "seconds between the bucket-size tuner's scrapes of every rank while a trial runs (a trial "
                 "lasts at least two)")
      ->check(within(0.2, 600));
  app.add_option("--scrape-concurrency", scrape_concurrency,
                 "ranks of one job whose /metrics are scraped at once when every rank is read (the tuner, "
                 "straggler detection)")
      ->check(CLI::Range(1, 256));
  app.add_option("--qps", qps, "client-side API request rate limit")->check(within(0.1, 10000));
  app.add_option("--burst", burst, "client-side API burst")->check(CLI::Range(1, 10000));
  app.add_flag("--leader-elect", leader_elect, "elect one active replica with a Lease");
  app.add_option("--lease-namespace", lease_ns, "namespace of the Lease (the operator's own; its Role grants Leases there)");
  app.add_option("--lease-name", lease_name, "name of the Lease");
  app.add_option("--identity", identity, "leader-election identity (default: $POD_NAME or hostname_pid)");
  app.add_option("--lease-duration", lease_s, "seconds a standby waits before taking an unrenewed lease")
      ->check(within(1, 3600));
  app.add_option("--renew-deadline", renew_s,
                 "seconds the leader keeps trying to renew before stepping down (below --lease-duration)")
      ->check(within(0.1, 3600));
  app.add_option("--retry-period", retry_s, "seconds between lease attempts (below --renew-deadline)")
      ->check(within(0.1, 3600));
  app.add_flag("--allow-host-path", allow.host_path, "let spec.template.volumes mount hostPath volumes");
  app.add_flag("--allow-service-account", allow.service_account,
               "let spec.template set serviceAccountName and project service-account tokens into volumes");
  app.add_flag("--allow-host-network", allow.host_network,
               "let spec.template set hostNetwork: true (GPU clusters whose NCCL needs the node's interfaces)");
  app.add_flag("--no-network-policy", no_network_policy, "create no NetworkPolicy per job");
  app.add_option("--network-policy-metrics-from", metrics_from,
                 "JSON list of NetworkPolicyPeers admitted to the ranks' metrics port (default: anyone)");
  app.add_option("--bind-address", bind_address, "address for the metrics and probe ports");
  app.add_option("--metrics-port", metrics_port, "Prometheus /metrics port (0 = off)")->check(CLI::Range(0, 65535));
  app.add_option("--health-port", health_port, "/healthz and /readyz port (0 = off)")->check(CLI::Range(0, 65535));
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  // A bad flag exits 2, like a bad kubeconfig (docs/operator/running.md),
  // not with CLI11's own codes (105 and up).
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  // client-go's rule: a standby takes an unrenewed lease only after the
  // leader has given up renewing it, and the leader tries more than once.
  if (renew_s >= lease_s) {
    spdlog::error("--renew-deadline {} must be below --lease-duration {}: a standby would take the lease while "
                  "its leader still believes it leads",
                  renew_s, lease_s);
    return 2;
  }
  if (retry_s >= renew_s) {
    spdlog::error("--retry-period {} must be below --renew-deadline {}: the leader would step down before its "
                  "second renewal attempt",
                  retry_s, renew_s);
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(log_level));
  nlohmann::json metrics_peers;  // null: the metrics port is open to anyone
  if (!metrics_from.empty()) {
    metrics_peers = nlohmann::json::parse(metrics_from, nullptr, false);
    bool ok = metrics_peers.is_array();
    for (const auto& peer : ok ? metrics_peers : nlohmann::json::array()) ok = ok && peer.is_object();
    if (!ok) {
      spdlog::error("--network-policy-metrics-from must be a JSON list of NetworkPolicyPeer objects, got: {}",
                    metrics_from);
      return 2;
    }
  }
  if (identity.empty()) {
    const char* pod = std::getenv("POD_NAME");
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    identity = pod && *pod ? pod : std::string(host) + "_" + std::to_string(getpid());
  }

  std::thread signals = start_signal_thread();  // before any other thread exists
  signals.detach();
  std::optional<weft::kube::ClusterConfig> cluster;
  try {
    cluster = weft::kube::load_default_config(kubeconfig);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 2;
  }
  spdlog::info("weft-operator {} connecting to {} (namespace: {})", identity, cluster->server, ns.empty() ? "all" : ns);
  weft::kube::ApiOptions api_opts;
  api_opts.qps = qps;
  api_opts.burst = burst;
  weft::kube::KubeApi api(*cluster, api_opts);

  auto registry = std::make_shared<prometheus::Registry>();
  weft::tj::OperatorMetrics metrics(*registry);
  std::unique_ptr<prometheus::Exposer> exposer;
  if (metrics_port > 0) exposer = weft::tj::serve_operator_metrics(bind_address, metrics_port, registry);

  if (allow.host_path) spdlog::warn("--allow-host-path: TrainingJobs may mount the nodes' files into their pods");
  if (allow.host_network)
    spdlog::warn("--allow-host-network: TrainingJobs may run their pods in the nodes' network namespace");
  if (allow.service_account)
    spdlog::warn("--allow-service-account: TrainingJobs may run their pods as any ServiceAccount of their namespace");
  weft::tj::Controller controller(api,
                                  {.ns = ns,
                                   .workers = workers,
                                   .resync = std::chrono::seconds(resync_s),
                                   .progress = std::chrono::seconds(progress_s),
                                   .tuning_poll = std::chrono::milliseconds(std::lround(tuning_poll_s * 1000)),
                                   .scrape_concurrency = scrape_concurrency,
                                   .allow = allow,
                                   .network_policy = !no_network_policy,
                                   .metrics_from = metrics_peers},
                                  &metrics);
  std::atomic<bool> leading{!leader_elect};
  std::optional<weft::kube::ProbeServer> probes;
  if (health_port > 0) {
    probes.emplace(
        bind_address, health_port, [] { return std::string(); },
        [&] { return controller.synced() ? std::string() : std::string("informer caches not synced"); });
  }

  controller.start_informers();
  int rc = 0;
  if (leader_elect) {
    weft::kube::LeaderElector elector(
        api, {lease_ns, lease_name, identity, std::chrono::milliseconds(static_cast<long>(lease_s * 1000)),
              std::chrono::milliseconds(static_cast<long>(renew_s * 1000)),
              std::chrono::milliseconds(static_cast<long>(retry_s * 1000))});
    elector.run(
        g_stop.get_token(),
        [&] {
          leading = true;
          metrics.set_leader(true);
          controller.start_workers();
        },
        [&] {
          leading = false;
          metrics.set_leader(false);
          controller.stop();  // no reconcile may run once another replica can lead
        });
    // Lost the lease without being asked to stop: exit non-zero so the
    // Deployment restarts us as a fresh candidate.
    if (!g_stop.stop_requested()) rc = 1;
  } else {
    metrics.set_leader(true);
    controller.start_workers();
    while (!g_stop.stop_requested()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  controller.stop();
  spdlog::info("weft-operator {} stopped", identity);
  return rc;
}
