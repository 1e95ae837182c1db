// The memory policy: do the ranks of a pod (spec.procsPerPod of them) fit
// its memory limit?
// The worker estimates what a rank needs before it builds the model and exits
// 1 when its limit is below that (worker/train/memory_estimate.h); this
// policy computes the same estimate (the worker's config/rank_memory.h) from
// spec.worker as the worker reads it (trainingjob/worker_config.h) and the
// job's ranks, and compares procsPerPod times it with
// spec.resources.limits.memory, so the user sees the problem before any pod
// starts. It never refuses a job: the worker's own check is the authority.
//
// What is compared: the estimate's host bytes, what the worker checks against
// its cgroup limit. On cpu that is everything; on cuda (the weights,
// gradients, optimizer state and activations live on the GPU) it is the
// initialisation copy and the runtime: the GPU's share is checked by the
// worker against its GPU, which the operator does not know.
//
// The result is the condition MemoryEstimate: True when the operator found no
// problem (WithinLimit, NoMemoryLimit, NotEstimated), False with reason
// LimitBelowEstimate (and a Warning event) when the limit is below the
// estimate.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "trainingjob/types.h"
#include "config/rank_memory.h"

namespace weft::tj {

// The resolved config the estimate is made from (spec.worker_read's, with
// the template's literal WEFT_* overrides); the estimate is for the job's
// ranks (pods x procsPerPod). nullopt, with the reason in *why_not, when the
// operator cannot know the shape: init_from (the model is read from a
// config.json inside the pod), or a config the worker refuses.
std::optional<WorkerConfig> estimated_config(const TrainingJobSpec& spec, std::string* why_not);

struct MemoryCheck {
  bool fits = true;         // false: the limit is below the estimate
  std::string reason;       // kReasonWithinLimit, kReasonLimitBelowEstimate, kReasonNoMemoryLimit, kReasonNotEstimated
  std::string message;      // for the condition (and the event when !fits)
  int64_t needed_bytes = 0; // the estimate's host bytes for the pod's ranks; 0 when not estimated
  int64_t limit_bytes = -1; // spec.resources.limits.memory; -1 when unset
};

// Call on a spec that passed validate() (a malformed limit is a SpecError
// there and reads as unset here).
MemoryCheck check_memory(const TrainingJobSpec& spec);

// Writes the MemoryEstimate condition from `check`; returns the message of a
// Warning event to record when the warning is new (the condition was not
// False with this message before), nullopt otherwise, so a re-reconcile
// records nothing.
std::optional<std::string> apply_memory_check(TrainingJobStatus& status, const MemoryCheck& check, long generation,
                                              const std::string& now);

}  // namespace weft::tj
