// What weft-node reports about a pod and a node: pure builders from the
// agent's view of its processes to the JSON the status subresources take.
//
// Pod phase follows the kubelet: Pending until the container first starts;
// Running while it runs or waits to be restarted; with restartPolicy Never a
// terminated container makes the pod Succeeded (exit 0) or Failed; with
// OnFailure exit 0 makes it Succeeded; Always never ends.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace weft::node {

using Json = nlohmann::json;

struct ContainerState {
  enum class Kind { Waiting, Running, Terminated };
  Kind kind = Kind::Waiting;
  std::string reason;       // waiting: ContainerCreating, CreateContainerConfigError; terminated: Completed, Error
  std::string message;      // waiting: why; terminated: termination message (log tail on error when asked)
  std::string started_at;   // RFC 3339 (running, terminated)
  std::string finished_at;  // RFC 3339 (terminated)
  int exit_code = 0;
  int signal = 0;           // terminating signal, 0 = exited
  std::string container_id;
};

struct PodView {
  std::string pod_ip, host_ip;
  std::string start_time;        // when the agent accepted the pod (RFC 3339)
  std::string container;         // the container's name
  std::string image;
  ContainerState state;
  std::optional<ContainerState> last_state;  // the previous run, after a restart
  int restart_count = 0;
  // The readiness probe's last verdict; nullopt when the container has none
  // (then a running container is ready, as with a kubelet).
  std::optional<bool> probe_ready;
};

// A container's readiness probe, when it is an HTTP GET weft-node can run:
// the port resolved (a number, or the name of one of the container's ports).
struct ReadinessProbe {
  std::string path = "/";
  int port = 0;
  int period_s = 10, timeout_s = 1;
};
std::optional<ReadinessProbe> readiness_probe(const Json& container);

// Pod phase from the container state and restart policy (see file comment).
std::string pod_phase(const PodView& v, const std::string& restart_policy);

// The `status` object to write (Ready: running and, with a probe, its last
// verdict passed); conditions keep their lastTransitionTime
// while their status does not change (read from `current`, the pod's status
// as last seen). `now` is RFC 3339.
Json build_pod_status(const Json& pod, const PodView& v, const std::string& now);

// Exit code as a shell reports it: 128 + signal when killed.
int exit_code_of(int wait_status);

struct NodeCapacity {
  std::string cpu = "32";
  std::string memory = "128Gi";
  std::string pods = "110";
  std::string ephemeral_storage = "100Gi";
  // status.nodeInfo.kubeletVersion: the control plane's release
  // (localcluster/kube/VERSION; cluster.sh passes --kubelet-version).
  std::string kubelet_version = "v1.37.2";
};

// A whole Node object for create (status included), Ready, with
// InternalIP/Hostname addresses.
Json build_node(const std::string& name, const std::string& internal_ip, const NodeCapacity& cap,
                const std::string& now);
// The node status patch written on every heartbeat (Ready condition).
Json node_status_patch(const std::string& name, const std::string& internal_ip, const NodeCapacity& cap,
                       const std::string& now, const std::string& ready_since);
// The node's Lease in kube-node-lease (owner: the Node).
Json build_node_lease(const std::string& node, const std::string& node_uid, int duration_seconds,
                      const std::string& now_micro);

}  // namespace weft::node
