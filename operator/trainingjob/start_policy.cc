#include "trainingjob/start_policy.h"

#include <algorithm>
#include <vector>

#include "trainingjob/constants.h"

namespace weft::tj {

std::string start_blocker(const std::string& w) {
  if (w == "ErrImageNeverPull") return kReasonImageNotPresent;
  if (w == "ErrImagePull" || w == "ImagePullBackOff" || w == "ImageInspectError" || w == "RegistryUnavailable" ||
      w == "SignatureValidationFailed")
    return kReasonImagePullFailed;
  if (w == "InvalidImageName") return kReasonInvalidImageName;
  if (w == "CreateContainerConfigError") return kReasonContainerConfigError;
  if (w == "CreateContainerError" || w == "RunContainerError" || w == "PreCreateHookError" ||
      w == "PreStartHookError" || w == "PostStartHookError")
    return kReasonContainerCreateFailed;
  return "";
}

namespace {

// On its node, its worker not started: the kubelet reports it waiting, or
// has not reported the container yet.
bool not_started(const RankState& r) { return !r.terminating && r.phase == "Pending" && r.scheduled && !r.exit_code; }

std::string pod_of(const RankState& r) {
  const std::string rank = "rank " + std::to_string(r.rank);
  return r.pod.empty() ? "the pod of " + rank : "pod " + r.pod + " (" + rank + ")";
}

// The kubelet's reason and words, e.g. `ErrImageNeverPull: Container image
// "x" is not present with pull policy of Never`.
std::string kubelet_says(const RankState& r) {
  if (!r.container_reported) return "the kubelet has not reported its container";
  std::string out = r.waiting_reason.empty() ? std::string("waiting") : r.waiting_reason;
  const std::string words = last_message_line(r.waiting_message);
  if (!words.empty()) out += ": " + words;
  if (r.last_exit_code)
    out += " (its last run exited with code " + std::to_string(*r.last_exit_code) +
           (r.last_reason.empty() ? "" : ", " + r.last_reason) + ")";
  return out;
}

struct Waiting {
  const RankState* rank;
  std::string blocker;                  // start_blocker of its waiting reason
  std::optional<TimePoint> since;       // bound to its node (or created)
};

}  // namespace

StartDecision decide_start(const GangObservation& gang, TimePoint now, std::chrono::seconds timeout,
                           int counted_restarts, const RestartSpec& spec) {
  std::vector<Waiting> waiting;
  for (const RankState& r : gang.ranks) {
    if (!not_started(r)) continue;
    std::optional<TimePoint> since = parse_time(r.scheduled_at);
    if (!since) since = parse_time(r.created_at);
    waiting.push_back({&r, start_blocker(r.waiting_reason), since});
  }
  std::sort(waiting.begin(), waiting.end(), [](const Waiting& a, const Waiting& b) { return a.rank->rank < b.rank->rank; });

  StartDecision d;
  const Waiting* blocked_late = nullptr;  // past the deadline, for a cause a restart cannot cure
  const Waiting* late = nullptr;          // past the deadline, for another
  for (const Waiting& w : waiting) {
    if (timeout.count() <= 0 || !w.since) continue;
    const auto left = *w.since + timeout - now;
    if (left <= std::chrono::seconds(0)) {
      if (!w.blocker.empty() && !blocked_late) blocked_late = &w;
      if (w.blocker.empty() && !late) late = &w;
      continue;
    }
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(left) + std::chrono::milliseconds(10);
    if (!d.recheck_in || ms < *d.recheck_in) d.recheck_in = ms;
  }
  const std::string within = "did not start within " + std::to_string(timeout.count()) + "s of being scheduled: ";
  if (blocked_late) {
    const RankState& r = *blocked_late->rank;
    d.act = {GangVerdict::Fail, blocked_late->blocker,
             pod_of(r) + " " + within + kubelet_says(r) + "; not retried (a gang restart would meet the same cause)",
             FailureCause::StartTimeout};
    return d;
  }
  if (late) {
    const RankState& r = *late->rank;
    d.act = counted_restart(FailureCause::StartTimeout, pod_of(r) + " " + within + kubelet_says(r), counted_restarts,
                            spec);
    return d;
  }
  // Before the deadline: the first blocked pod says why, the others are named.
  std::vector<const Waiting*> blocked;
  for (const Waiting& w : waiting)
    if (!w.blocker.empty()) blocked.push_back(&w);
  if (blocked.empty()) return d;
  const RankState& first = *blocked.front()->rank;
  d.blocked_reason = blocked.front()->blocker;
  d.blocked_message = pod_of(first) + " cannot start: " + kubelet_says(first);
  if (blocked.size() > 1) {
    d.blocked_message += blocked.size() == 2 ? "; also pod " : "; also pods ";
    const size_t shown = std::min<size_t>(blocked.size(), 6);
    for (size_t i = 1; i < shown; ++i) {
      const RankState& r = *blocked[i]->rank;
      d.blocked_message += (i > 1 ? ", " : "") + (r.pod.empty() ? "of rank " + std::to_string(r.rank) : r.pod);
    }
    if (blocked.size() > shown) d.blocked_message += " and " + std::to_string(blocked.size() - shown) + " more";
  }
  if (timeout.count() > 0)
    d.blocked_message += "; the job fails if it has not started within " + std::to_string(timeout.count()) +
                         "s of being scheduled";
  return d;
}

}  // namespace weft::tj
