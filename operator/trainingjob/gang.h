// What the reconciler observed about the pods of one attempt, reduced to the
// facts the policies decide on. Built from pods by observe_gang() (pure), and
// by small builders in tests.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace weft::tj {

struct RankState {
  int rank = 0;
  std::string pod;                  // metadata.name ("" in tests that build states by hand)
  std::string phase = "Pending";    // pod phase: Pending, Running, Succeeded, Failed, Unknown
  bool ready = false;               // PodReady condition
  bool terminating = false;         // deletionTimestamp set
  std::optional<int> exit_code;     // worker container's terminated exit code
  std::string reason;               // pod status reason (e.g. Evicted)
  std::string message;              // terminated container's message (the log tail on error)
  std::string container_reason;     // worker container's terminated reason (e.g. OOMKilled)
  std::string disruption;           // reason of a True DisruptionTarget condition (Kubernetes >= 1.26)
  bool scheduled = false;           // bound to a node (PodScheduled True, a nodeName, or past Pending)
  std::string unschedulable;        // the scheduler's message of a PodScheduled False condition
  // The worker container before it runs (state.waiting): the kubelet's
  // reason (ContainerCreating, ErrImageNeverPull, ImagePullBackOff,
  // CreateContainerConfigError, ...) and its words.
  std::string waiting_reason;
  std::string waiting_message;
  bool container_reported = false;  // the kubelet listed the worker container in containerStatuses
  // lastState.terminated: the container's run before the current state (the
  // kubelet restarts no container of these pods, restartPolicy Never, but a
  // failed pod may show its exit there while the container waits).
  std::optional<int> last_exit_code;
  std::string last_reason;
  std::string scheduled_at;         // PodScheduled True's lastTransitionTime (RFC 3339), "" unknown
  std::string created_at;           // metadata.creationTimestamp
  std::string memory_limit;         // the worker container's resources.limits.memory, "" none
};

struct GangObservation {
  int replicas = 0;                 // spec.replicas
  int attempt = 0;                  // status.attempt
  bool launched = false;            // every pod of this attempt was created once
  std::vector<RankState> ranks;     // pods of this attempt that exist, any order
  std::vector<int> missing_ranks;   // launched but gone (confirmed by a live read)
  // Pods of this attempt being deleted (deletionTimestamp set): their ranks
  // are missing, and a DisruptionTarget condition on them tells why (an
  // API eviction marks the pod before it deletes it).
  std::vector<RankState> leaving;

  const RankState* rank(int r) const {
    for (const auto& s : ranks)
      if (s.rank == r) return &s;
    return nullptr;
  }
};

// Where the scheduler has the live pods of an attempt: placed (bound to a
// node), waiting (not yet), and of those held back with the scheduler's
// reason (PodScheduled False), the first by order of observation.
struct Placement {
  int placed = 0, waiting = 0, held = 0;
  int first_held_rank = -1;
  std::string first_held_reason;
};
Placement placement_of(const GangObservation& gang);

// Reads the pod's phase, conditions and the worker container's state:
// terminated (exit code, reason such as OOMKilled, message), waiting (reason,
// message) and lastState.terminated; a pod that failed with its container
// waiting takes its exit code and reason from lastState.
RankState observe_pod(const nlohmann::json& pod, const std::string& container);

// The line of a termination message that says why a worker stopped: its last
// non-empty line (the worker logs its fatal error last), at most `max_chars`.
std::string last_message_line(const std::string& message, size_t max_chars = 400);

}  // namespace weft::tj
