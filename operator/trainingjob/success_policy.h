// Success policy (pure): a job succeeds when every rank of the current
// attempt has terminated with exit code 0. A rank that succeeded while
// others still run is not yet success (rank 0 may finish the last
// checkpoint after the others).
#pragma once

#include "trainingjob/gang.h"

namespace weft::tj {

bool gang_succeeded(const GangObservation& gang);

}  // namespace weft::tj
