#include "trainingjob/memory_policy.h"

#include "kube/quantity.h"
#include "trainingjob/constants.h"
#include "weft_contract.h"

namespace weft::tj {
namespace {

constexpr const char* kLimitField = "spec.resources.limits.memory";

// spec.resources.limits.memory: its text and bytes; nullopt when unset or
// not a quantity (validate() reports that).
struct Limit {
  std::string text;
  int64_t bytes = 0;
};
std::optional<Limit> memory_limit(const TrainingJobSpec& spec) {
  if (!spec.resources.is_object()) return std::nullopt;
  auto limits = spec.resources.find("limits");
  if (limits == spec.resources.end() || !limits->is_object()) return std::nullopt;
  auto mem = limits->find("memory");
  if (mem == limits->end() || mem->is_null()) return std::nullopt;
  const kube::Quantity q = kube::parse_quantity(*mem);
  if (!q.ok || q.value < 0) return std::nullopt;
  return Limit{mem->is_string() ? mem->get<std::string>() : mem->dump(), q.ceil_int64()};
}

}  // namespace

std::optional<WorkerConfig> estimated_config(const TrainingJobSpec& spec, std::string* why_not) {
  const WorkerRead& read = spec.worker_read;
  if (!read.config) {
    if (why_not) *why_not = read.error_field + ": " + read.error;
    return std::nullopt;
  }
  if (!read.shape_known) {
    if (why_not)
      *why_not = "spec.worker.init_from is set: the model's shape comes from " + read.config->init_from +
                 "/config.json inside the pod, which the operator does not read";
    return std::nullopt;
  }
  return read.config;
}

MemoryCheck check_memory(const TrainingJobSpec& spec) {
  MemoryCheck c;
  const std::optional<Limit> limit = memory_limit(spec);
  if (limit) c.limit_bytes = limit->bytes;
  std::string why_not;
  const std::optional<WorkerConfig> cfg = estimated_config(spec, &why_not);
  if (!cfg) {
    c.reason = kReasonNotEstimated;
    c.message = "not estimated: " + why_not + "; the worker checks its memory when it starts";
    return c;
  }
  const MemoryEstimate e = estimate_memory(*cfg, spec.world_size());
  // The pod's limit covers all its ranks (the worker divides it by LOCAL_WORLD_SIZE too).
  const int procs = spec.ranks_per_pod();
  c.needed_bytes = e.host_bytes() * procs;
  // As the worker says it; on cuda the host part first, then the whole estimate.
  std::string needs =
      e.on_device ? "a rank needs about " + format_bytes(e.host_bytes()) +
                        " of host memory besides its GPU memory (estimate " + e.describe() + ")"
                  : "a rank needs about " + e.describe() + " of host memory";
  if (procs > 1)
    needs += ", a pod of " + std::to_string(procs) + " ranks (spec.procsPerPod) about " +
             format_bytes(c.needed_bytes);
  if (!limit) {
    c.reason = kReasonNoMemoryLimit;
    c.message = needs + "; " + kLimitField + " is not set, so there is no limit to compare with";
    return c;
  }
  const std::string has = std::string(kLimitField) + " is " + limit->text + " (" +
                          format_bytes(limit->bytes) + ")";
  if (c.needed_bytes <= limit->bytes) {
    c.reason = kReasonWithinLimit;
    c.message = needs + "; " + has;
    return c;
  }
  c.fits = false;
  c.reason = kReasonLimitBelowEstimate;
  const auto env = literal_env(spec.pod_template);
  const auto skip = env.find(contract::kEnvSkipMemoryCheck);
  const bool skipped = skip != env.end() && !skip->second.empty() && skip->second != "0";
  const int64_t mib = int64_t{1} << 20;
  c.message =
      needs + ", but " + has +
      (skipped ? ": WEFT_SKIP_MEMORY_CHECK is set, so the worker starts anyway and is likely to be "
                 "killed for memory (OOMKilled)"
               : ": the worker will refuse to start and exit 1") +
      ". Raise " + kLimitField + " to at least " +
      std::to_string((c.needed_bytes + mib - 1) / mib) + "Mi. " +
      memory_fix_hint("spec.worker.") + ".";
  return c;
}

std::optional<std::string> apply_memory_check(TrainingJobStatus& status, const MemoryCheck& check,
                                              long generation, const std::string& now) {
  const Condition* before = status.condition(kCondMemoryEstimate);
  const bool new_warning =
      !check.fits && !(before && before->status == "False" && before->message == check.message);
  status.set_condition(kCondMemoryEstimate, check.fits, check.reason, check.message, generation,
                       now);
  if (new_warning) return check.message;
  return std::nullopt;
}

}  // namespace weft::tj
