// Typed view of a TrainingJob (spec and the status fields the operator
// owns), parsed once from the API object. Defaults mirror the CRD schema so a
// spec from an API server that did not apply them (or a test builder) means
// the same thing. validate() enforces the cross-field rules that the CRD
// states as CEL, because API servers before 1.25 ignore those rules.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace weft::tj {

using Json = nlohmann::json;

struct RestartSpec {
  int max_restarts = 3;          // gang restarts before Failed
  int backoff_seconds = 10;      // before the first restart; doubles per restart
  int max_backoff_seconds = 300;
};

struct BucketTuningSpec {
  bool enabled = false;
  double min_mb = 1, max_mb = 256;
  int steps_per_trial = 20;
  int max_trials = 8;
};

struct TrainingJobSpec {
  int replicas = 1;
  std::string image;
  std::string image_pull_policy = "IfNotPresent";
  int master_port = 29500;
  Json resources = Json::object();  // core/v1 ResourceRequirements
  Json pod_template = Json::object();  // spec.template overrides
  Json worker = Json::object();     // verbatim worker config
  RestartSpec restart;
  BucketTuningSpec bucket_tuning;
  bool suspend = false;
  std::optional<int> ttl_seconds_after_finished;

  // Read from `worker` (defaults as in worker/train/config.h).
  std::string strategy() const;
  int sp() const;
  int wp() const;
  double bucket_cap_mb() const;
};

struct Condition {
  std::string type, status, reason, message, last_transition_time;
  long observed_generation = 0;
};

struct TrainingJobStatus {
  std::string phase;            // "" = never reconciled
  long observed_generation = 0;
  int attempt = 0;
  int ready_replicas = 0;
  int restarts = 0;
  std::string start_time, completion_time, last_restart_time;
  std::string attempt_start_time;  // all pods of `attempt` created; a vanished pod after this is a failure
  std::vector<Condition> conditions;
  Json extra = Json::object();  // progress, tuning: owned by other writers, carried through

  const Condition* condition(const std::string& type) const;
  // Sets a condition; lastTransitionTime changes only when status flips.
  void set_condition(const std::string& type, bool status, const std::string& reason, const std::string& message,
                     long generation, const std::string& now);
  void remove_condition(const std::string& type);
};

struct SpecError {
  std::string field;   // e.g. "spec.replicas"
  std::string message;
};

// Parse never fails on missing fields (defaults apply); wrong JSON types are
// reported by validate-time SpecErrors via parse_spec's out-param.
TrainingJobSpec parse_spec(const Json& spec, std::vector<SpecError>* errors = nullptr);
TrainingJobStatus parse_status(const Json& status);
Json to_json(const TrainingJobStatus& s);

// The rules the CRD expresses as CEL and bounds, checked again here.
std::vector<SpecError> validate(const TrainingJobSpec& spec);
std::string describe(const std::vector<SpecError>& errors);

}  // namespace weft::tj
