// Phase policy (pure): the one status.phase a job shows, from facts the
// reconciler established. Precedence: Failed > Succeeded > Suspended >
// Queued > Restarting > Running > Pending. "Running" means training: every rank's pod
// runs and is Ready, and a pod's readiness probe (the worker's /ready) passes
// once its rank has finished a step. "Restarting" lasts from the gang
// teardown until every rank of the new attempt trains again.
#pragma once

#include <string>

#include "trainingjob/gang.h"

namespace weft::tj {

struct PhaseFacts {
  bool failed = false;
  bool succeeded = false;
  bool suspended = false;
  bool restart_in_progress = false;  // restarts > 0 and the new gang is not all running yet
  bool queued = false;               // --kueue: waiting for (or evicted by) Kueue's admission
};

struct PhaseView {
  std::string phase;
  int running = 0;  // ranks whose pod runs
  int ready = 0;    // ranks whose pod runs and is Ready (trains)
  bool all_ready = false;
};

PhaseView compute_phase(const GangObservation& gang, const PhaseFacts& facts);

}  // namespace weft::tj
