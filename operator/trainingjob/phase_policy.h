// Phase policy (pure): the one status.phase a job shows, from facts the
// reconciler established. Precedence: Failed > Succeeded > Suspended >
// Restarting > Running > Pending. "Restarting" lasts from the gang teardown
// until every rank of the new attempt runs again.
#pragma once

#include <string>

#include "trainingjob/gang.h"

namespace weft::tj {

struct PhaseFacts {
  bool failed = false;
  bool succeeded = false;
  bool suspended = false;
  bool restart_in_progress = false;  // restarts > 0 and the new gang is not all running yet
};

struct PhaseView {
  std::string phase;
  int running = 0;  // ranks whose pod runs
  int ready = 0;    // ranks whose pod is Ready
  bool all_running = false;
};

PhaseView compute_phase(const GangObservation& gang, const PhaseFacts& facts);

}  // namespace weft::tj
