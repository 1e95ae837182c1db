// Elastic size policy (pure): when an elastic job's gang changes size.
//
//  - Shrink: a launched gang whose pods are not all placed (bound to a node)
//    placementTimeoutSeconds after the launch relaunches at the largest
//    allowed size (TrainingJobSpec::elastic_sizes) that is no more than the
//    pods the scheduler placed. A gang scheduler places all pods or none, so
//    with spec.scheduling.gang the next smaller allowed size is tried.
//  - Hold: no allowed size of at least minReplicas fits the placed pods: the
//    gang stays as it is (Pending) and says so.
//  - Grow: a smaller gang that has trained (every rank Ready) for
//    growCheckSeconds since it last changed size relaunches at the planned
//    size. Its pods stop on SIGTERM after checkpointing the step they agree
//    on, so nothing is lost; if the full gang cannot be placed in its turn,
//    the shrink rule brings it back to the size the cluster holds.
//
// Every decision names why, for the condition and the event. `recheck_in`
// says when the decision could change with nothing else happening (a
// timeout running out), so the reconciler looks again then.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "trainingjob/clock.h"
#include "trainingjob/gang.h"
#include "trainingjob/types.h"

namespace weft::tj {

struct ElasticDecision {
  enum class Kind { Keep, Shrink, Grow, Hold };
  Kind kind = Kind::Keep;
  int replicas = 0;  // Shrink, Grow: the new gang's pods
  std::string reason;  // constants.h reason (Shrink, Grow, Hold)
  std::string message;
  std::optional<std::chrono::milliseconds> recheck_in;
};

// `spec` is the current gang's (replicas = its pods, planned() = the job's);
// `launched_at`: when every pod of the current attempt was created (none:
// not launched yet); `last_resize`: when the gang last changed size (none:
// never); `all_ready`: every rank of the gang trains.
ElasticDecision decide_elastic(const TrainingJobSpec& spec, const GangObservation& gang,
                               std::optional<TimePoint> launched_at, std::optional<TimePoint> last_resize,
                               bool all_ready, TimePoint now);

}  // namespace weft::tj
