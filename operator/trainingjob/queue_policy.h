// Queue policy (pure): a queued TrainingJob as a Kueue workload.
//
// A job labelled kueue.x-k8s.io/queue-name, on an operator run with --kueue,
// is one of Kueue's "external framework" jobs: the operator owns a Workload
// (kueue.x-k8s.io/v1beta2) that describes the gang to Kueue (one pod set,
// `count` pods with the pod's requests) and starts the pods only while
// Kueue's admission stands. This is the contract Kueue's own integrations
// follow (jobframework); these functions are its pieces:
//  - build_workload: what the operator creates (and recreates when the gang's
//    shape changes: workload_outdated);
//  - read_workload: what Kueue decided (admitted, evicted, why it waits);
//  - the status patches the job's owner writes: PodsReady (waitForPodsReady),
//    the requeue once an evicted gang has stopped (quota released, Kueue
//    queues the workload again), Finished when the job ends.
// Each patch carries the Workload's resourceVersion: a stale write is a
// Conflict, never an overwrite of what Kueue wrote meanwhile.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "trainingjob/types.h"

namespace weft::tj {

using Json = nlohmann::json;

inline constexpr const char* kWorkloadPodSet = "workers";

// What Kueue says of a Workload.
struct WorkloadState {
  bool quota_reserved = false;  // QuotaReserved True and status.admission set
  bool admitted = false;        // Admitted True (quota and every admission check)
  bool evicted = false;         // Evicted True: the gang must stop
  bool finished = false;        // Finished True
  bool pods_ready = false;      // PodsReady True
  std::string evicted_reason, evicted_message;
  std::string waiting;          // why it is not admitted, in Kueue's words
  std::string cluster_queue;    // status.admission.clusterQueue
  std::vector<std::string> flavors;  // the ResourceFlavors the admission assigned, distinct
};
WorkloadState read_workload(const Json& workload);

// trainingjob-<job>-<first 5 of the uid>: a job deleted and created again
// under its name gets a Workload of its own.
std::string workload_name(const std::string& job, const std::string& uid);
struct WorkloadPriority {
  std::string class_name;  // a WorkloadPriorityClass
  int value = 0;
};
// The job's Workload: owned by the job (a controller reference, so it goes
// with the job), labelled as the job's children are and with Kueue's
// job-uid, one pod set of spec.replicas pods built like rank 0's pod
// (`pod`: build_pod's result), the queue from the job's label.
Json build_workload(const Json& job, const TrainingJobSpec& spec, const Json& pod, const std::string& queue,
                    const std::optional<WorkloadPriority>& priority);
// The gang the Workload describes is not the job's any more (a spec change:
// pods, requests, image, worker config): it is replaced.
bool workload_outdated(const Json& workload, const TrainingJobSpec& spec);

// Status patches (JSON merge patches of the status subresource).
// PodsReady True once every pod runs; False (WaitForRecovery) when a gang
// that was ready lost a pod. nullopt: the condition already says so.
std::optional<Json> pods_ready_patch(const Json& workload, bool ready, const std::string& now);
// After Evicted, once no pod of the gang runs: QuotaReserved and Admitted
// False, the admission cleared, Requeued (True for a preemption or a node
// failure; False otherwise, Kueue's backoff then decides when).
Json requeue_patch(const Json& workload, const std::string& now);
// The job ended: Finished True, so Kueue releases its quota.
Json finished_patch(const Json& workload, bool succeeded, const std::string& message, const std::string& now);

// Where an admitted gang runs: the assigned ResourceFlavors' nodeLabels
// (a nodeSelector) and tolerations, merged over the flavors.
struct FlavorPlacement {
  Json node_selector = Json::object();
  Json tolerations = Json::array();
};
// Adds one ResourceFlavor; false (with `conflict` set) when its nodeLabels
// contradict an earlier flavor's.
bool add_flavor(FlavorPlacement& placement, const Json& flavor, std::string* conflict);

}  // namespace weft::tj
