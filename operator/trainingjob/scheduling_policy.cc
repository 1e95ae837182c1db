#include "trainingjob/scheduling_policy.h"

#include "trainingjob/builders.h"
#include "trainingjob/constants.h"

namespace weft::tj {

namespace {

std::string group_of(const TrainingJobSpec& spec, const std::string& job) {
  const kube::Resource& res = podgroup_resource(spec);
  return "PodGroup " + job + " (" + res.api_version() + ", minMember " + std::to_string(spec.replicas) + ")";
}

}  // namespace

std::string podgroup_problem(const TrainingJobSpec& spec, int http_status, const std::string& api_message) {
  const kube::Resource& res = podgroup_resource(spec);
  const std::string what = res.plural + "." + res.group + "/" + res.version;
  std::string why;
  if (http_status == 404)
    why = "the API server does not serve " + what + ": install " +
          (spec.scheduling.volcano() ? std::string("Volcano") : std::string("scheduler-plugins")) +
          " (its PodGroup CRD) or set spec.scheduling.gang: none";
  else if (http_status == 403)
    why = "weft-operator may not create " + what + " (its ClusterRole lacks the PodGroup rules): " + api_message;
  else
    why = "creating the PodGroup failed: " + api_message;
  return why + "; no pods are created until the PodGroup exists";
}

std::optional<SchedulingView> scheduling_condition(const TrainingJobSpec& spec, const std::string& job,
                                                   const GangObservation& gang, const std::string& podgroup_problem) {
  if (!spec.scheduling.enabled()) return std::nullopt;
  if (!podgroup_problem.empty()) return SchedulingView{false, kReasonPodGroupUnavailable, podgroup_problem};
  const int pods = spec.replicas;
  const Placement where = placement_of(gang);
  const int placed = where.placed, held = where.held;
  const std::string first_message =
      held > 0 ? "pod " + pod_name(job, where.first_held_rank) + ": " + where.first_held_reason : "";
  const std::string scheduler = spec.scheduling.scheduler();
  if (placed >= pods)
    return SchedulingView{true, kReasonGangPlaced,
                          "all " + std::to_string(pods) + " pods placed by " + scheduler + " (" + group_of(spec, job) +
                              ")"};
  if (held > 0)
    return SchedulingView{false, kReasonUnschedulable,
                          scheduler + " cannot place the gang: " + std::to_string(held) + " of " +
                              std::to_string(pods) + " pods unschedulable, " + std::to_string(placed) +
                              " placed; " + first_message};
  return SchedulingView{false, kReasonWaitingForScheduler,
                        std::to_string(placed) + " of " + std::to_string(pods) + " pods placed; waiting for " +
                            scheduler + " to place the gang (" + group_of(spec, job) +
                            "); they stay Pending while no scheduler of that name runs"};
}

}  // namespace weft::tj
