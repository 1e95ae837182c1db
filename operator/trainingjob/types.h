// Typed view of a TrainingJob (spec and the status fields the operator
// owns, status.tuning included), parsed once from the API object. Defaults mirror the CRD schema so a
// spec from an API server that did not apply them (or a test builder) means
// the same thing. validate() enforces the cross-field rules that the CRD
// states as CEL, because API servers before 1.25 ignore those rules.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainingjob/worker_config.h"
#include "tuning/types.h"

namespace weft::tj {

using Json = nlohmann::json;

struct RestartSpec {
  int max_restarts = 3;          // gang restarts before Failed
  int backoff_seconds = 10;      // before the first restart; doubles per restart
  int max_backoff_seconds = 300;
};

// spec.scheduling: gang scheduling. With gang "podgroup" the operator creates
// a PodGroup (minMember = the pods) before the pods, and every pod names it
// and goes to the gang scheduler, which binds all of them or none.
struct SchedulingSpec {
  std::string gang = "none";                     // none | podgroup
  std::string provider = "scheduler-plugins";    // scheduler-plugins | volcano: whose PodGroup
  std::string scheduler_name;                    // "" = the provider's usual name
  std::optional<int> schedule_timeout_seconds;   // scheduler-plugins' PodGroup.spec.scheduleTimeoutSeconds
  std::string queue;                             // Volcano's PodGroup.spec.queue
  // Which fields the spec set (the rest are defaults), for the rules that
  // tie them to gang and provider.
  bool provider_set = false;

  bool enabled() const { return gang == "podgroup"; }
  bool volcano() const { return provider == "volcano"; }
  std::string scheduler() const;  // schedulerName of the pods
};

// spec.elastic: a gang that trains on fewer pods when its pods cannot all be
// placed, and grows back when they can, with the same global batch (its
// ranks accumulate more micro-batches: WEFT_PLANNED_WORLD_SIZE). Absent: the
// gang has spec.replicas pods or waits for them.
struct ElasticSpec {
  int min_replicas = 1;                // the smallest gang that may train
  int placement_timeout_seconds = 60;  // how long a launch may wait for its pods to be placed
  int grow_check_seconds = 300;        // how long a smaller gang trains before the full size is tried again
};

// spec.stragglers: name the rank whose compute time per step exceeds the
// gang's median by more than `threshold` over the last `window_steps` steps
// (straggler_policy.h). Absent: not looked for.
struct StragglerSpec {
  double threshold = 0.2;
  int window_steps = 20;
  std::string action = "none";  // none | replace: relaunch the gang with the straggler's node avoided

  bool replace() const { return action == "replace"; }
};

// The tuning types live in tuning/types.h (shared with tuner/); these names
// keep them in the TrainingJob's vocabulary.
using tuning::BucketTuningSpec;
using tuning::TuningState;
using tuning::tuning_state_name;
using tuning::TuningTrial;
using tuning::TuningStatus;

struct TrainingJobSpec {
  int replicas = 1;  // pods
  // spec.procsPerPod: ranks per pod, started by weft-run inside the pod (the
  // role torchrun has in a PyTorchJob pod). `auto` = the pod's nvidia.com/gpu
  // limit. 1 keeps the pod's only rank as its container's process.
  int procs_per_pod = 1;
  bool procs_per_pod_auto = false;
  std::string shm_size = "1Gi";  // spec.shmSize: the memory-backed /dev/shm of every pod
  std::string image;
  std::string image_pull_policy = "IfNotPresent";
  int master_port = 29500;
  Json resources = Json::object();  // core/v1 ResourceRequirements
  Json pod_template = Json::object();  // spec.template overrides
  Json worker = Json::object();     // verbatim worker config
  // spec.worker as the ranks will read it, with the worker's own parser
  // (worker_config.h); parse_spec fills it, validate() reports its error.
  WorkerRead worker_read = read_worker_config(Json::object(), Json::object());
  RestartSpec restart;
  BucketTuningSpec bucket_tuning;
  bool suspend = false;
  std::optional<int> ttl_seconds_after_finished;
  SchedulingSpec scheduling;
  std::optional<ElasticSpec> elastic;
  std::optional<StragglerSpec> stragglers;
  // Nodes the pods must avoid (status.stragglers.avoidedNodes, set by
  // spec.stragglers.action replace); the reconciler fills it from status.
  std::vector<std::string> avoid_nodes;
  // Where Kueue's admission puts the pods (a queued job under --kueue): the
  // assigned ResourceFlavors' nodeLabels and tolerations (queue_policy.h);
  // the reconciler fills them from the Workload's admission.
  Json queue_node_selector = Json::object();
  Json queue_tolerations = Json::array();
  // The job is queued through its Workload: Kueue's queue label stays off
  // the pods, so a Kueue that also manages plain pods does not count them
  // a second time.
  bool queued_by_workload = false;
  // spec.replicas as the user wrote it: the gang's size at which the global
  // batch is planned. `replicas` above is the size of the current gang, which
  // the reconciler lowers while an elastic job runs smaller (0: replicas).
  int planned_replicas = 0;

  int planned() const { return planned_replicas > 0 ? planned_replicas : replicas; }
  // The pod counts an elastic gang may take, ascending: from minReplicas up to
  // the planned size, those whose ranks divide the parallel layout (sp, wp)
  // and can share the planned batch (train.grad_accum x planned ranks a
  // multiple of their ranks). Just the planned size without spec.elastic.
  std::vector<int> elastic_sizes() const;
  // spec.worker's train.grad_accum (1 when the worker refuses the config).
  long long grad_accum() const;

  // Ranks per pod with `auto` resolved (1 when auto has no GPU limit, which
  // validate() refuses), and the ranks of the job: WORLD_SIZE.
  int ranks_per_pod() const;
  int world_size() const { return replicas * ranks_per_pod(); }
  // resources.limits["nvidia.com/gpu"] when set and a whole number.
  std::optional<int> gpu_limit() const;

  // From worker_read's config; the worker's defaults when it refuses the
  // config (validate() then fails the job).
  long long sp() const;
  long long wp() const;
  // spec.worker.parallel.bucket_cap_mb: the number, or nullopt when auto
  // (the workers size buckets from the model themselves).
  std::optional<double> bucket_cap_mb() const;
  // The port a pod's first rank serves /metrics on: metrics.port (the base
  // port; a pod's local rank L serves on base + L); 0 = metrics off.
  int metrics_port() const;
};

struct Condition {
  std::string type, status, reason, message, last_transition_time;
  long observed_generation = 0;
};

// status.elastic: the size of an elastic job's gang.
struct ElasticStatus {
  int current_replicas = 0;    // pods of the current gang
  int planned_replicas = 0;    // spec.replicas when it was set (a changed spec starts over at full size)
  int resizes = 0;             // shrinks and grows so far
  std::string last_resize_time;
};

// status.stragglers (spec.stragglers action replace): the nodes of the
// stragglers the gang was relaunched away from.
struct StragglerStatus {
  std::vector<std::string> avoided_nodes;
  int replacements = 0;
};

struct TrainingJobStatus {
  std::string phase;            // "" = never reconciled
  long observed_generation = 0;
  int attempt = 0;
  int ready_replicas = 0;
  int ranks = 0;  // WORLD_SIZE of the job: pods x procsPerPod
  int restarts = 0;
  // Restarts by FailureCause name (restart_policy.h); a status written before
  // the breakdown existed has none, and all its restarts count.
  std::map<std::string, int> restarts_by_cause;
  std::string last_restart_cause;  // FailureCause name of the latest restart
  std::string start_time, completion_time, last_restart_time;
  std::string attempt_start_time;  // all pods of `attempt` created; a vanished pod after this is a failure
  std::vector<Condition> conditions;
  std::optional<TuningStatus> tuning;
  std::optional<ElasticStatus> elastic;
  std::optional<StragglerStatus> stragglers;
  Json extra = Json::object();  // progress: owned by another writer, carried through

  // The restarts that count against maxRestarts: all but those whose cause
  // does not (`uncounted`, the FailureCause names that do not count).
  int counted_restarts(const std::vector<std::string>& uncounted) const;
  const Condition* condition(const std::string& type) const;
  // Sets a condition; lastTransitionTime changes only when status flips.
  void set_condition(const std::string& type, bool status, const std::string& reason, const std::string& message,
                     long generation, const std::string& now);
  void remove_condition(const std::string& type);
};

// A field that is wrong, in the spec or in a status field the operator parses.
struct SpecError {
  std::string field;   // e.g. "spec.replicas", "status.tuning.state"
  std::string message;
};

// Parse never fails on missing fields (defaults apply); wrong JSON types are
// reported by validate-time SpecErrors via parse_spec's out-param.
TrainingJobSpec parse_spec(const Json& spec, std::vector<SpecError>* errors = nullptr);
// Problems in status.tuning are reported through `errors` (field paths start
// with "status.tuning") and the offending fields keep their defaults.
TrainingJobStatus parse_status(const Json& status, std::vector<SpecError>* errors = nullptr);
Json to_json(const TrainingJobStatus& s);

// status.tuning on its own. Every problem is reported with its field path
// (e.g. "status.tuning.trials[1].bucketMB"): a wrong JSON type, an unknown
// state, a size that is not positive, a negative or fractional step count, a
// chosenBucketMB that does not match the state, a missing currentBucketMB.
// The offending field keeps its default, so the result is always usable.
TuningStatus parse_tuning(const Json& tuning, std::vector<SpecError>* errors = nullptr);
Json to_json(const TuningStatus& t);

// The rules the CRD expresses as CEL and bounds, checked again here.
std::vector<SpecError> validate(const TrainingJobSpec& spec);
// The spec.elastic part of validate().
std::vector<SpecError> validate_elastic(const TrainingJobSpec& spec);
// The spec.stragglers part of validate().
std::vector<SpecError> validate_stragglers(const TrainingJobSpec& spec);
// The spec.scheduling part of validate().
std::vector<SpecError> validate_scheduling(const TrainingJobSpec& spec);
// metadata.name: the names of the children it becomes part of (Service,
// pod hostnames for `replicas` pods) must be valid.
std::vector<SpecError> validate_name(const std::string& name, const TrainingJobSpec& spec);
std::string describe(const std::vector<SpecError>& errors);

}  // namespace weft::tj
