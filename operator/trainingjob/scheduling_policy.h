// Gang scheduling policy (pure): the GangScheduled condition of a job whose
// spec.scheduling.gang is podgroup, from the PodGroup's fate and the pods'
// PodScheduled conditions. The gang scheduler binds all pods of the group
// or none, so a gang that cannot be placed keeps every pod Pending, and the
// job Pending with this condition saying why.
#pragma once

#include <optional>
#include <string>

#include "trainingjob/gang.h"
#include "trainingjob/types.h"

namespace weft::tj {

struct SchedulingView {
  bool placed = false;  // the condition's status
  std::string reason;   // constants.h: GangPlaced, PodGroupUnavailable, Unschedulable, WaitingForScheduler
  std::string message;
};

// `podgroup_problem`: why the PodGroup could not be created this reconcile
// ("" when it exists). nullopt when the job is not gang-scheduled.
std::optional<SchedulingView> scheduling_condition(const TrainingJobSpec& spec, const std::string& job,
                                                   const GangObservation& gang, const std::string& podgroup_problem);

// What an API error on creating the PodGroup means for the user: the CRD is
// not served (404), the operator may not create it (403), or the server's
// own message.
std::string podgroup_problem(const TrainingJobSpec& spec, int http_status, const std::string& api_message);

}  // namespace weft::tj
