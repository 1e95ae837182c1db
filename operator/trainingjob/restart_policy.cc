#include "trainingjob/restart_policy.h"

#include <algorithm>

#include "trainingjob/constants.h"
#include "weft_contract.h"

namespace weft::tj {

RestartDecision decide_restart(const GangObservation& gang, int restarts_so_far, const RestartSpec& spec) {
  // Exit code 1 wins over everything: retrying a bad config only burns time.
  for (const auto& r : gang.ranks)
    if (r.phase == "Failed" && r.exit_code && !contract::retryable(*r.exit_code)) {
      const std::string why = last_message_line(r.message);
      return {GangVerdict::Fail, kReasonBadConfig,
              "rank " + std::to_string(r.rank) + " exited with code 1 (bad config or input); not retried" +
                  (why.empty() ? "" : ": " + why)};
    }

  std::string reason, message;
  for (const auto& r : gang.ranks) {
    if (r.phase != "Failed") continue;
    if (r.reason == "Evicted" || !r.exit_code) {
      reason = kReasonRankDeleted;
      message = "rank " + std::to_string(r.rank) + " failed" + (r.reason.empty() ? "" : " (" + r.reason + ")") +
                " without an exit code";
    } else {
      reason = kReasonRankFailed;
      message = "rank " + std::to_string(r.rank) + " exited with code " + std::to_string(*r.exit_code);
      if (const std::string why = last_message_line(r.message); !why.empty()) message += ": " + why;
    }
    break;
  }
  if (reason.empty() && gang.launched && !gang.missing_ranks.empty()) {
    reason = kReasonRankDeleted;
    message = "pod of rank " + std::to_string(gang.missing_ranks.front()) + " was deleted";
  }
  if (reason.empty()) return {GangVerdict::Healthy, "", ""};
  if (restarts_so_far >= spec.max_restarts)
    return {GangVerdict::Fail, kReasonMaxRestarts,
            message + "; restart limit reached (" + std::to_string(restarts_so_far) + " of maxRestarts " +
                std::to_string(spec.max_restarts) + ")"};
  return {GangVerdict::Restart, reason, message};
}

std::chrono::seconds restart_backoff(int restarts, const RestartSpec& spec) {
  if (restarts <= 0 || spec.backoff_seconds <= 0) return std::chrono::seconds(0);
  double s = static_cast<double>(spec.backoff_seconds);
  for (int i = 1; i < restarts && s < spec.max_backoff_seconds; ++i) s *= 2;
  return std::chrono::seconds(static_cast<long>(std::min<double>(s, spec.max_backoff_seconds)));
}

}  // namespace weft::tj
