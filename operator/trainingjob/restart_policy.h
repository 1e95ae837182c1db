// Gang restart policy (pure). One failed rank fails the whole gang: the other
// ranks' collectives would time out anyway, and the restart resumes every
// rank from the same checkpoint.
//
//  - exit code 1 (bad config or input) on any rank: Failed, never retried;
//  - a rank taken away from outside the job (a FailureCause that does not
//    count: eviction, preemption, node loss, a deleted pod): Restart, always,
//    without counting against maxRestarts or growing the backoff;
//  - any other failure (a retryable or unknown exit code, an OOM kill, a pod
//    that did not start within the start deadline, see start_policy.h):
//    Restart while the counted restarts < maxRestarts, otherwise Failed with
//    MaxRestartsExceeded;
//  - otherwise Healthy.
// Backoff before attempt n+1 is backoffSeconds * 2^(counted restarts-1), capped.
#pragma once

#include <chrono>
#include <string>

#include "trainingjob/gang.h"
#include "trainingjob/types.h"

namespace weft::tj {

enum class GangVerdict { Healthy, Restart, Fail };

// Why a rank of a running gang stopped, from its pod (status.restartsByCause
// counts restarts by these names).
enum class FailureCause {
  Failure,    // the worker exited non-zero on its own: counts
  OOMKilled,  // the container hit its memory limit: counts (it would again)
  Evicted,    // eviction API, kubelet node pressure: does not count
  Preempted,  // a higher-priority pod took its place: does not count
  NodeLost,   // node gone, unreachable or shut down: does not count
  Deleted,    // pod deleted, or the worker stopped on SIGTERM (exit 143; how an
              // eviction looks on servers < 1.26): does not count
  StartTimeout,  // a pod on its node did not start its worker within the start
                 // deadline (start_policy.h): counts (the node or the pod's
                 // volumes may be at fault, a restart may place it elsewhere)
};
const char* cause_name(FailureCause c);
// Whether a restart for this cause counts against maxRestarts.
bool counts_against_limit(FailureCause c);
// The restarts of `status` that count (TrainingJobStatus::counted_restarts
// with the causes that do not).
int counted_restarts(const TrainingJobStatus& status);
// Whether the latest restart counted (one recorded before causes were: yes).
bool last_restart_counted(const TrainingJobStatus& status);
// The cause of a rank that failed (pod phase Failed) or is being deleted:
// DisruptionTarget's reason first (Kubernetes >= 1.26 sets it for API
// evictions, preemption and taint-based deletion), then the pod's reason
// (Evicted, Preempting, NodeLost, node shutdown), then an OOM kill, then a
// pod being deleted or a worker that stopped on SIGTERM (exit 143, itself or
// with a signalled peer); else the worker's own Failure.
FailureCause classify_failure(const RankState& rank);

struct RestartDecision {
  GangVerdict verdict = GangVerdict::Healthy;
  std::string reason;    // constants.h reason
  std::string message;   // names the rank, its pod and the exit code or cause
  FailureCause cause = FailureCause::Failure;  // Restart and Fail
};

// `counted_restarts`: the restarts so far that count against maxRestarts.
RestartDecision decide_restart(const GangObservation& gang, int counted_restarts, const RestartSpec& spec);

// A restart for `cause` (one that counts), or Fail with MaxRestartsExceeded
// once the counted restarts reached maxRestarts; `message` says why.
RestartDecision counted_restart(FailureCause cause, const std::string& message, int counted_restarts,
                                const RestartSpec& spec);

// How a rank is named in messages: "rank 2 (pod llama-2)", or "rank 2" when
// its pod's name is not known.
std::string rank_and_pod(const RankState& r);

// Delay between tearing down attempt n and launching attempt n+1, where
// `restarts` counts the counted restarts including this one (0: none).
std::chrono::seconds restart_backoff(int restarts, const RestartSpec& spec);

}  // namespace weft::tj
