#include "trainingjob/elastic_policy.h"

#include <algorithm>

#include "trainingjob/constants.h"

namespace weft::tj {

namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Kind = ElasticDecision::Kind;

std::string pods(int n) { return std::to_string(n) + (n == 1 ? " pod" : " pods"); }

std::string ranks_of(const TrainingJobSpec& spec, int n) {
  const int per_pod = spec.ranks_per_pod();
  return per_pod == 1 ? std::string() : " (" + std::to_string(n * per_pod) + " ranks)";
}

milliseconds until(TimePoint at, TimePoint now) {
  return std::max(duration_cast<milliseconds>(at - now), milliseconds(0)) + milliseconds(10);
}

// Nothing to do yet; look again in `after`.
ElasticDecision keep_until(milliseconds after) {
  ElasticDecision d;
  d.recheck_in = after;
  return d;
}

ElasticDecision decision(Kind kind, int replicas, const char* reason, std::string message,
                         std::optional<milliseconds> recheck = std::nullopt) {
  return {kind, replicas, reason, std::move(message), recheck};
}

ElasticDecision shrink_or_hold(const TrainingJobSpec& spec, const GangObservation& gang, TimePoint launched,
                               TimePoint now) {
  const ElasticSpec& el = *spec.elastic;
  const Placement where = placement_of(gang);
  const int placed = where.placed;
  const std::string why = where.held > 0 ? "; the scheduler: " + where.first_held_reason : "";
  if (where.waiting == 0) return {};
  const TimePoint deadline = launched + seconds(el.placement_timeout_seconds);
  if (now < deadline) return keep_until(until(deadline, now));

  const std::vector<int> sizes = spec.elastic_sizes();
  // A gang scheduler binds all pods or none: try the next smaller size.
  const int fits = spec.scheduling.enabled() ? spec.replicas - 1 : placed;
  int target = 0;
  for (int n : sizes)
    if (n <= fits && n < spec.replicas) target = n;
  const std::string unplaced = std::to_string(placed) + " of " + pods(spec.replicas) + " placed after " +
                               std::to_string(el.placement_timeout_seconds) + "s" + why;
  if (target == 0)
    // Placement is watched through the pods; look again now and then in
    // case a size became possible without a pod changing.
    return decision(Kind::Hold, 0, kReasonMinimumUnplaced,
                    unplaced + "; spec.elastic.minReplicas is " + std::to_string(el.min_replicas) +
                        ": the gang waits for its pods to be placed",
                    milliseconds(std::max(el.placement_timeout_seconds, 5) * 1000));
  return decision(Kind::Shrink, target, kReasonShrunk,
                  unplaced + "; training on " + pods(target) + ranks_of(spec, target) + " of the planned " +
                      pods(spec.planned()) + ", with more micro-batches per rank so that every step trains on "
                      "the planned batch");
}

}  // namespace

ElasticDecision decide_elastic(const TrainingJobSpec& spec, const GangObservation& gang,
                               std::optional<TimePoint> launched_at, std::optional<TimePoint> last_resize,
                               bool all_ready, TimePoint now) {
  if (!spec.elastic || !launched_at) return {};
  ElasticDecision d = shrink_or_hold(spec, gang, *launched_at, now);
  if (d.kind != Kind::Keep || d.recheck_in) return d;
  if (spec.replicas >= spec.planned() || !all_ready) return d;
  const TimePoint since = last_resize ? std::max(*last_resize, *launched_at) : *launched_at;
  const TimePoint grow_at = since + seconds(spec.elastic->grow_check_seconds);
  if (now < grow_at) return keep_until(until(grow_at, now));
  return decision(Kind::Grow, spec.planned(), kReasonGrowing,
                  "trained on " + pods(spec.replicas) + " for " + std::to_string(spec.elastic->grow_check_seconds) +
                      "s (spec.elastic.growCheckSeconds): trying the planned " + pods(spec.planned()) +
                      ranks_of(spec, spec.planned()) +
                      " again from the checkpoint the ranks write as they stop; if they cannot be placed "
                      "within spec.elastic.placementTimeoutSeconds the gang shrinks again");
}

}  // namespace weft::tj
