#include "trainingjob/phase_policy.h"

#include "trainingjob/constants.h"

namespace weft::tj {

PhaseView compute_phase(const GangObservation& gang, const PhaseFacts& facts) {
  PhaseView v;
  for (const auto& r : gang.ranks) {
    if (r.terminating) continue;
    if (r.phase == "Running") ++v.running;
    if (r.phase == "Running" && r.ready) ++v.ready;
  }
  v.all_ready = gang.replicas > 0 && v.ready == gang.replicas;
  if (facts.failed) v.phase = kPhaseFailed;
  else if (facts.succeeded) v.phase = kPhaseSucceeded;
  else if (facts.suspended) v.phase = kPhaseSuspended;
  else if (facts.queued) v.phase = kPhaseQueued;
  else if (facts.restart_in_progress && !v.all_ready) v.phase = kPhaseRestarting;
  else if (v.all_ready) v.phase = kPhaseRunning;
  else v.phase = kPhasePending;
  return v;
}

}  // namespace weft::tj
