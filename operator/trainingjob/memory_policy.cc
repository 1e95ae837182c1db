#include "trainingjob/memory_policy.h"

#include <climits>
#include <initializer_list>

#include "kube/quantity.h"
#include "trainingjob/constants.h"
#include "weft_contract.h"
#include "weft_presets.h"

namespace weft::tj {
namespace {

constexpr const char* kLimitField = "spec.resources.limits.memory";

// The preset as far as the estimate reads it (contract/weft_presets.h, the
// table the worker's preset() applies); the parallel section's defaults are
// the worker's.
std::optional<contract::MemoryEstimateInputs> preset_inputs(const std::string& name) {
  const contract::Preset* p = contract::find_preset(name);
  if (!p) return std::nullopt;
  contract::MemoryEstimateInputs in;
  in.device = p->device;
  in.dtype = contract::WorkingDtype::Auto;
  in.vocab_size = p->vocab_size;
  in.d_model = p->d_model;
  in.n_layers = p->n_layers;
  in.n_heads = p->n_heads;
  in.n_kv_heads = p->n_kv_heads;
  in.ffn = p->ffn_hidden;  // ffn_hidden until resolved below
  in.tie_embeddings = p->tie_embeddings;
  in.micro_batch = p->micro_batch;
  in.seq_len = p->seq_len;
  return in;
}

// Reads spec.worker fields the way the worker's parser types them: a field
// that is absent keeps its value; one of the wrong type makes the whole read
// fail with its path (the worker refuses that config at start).
struct WorkerReader {
  const Json& worker;
  std::string error;

  const Json* find(std::initializer_list<const char*> path) {
    const Json* node = &worker;
    std::string at = "spec.worker";
    for (const char* key : path) {
      if (!node->is_object()) {
        if (error.empty()) error = at + " is not a mapping";
        return nullptr;
      }
      auto it = node->find(key);
      if (it == node->end() || it->is_null()) return nullptr;
      node = &*it;
      at += std::string(".") + key;
    }
    return node;
  }
  void wrong(std::initializer_list<const char*> path, const char* expected) {
    if (!error.empty()) return;
    error = "spec.worker";
    for (const char* key : path) error += std::string(".") + key;
    error += std::string(" is not ") + expected;
  }
  void read(std::initializer_list<const char*> path, int& out) {
    if (const Json* v = find(path)) {
      if (v->is_number_integer() && v->get<int64_t>() >= INT_MIN && v->get<int64_t>() <= INT_MAX)
        out = v->get<int>();
      else
        wrong(path, "an integer");
    }
  }
  void read(std::initializer_list<const char*> path, bool& out) {
    if (const Json* v = find(path)) {
      if (v->is_boolean())
        out = v->get<bool>();
      else
        wrong(path, "a boolean");
    }
  }
  // A number > 0 or `auto` (held as 0), like the worker's auto fields.
  void read_auto(std::initializer_list<const char*> path, double& out) {
    if (const Json* v = find(path)) {
      if (v->is_string() && v->get<std::string>() == "auto")
        out = 0;
      else if (v->is_number() && v->get<double>() > 0)
        out = v->get<double>();
      else
        wrong(path, "auto or a number > 0");
    }
  }
  void read(std::initializer_list<const char*> path, std::string& out) {
    if (const Json* v = find(path)) {
      if (v->is_string())
        out = v->get<std::string>();
      else
        wrong(path, "a string");
    }
  }
  // A mode by its spelling (contract/weft_modes.h), as the worker parses it.
  template <class E>
    requires contract::kIsMode<E>
  void read(std::initializer_list<const char*> path, E& out) {
    if (const Json* v = find(path)) {
      const std::optional<E> mode = v->is_string() ? contract::parse_mode<E>(v->get<std::string>()) : std::nullopt;
      if (mode)
        out = *mode;
      else
        wrong(path, ("one of " + contract::mode_choices<E>()).c_str());
    }
  }
};

// The literal value spec.template.env gives `name`; "" when unset, empty or
// set from a reference the operator cannot read (the worker treats unset and
// empty alike).
std::string template_env(const TrainingJobSpec& spec, const char* name) {
  auto env = spec.pod_template.find("env");
  if (env == spec.pod_template.end() || !env->is_array()) return "";
  std::string value;
  for (const auto& e : *env)
    if (e.is_object() && e.value("name", "") == name && e.contains("value") &&
        e["value"].is_string())
      value = e["value"].get<std::string>();  // the last entry wins, as in a container's env
  return value;
}

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

std::optional<contract::MemoryEstimateInputs> memory_estimate_inputs(const TrainingJobSpec& spec,
                                                                     std::string* why_not) {
  auto fail = [&](const std::string& why) -> std::optional<contract::MemoryEstimateInputs> {
    if (why_not) *why_not = why;
    return std::nullopt;
  };
  WorkerReader r{spec.worker, ""};
  std::string preset = "tiny";
  r.read({"preset"}, preset);
  std::string init_from;
  r.read({"init_from"}, init_from);
  if (!r.error.empty()) return fail(r.error);
  if (!init_from.empty())
    return fail("spec.worker.init_from is set: the model's shape comes from " + init_from +
                "/config.json inside the pod, which the operator does not read");
  auto base = preset_inputs(preset);
  if (!base)
    return fail("spec.worker.preset '" + preset + "' is not a preset the operator knows (" +
                std::string(contract::kPresetNames) + ")");
  contract::MemoryEstimateInputs in = *base;
  int ffn_hidden = in.ffn;
  r.read({"device"}, in.device);
  r.read({"model", "vocab_size"}, in.vocab_size);
  r.read({"model", "d_model"}, in.d_model);
  r.read({"model", "n_layers"}, in.n_layers);
  r.read({"model", "n_heads"}, in.n_heads);
  r.read({"model", "n_kv_heads"}, in.n_kv_heads);
  r.read({"model", "head_dim"}, in.head_dim);
  r.read({"model", "ffn_hidden"}, ffn_hidden);
  r.read({"model", "tie_embeddings"}, in.tie_embeddings);
  r.read({"train", "micro_batch"}, in.micro_batch);
  r.read({"train", "seq_len"}, in.seq_len);
  r.read({"train", "dtype"}, in.dtype);
  r.read_auto({"train", "logits_chunk_mb"}, in.logits_chunk_mb);
  r.read({"train", "recompute"}, in.recompute);
  r.read({"parallel", "strategy"}, in.strategy);
  r.read({"parallel", "sp"}, in.sp);
  r.read({"parallel", "wp"}, in.wp);
  r.read({"parallel", "bf16_wire"}, in.bf16_wire);
  r.read({"parallel", "zero", "stage"}, in.zero_stage);
  r.read({"parallel", "isp", "recompute_blocks"}, in.recompute_blocks);
  r.read({"parallel", "isp", "wdp_strategy"}, in.wdp_strategy);
  if (!r.error.empty()) return fail(r.error);
  // The pod's WEFT_DEVICE overrides `device` (worker/config/config.h, apply_env_overrides).
  if (const std::string dev = template_env(spec, contract::kEnvDevice); !dev.empty()) {
    const std::optional<contract::ComputeDevice> device = contract::parse_mode<contract::ComputeDevice>(dev);
    // The worker refuses it at start (exit 1, naming the variable); there is nothing to estimate.
    if (!device)
      return fail(std::string("spec.template.env ") + contract::kEnvDevice + ": " +
                  contract::not_a_mode<contract::ComputeDevice>(dev));
    in.device = *device;
  }
  in.ffn = contract::ffn_width(ffn_hidden, in.d_model);
  in.world = spec.world_size();
  return in;
}

MemoryCheck check_memory(const TrainingJobSpec& spec) {
  MemoryCheck c;
  const std::optional<Limit> limit = memory_limit(spec);
  if (limit) c.limit_bytes = limit->bytes;
  std::string why_not;
  const auto in = memory_estimate_inputs(spec, &why_not);
  if (!in) {
    c.reason = kReasonNotEstimated;
    c.message = "not estimated: " + why_not + "; the worker checks its memory when it starts";
    return c;
  }
  const contract::MemoryEstimate e = contract::estimate_memory(*in);
  // The pod's limit covers all its ranks (the worker divides it by LOCAL_WORLD_SIZE too).
  const int procs = spec.ranks_per_pod();
  c.needed_bytes = e.host_bytes() * procs;
  // As the worker says it; on cuda the host part first, then the whole estimate.
  std::string needs =
      e.on_device ? "a rank needs about " + contract::format_bytes(e.host_bytes()) +
                        " of host memory besides its GPU memory (estimate " + e.describe() + ")"
                  : "a rank needs about " + e.describe() + " of host memory";
  if (procs > 1)
    needs += ", a pod of " + std::to_string(procs) + " ranks (spec.procsPerPod) about " +
             contract::format_bytes(c.needed_bytes);
  if (!limit) {
    c.reason = kReasonNoMemoryLimit;
    c.message = needs + "; " + kLimitField + " is not set, so there is no limit to compare with";
    return c;
  }
  const std::string has = std::string(kLimitField) + " is " + limit->text + " (" +
                          contract::format_bytes(limit->bytes) + ")";
  if (c.needed_bytes <= limit->bytes) {
    c.reason = kReasonWithinLimit;
    c.message = needs + "; " + has;
    return c;
  }
  c.fits = false;
  c.reason = kReasonLimitBelowEstimate;
  const std::string skip = template_env(spec, contract::kEnvSkipMemoryCheck);
  const bool skipped = !skip.empty() && skip != "0";
  const int64_t mib = int64_t{1} << 20;
  c.message =
      needs + ", but " + has +
      (skipped ? ": WEFT_SKIP_MEMORY_CHECK is set, so the worker starts anyway and is likely to be "
                 "killed for memory (OOMKilled)"
               : ": the worker will refuse to start and exit 1") +
      ". Raise " + kLimitField + " to at least " +
      std::to_string((c.needed_bytes + mib - 1) / mib) + "Mi. " +
      contract::memory_fix_hint("spec.worker.") + ".";
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
