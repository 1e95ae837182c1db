// Gang restart policy (pure). One failed rank fails the whole gang: the other
// ranks' collectives would time out anyway, and the restart resumes every
// rank from the same checkpoint.
//
//  - exit code 1 (bad config or input) on any rank: Failed, never retried;
//  - any other failure (retryable exit code, unknown exit, eviction, a pod
//    that vanished after launch): Restart while restarts < maxRestarts,
//    otherwise Failed with MaxRestartsExceeded;
//  - otherwise Healthy.
// Backoff before attempt n+1 is backoffSeconds * 2^(restarts-1), capped.
#pragma once

#include <chrono>
#include <string>

#include "trainingjob/gang.h"
#include "trainingjob/types.h"

namespace weft::tj {

enum class GangVerdict { Healthy, Restart, Fail };

struct RestartDecision {
  GangVerdict verdict = GangVerdict::Healthy;
  std::string reason;    // constants.h reason
  std::string message;   // names the rank and exit code
};

RestartDecision decide_restart(const GangObservation& gang, int restarts_so_far, const RestartSpec& spec);

// Delay between tearing down attempt n and launching attempt n+1, where
// `restarts` counts restarts including this one (>= 1).
std::chrono::seconds restart_backoff(int restarts, const RestartSpec& spec);

}  // namespace weft::tj
