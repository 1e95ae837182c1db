// NodeAgent: the kubelet of a local cluster. It registers Nodes, keeps their
// Leases renewed, and runs every pod the scheduler binds to one of them as
// local processes (see pod_process.h), reporting status like a kubelet.
//
// Loop: informers (pods, services, ConfigMaps, Secrets; all namespaces) only
// wake the sync loop; each sync pass reads the caches and converges every pod
// of our nodes: start what is bound and not started, notice exits, restart
// per restartPolicy, stop what is being deleted (SIGTERM to the container's
// process group, SIGKILL after the grace period, then the final delete with
// grace 0), refresh hosts files and ConfigMap/Secret volumes, and write a
// pod's status only when it changed.
//
// State on disk, per pod: STATE/pods/<uid>/ holds record.json (who, IP,
// restart count), runs/<n>/{launch,pid,exit}.json, logs/<container>/<n>.log,
// volumes/<name>/, hosts and work/ (the default working directory). At start
// the agent adopts the pods recorded there that still exist, bound to its
// nodes, and kills and removes the rest.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <stop_token>
#include <string>
#include <vector>

#include "kube/informer.h"
#include "kube/kube_api.h"
#include "node/ip_pool.h"
#include "node/pod_plan.h"
#include "node/pod_status.h"
#include "node/sim_ranks.h"

namespace weft::node {

// A pod whose "namespace/name" matches `pattern` is admitted `delay` after the
// agent first sees it bound: until then it stays Pending without an IP, as a
// pod the scheduler placed late would. A fault-injection hook for tests (for
// example rank 0 starting after every other rank).
struct StartDelay {
  std::string pattern;
  std::chrono::seconds delay{0};
};

struct AgentOptions {
  std::vector<std::string> nodes = {"weft-node-0"};  // Node names this agent serves
  std::string state_dir;                  // pods' directories and records
  std::vector<std::string> bin_dirs;      // searched first for a command without '/'
  std::string self_exe;                   // this binary, re-executed as the shim
  NodeCapacity capacity;
  std::string internal_ip = "127.0.0.1";
  Json taints = Json::array();            // spec.taints of every Node (tests keep the scheduler away)
  int ip_second_octet = 1;                // pod IPs 127.<octet>.x.y
  std::string cluster_domain = "cluster.local";
  int lease_duration_seconds = 40;
  std::chrono::seconds lease_renew{10};
  std::chrono::seconds node_status_every{60};
  std::chrono::milliseconds sync_period{200};
  std::vector<StartDelay> start_delays;
  // Simulation (`--simulate-pods`, as kwok does): bound pods start no
  // process; they are Running at once with their pod IP, and one thread of
  // the agent serves their ranks' canned /metrics and /ready on that IP
  // (sim_ranks.h). Deleting such a pod ends it like a worker's SIGTERM (exit
  // 143); the annotation kSimulateExitAnnotation on a pod ends its container
  // with that exit code (a rank that failed). No pod state is kept on disk.
  bool simulate_pods = false;
  double simulated_step_seconds = 0.5;  // a simulated rank's step advances this often
  int simulated_sync_threads = 16;       // simulated pods synced at once (status writes, final deletes)
};

// `kubectl annotate pod P weft-node.local/simulate-exit-code=3`: a simulated
// pod's container exits with that code.
inline constexpr const char* kSimulateExitAnnotation = "weft-node.local/simulate-exit-code";

class NodeAgent {
 public:
  NodeAgent(kube::KubeApi& api, AgentOptions opts);
  ~NodeAgent();
  // Registers the nodes, then runs until stop; pods keep running afterwards
  // (a restarted agent adopts them).
  void run(std::stop_token stop);
  bool ready() const { return ready_.load(); }

 private:
  struct Entry;
  // What one sync pass spent its time on, for the log when it was slow.
  struct SyncReport {
    int pods = 0;
    std::string slowest;        // namespace/name of the pod that took longest
    double slowest_s = 0;
    std::string slowest_doing;  // its longest step: "writing its status 2.9 s"
  };
  void register_nodes();
  void heartbeat(bool full_status);
  void adopt_from_disk();
  SyncReport sync_once();
  // Runs f, and keeps it as the current pod's longest step when it is.
  template <typename F>
  auto timed(const char* what, F&& f);
  // Converges one pod; true when its entry is done with (finalized) and is to be erased.
  bool sync_pod(const Json& pod, Entry& e);
  void refresh_process(Entry& e);
  bool start_run(const Json& pod, Entry& e, std::string* reason, std::string* message);
  void stop_process(Entry& e, int grace_seconds);
  bool finalize(const Json* pod, Entry& e);
  void cleanup(Entry& e);
  void refresh_files(Entry& e, const Json& pod, bool hosts, bool volumes);
  void write_status(const Json& pod, Entry& e);
  bool start_simulated(const Json& pod, Entry& e, std::string* reason, std::string* message);
  void end_simulated(Entry& e, int exit_code, const std::string& reason, const std::string& message);
  void save_record(const Entry& e) const;
  void wake();

  kube::KubeApi& api_;
  AgentOptions opts_;
  std::set<std::string> my_nodes_;
  kube::Informer pods_, services_, configmaps_, secrets_;
  std::map<std::string, std::unique_ptr<Entry>> entries_;   // by pod uid
  std::map<std::string, std::chrono::steady_clock::time_point> finalized_;  // uid -> when (tombstones)
  std::map<std::string, std::chrono::steady_clock::time_point> delayed_;    // uid -> admit at (StartDelay)
  std::vector<std::pair<std::regex, std::chrono::seconds>> start_delays_;
  bool admission_delayed(const std::string& uid, const std::string& ns_name);
  IpPool ips_;
  std::unique_ptr<SimulatedRanks> sim_;  // --simulate-pods
  // Simulated pods are synced by several threads at once, as a cluster's
  // kubelets work side by side: this guards what they share (finalized_, ips_).
  std::mutex shared_mu_;
  std::map<std::string, std::string> ready_since_;  // node -> RFC 3339
  std::map<std::string, std::string> node_uids_;

  std::mutex mu_;
  std::condition_variable_any cv_;
  bool woken_ = false;
  std::atomic<long> cluster_generation_{0};  // bumped on pod/service changes (hosts files)
  std::atomic<long> object_generation_{0};   // bumped on ConfigMap/Secret changes (volumes, env)
  long hosts_generation_seen_ = -1, volume_generation_seen_ = -1;
  std::atomic<bool> ready_{false};
};

}  // namespace weft::node
