#include "trainingjob/restart_policy.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "trainingjob/constants.h"
#include "weft_contract.h"

namespace weft::tj {

const char* cause_name(FailureCause c) {
  switch (c) {
    case FailureCause::Failure: return "Failure";
    case FailureCause::OOMKilled: return "OOMKilled";
    case FailureCause::Evicted: return "Evicted";
    case FailureCause::Preempted: return "Preempted";
    case FailureCause::NodeLost: return "NodeLost";
    case FailureCause::Deleted: return "Deleted";
    case FailureCause::StartTimeout: return "StartTimeout";
  }
  return "Failure";
}

bool counts_against_limit(FailureCause c) {
  return c == FailureCause::Failure || c == FailureCause::OOMKilled || c == FailureCause::StartTimeout;
}

namespace {
constexpr FailureCause kCauses[] = {FailureCause::Failure,   FailureCause::OOMKilled, FailureCause::Evicted,
                                    FailureCause::Preempted, FailureCause::NodeLost,  FailureCause::Deleted,
                                    FailureCause::StartTimeout};
}  // namespace

int counted_restarts(const TrainingJobStatus& status) {
  static const std::vector<std::string> uncounted = [] {
    std::vector<std::string> names;
    for (FailureCause c : kCauses)
      if (!counts_against_limit(c)) names.push_back(cause_name(c));
    return names;
  }();
  return status.counted_restarts(uncounted);
}

bool last_restart_counted(const TrainingJobStatus& status) {
  for (FailureCause c : kCauses)
    if (status.last_restart_cause == cause_name(c)) return counts_against_limit(c);
  return true;  // none yet, or a cause this operator version does not know
}

FailureCause classify_failure(const RankState& r) {
  if (const std::string& d = r.disruption; !d.empty()) {
    if (d == "PreemptionByScheduler" || d == "PreemptionByKubeScheduler") return FailureCause::Preempted;
    if (d == "EvictionByEvictionAPI" || d == "TerminationByKubelet") return FailureCause::Evicted;
    if (d == "DeletionByTaintManager" || d == "DeletionByPodGC") return FailureCause::NodeLost;
    return FailureCause::Deleted;
  }
  if (r.reason == "Evicted") return FailureCause::Evicted;
  if (r.reason == "Preempting") return FailureCause::Preempted;
  // "Terminated"/"Shutdown": the kubelet's graceful node shutdown.
  if (r.reason == "NodeLost" || r.reason == "NodeShutdown" || r.reason == "Shutdown" || r.reason == "Terminated")
    return FailureCause::NodeLost;
  if (r.container_reason == "OOMKilled") return FailureCause::OOMKilled;
  // A worker stops with 143 only when asked to, by SIGTERM or with a peer
  // that was: its pod (or a peer's) is being deleted or evicted. On servers
  // that do not mark evictions this is all there is to tell them by.
  if (r.terminating || r.exit_code == contract::kExitPreempted) return FailureCause::Deleted;
  return FailureCause::Failure;
}

namespace {

const char* cause_reason(FailureCause c) {
  switch (c) {
    case FailureCause::Failure: return kReasonRankFailed;
    case FailureCause::OOMKilled: return kReasonRankOOMKilled;
    case FailureCause::Evicted: return kReasonRankEvicted;
    case FailureCause::Preempted: return kReasonRankPreempted;
    case FailureCause::NodeLost: return kReasonRankNodeLost;
    case FailureCause::Deleted: return kReasonRankDeleted;
    case FailureCause::StartTimeout: return kReasonRankStartTimeout;
  }
  return kReasonRankFailed;
}

// When several ranks stop, the one taken from outside is the root cause (its
// peers then fail on their collectives), then an OOM kill, then an exit.
int precedence(FailureCause c) {
  if (!counts_against_limit(c)) return 2;
  return c == FailureCause::OOMKilled ? 1 : 0;
}

std::string describe(const RankState& r, FailureCause c) {
  const std::string rank = rank_and_pod(r);
  const std::string why = last_message_line(r.message);
  switch (c) {
    case FailureCause::Failure: {
      if (!r.exit_code) return rank + " failed" + (r.reason.empty() ? "" : " (" + r.reason + ")") + " without an exit code";
      // The runtime's reason when it is more than "Error" (StartError: the
      // container never ran, its message is the runtime's).
      const std::string& cr = r.container_reason;
      const bool telling = !cr.empty() && cr != "Error" && cr != "Completed";
      return rank + " exited with code " + std::to_string(*r.exit_code) + (telling ? " (" + cr + ")" : "") +
             (why.empty() ? "" : ": " + why);
    }
    case FailureCause::OOMKilled:
      // The kubelet's word, so that a search for it finds the job.
      return rank + " was OOMKilled: " +
             (r.memory_limit.empty() ? std::string("out of memory with no memory limit set")
                                     : "its container reached its memory limit " + r.memory_limit) +
             (r.exit_code ? " (exit code " + std::to_string(*r.exit_code) + ")" : "");
    default: {
      std::string detail = !r.disruption.empty() ? r.disruption : r.reason;
      if (detail.empty() && r.terminating) detail = "pod deleted";
      return rank + " stopped from outside the job: " + cause_name(c) + (detail.empty() ? "" : " (" + detail + ")");
    }
  }
}

}  // namespace

std::string rank_and_pod(const RankState& r) {
  return "rank " + std::to_string(r.rank) + (r.pod.empty() ? "" : " (pod " + r.pod + ")");
}

RestartDecision counted_restart(FailureCause cause, const std::string& message, int counted_restarts,
                                const RestartSpec& spec) {
  if (counted_restarts >= spec.max_restarts)
    return {GangVerdict::Fail, kReasonMaxRestarts,
            message + "; restart limit reached (" + std::to_string(counted_restarts) + " of maxRestarts " +
                std::to_string(spec.max_restarts) + ")",
            cause};
  return {GangVerdict::Restart, cause_reason(cause), message, cause};
}

RestartDecision decide_restart(const GangObservation& gang, int counted_restarts, const RestartSpec& spec) {
  // Exit codes 1 and 5 win over everything: retrying a bad config, or a run
  // that diverges at the same step from the same checkpoint, only burns time.
  for (const auto& r : gang.ranks)
    if (r.phase == "Failed" && r.exit_code && !contract::retryable(*r.exit_code)) {
      const std::string why = last_message_line(r.message);
      const bool diverged = *r.exit_code == contract::kExitDiverged;
      return {GangVerdict::Fail, diverged ? kReasonDiverged : kReasonBadConfig,
              rank_and_pod(r) +
                  (diverged ? " exited with code 5 (the loss became NaN or infinite); not retried"
                            : " exited with code 1 (bad config or input); not retried") +
                  (why.empty() ? "" : ": " + why),
              FailureCause::Failure};
    }

  std::optional<FailureCause> cause;
  std::string message;
  for (const auto& r : gang.ranks) {
    if (r.phase != "Failed") continue;
    const FailureCause c = classify_failure(r);
    if (!cause || precedence(c) > precedence(*cause)) {
      cause = c;
      message = describe(r, c);
    }
  }
  if ((!cause || precedence(FailureCause::Deleted) > precedence(*cause)) && gang.launched &&
      !gang.missing_ranks.empty()) {
    cause = FailureCause::Deleted;
    message = "pod of rank " + std::to_string(gang.missing_ranks.front()) + " was deleted";
    // A pod still being deleted may say who deleted it (DisruptionTarget:
    // an API eviction, a preemption, the taint manager).
    for (int m : gang.missing_ranks)
      for (const auto& r : gang.leaving)
        if (r.rank == m && !r.disruption.empty() && cause == FailureCause::Deleted) {
          cause = classify_failure(r);
          message = describe(r, *cause);
        }
  }
  if (!cause) return {GangVerdict::Healthy, "", "", FailureCause::Failure};
  const std::string reason = cause_reason(*cause);
  if (!counts_against_limit(*cause)) return {GangVerdict::Restart, reason, message + " (not counted against maxRestarts)", *cause};
  return counted_restart(*cause, message, counted_restarts, spec);
}

std::chrono::seconds restart_backoff(int restarts, const RestartSpec& spec) {
  if (restarts <= 0 || spec.backoff_seconds <= 0) return std::chrono::seconds(0);
  double s = static_cast<double>(spec.backoff_seconds);
  for (int i = 1; i < restarts && s < spec.max_backoff_seconds; ++i) s *= 2;
  return std::chrono::seconds(static_cast<long>(std::min<double>(s, spec.max_backoff_seconds)));
}

}  // namespace weft::tj
