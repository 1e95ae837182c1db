// The operator's memory policy, table-driven: a limit below the worker's
// estimate warns (condition False, a Warning event once), a limit at or above
// it, no limit, and a config the operator cannot read do not; a malformed
// quantity is a validation error naming the field. The expected bytes come
// from the worker's own estimate, not from this file.
#include "trainingjob/memory_policy.h"

#include <gtest/gtest.h>

#include "config/config.h"
#include "train/memory_estimate.h"
#include "trainingjob/constants.h"
#include "trainingjob/types.h"

namespace weft::tj {
namespace {

// A job of `replicas` ranks with spec.worker `worker` and, when given,
// spec.resources.limits.memory `limit`.
TrainingJobSpec job(const Json& worker, int replicas, const Json& limit = nullptr,
                    const Json& env = nullptr) {
  Json spec = {{"replicas", replicas}, {"image", "weft:test"}, {"worker", worker}};
  if (!limit.is_null()) spec["resources"] = {{"limits", {{"memory", limit}}}};
  if (!env.is_null()) spec["template"] = {{"env", env}};
  std::vector<SpecError> errors;
  TrainingJobSpec s = parse_spec(spec, &errors);
  for (auto& e : validate(s)) errors.push_back(e);
  EXPECT_TRUE(errors.empty()) << describe(errors);
  return s;
}

// The worker's host bytes for the same config.
int64_t worker_needs(const std::string& yaml, int world,
                     const std::map<std::string, std::string>& env = {}) {
  WorkerConfig cfg = parse_config(yaml);
  apply_env_overrides(cfg, env);
  return estimate_memory(resolved(cfg), world).host_bytes();
}

TEST(MemoryPolicy, WarnsOnlyWhenTheLimitIsBelowTheEstimate) {
  const int64_t tiny = worker_needs("preset: tiny", 2);
  const int64_t mi = int64_t{1} << 20;
  ASSERT_GT(tiny, 64 * mi);  // the demo's model does not fit 64Mi
  struct Case {
    const char* name;
    Json limit;
    bool fits;
    const char* reason;
  };
  const std::vector<Case> cases = {
      {"64Mi", "64Mi", false, kReasonLimitBelowEstimate},
      {"one byte short", tiny - 1, false, kReasonLimitBelowEstimate},
      {"exactly the estimate", tiny, true, kReasonWithinLimit},
      {"as a decimal exponent", std::to_string(tiny) + "e0", true, kReasonWithinLimit},
      {"1Gi", "1Gi", true, kReasonWithinLimit},
      {"1G", "1G", true, kReasonWithinLimit},
      {"no limit", nullptr, true, kReasonNoMemoryLimit},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const MemoryCheck m = check_memory(job({{"preset", "tiny"}}, 2, c.limit));
    EXPECT_EQ(m.fits, c.fits);
    EXPECT_EQ(m.reason, c.reason);
    EXPECT_EQ(m.needed_bytes, tiny);
    EXPECT_EQ(m.message.rfind("a rank needs about " + format_bytes(tiny) + " (weights ", 0), 0u)
        << m.message;
    EXPECT_NE(m.message.find(") of host memory"), std::string::npos) << m.message;
    EXPECT_EQ(m.limit_bytes >= 0, !c.limit.is_null());
  }
  // The warning names the estimate, the limit and what to change, with the
  // spec's field paths.
  const MemoryCheck m = check_memory(job({{"preset", "tiny"}}, 2, "64Mi"));
  for (const std::string& part :
       {"a rank needs about " + format_bytes(tiny),
        std::string("spec.resources.limits.memory is 64Mi (64.0 MiB)"),
        std::string("the worker will refuse to start and exit 1"),
        "to at least " + std::to_string((tiny + mi - 1) / mi) + "Mi",
        std::string("spec.worker.model.d_model"), std::string("spec.worker.train.micro_batch"),
        std::string("spec.worker.parallel.wp")})
    EXPECT_NE(m.message.find(part), std::string::npos) << part << "\n" << m.message;
}

// A pod of P ranks (spec.procsPerPod) holds P ranks of a job of pods x P
// ranks under one limit: the worker divides its cgroup's limit by
// LOCAL_WORLD_SIZE, the operator multiplies the estimate.
TEST(MemoryPolicy, APodOfSeveralRanksNeedsTheirSum) {
  const int64_t rank = worker_needs("preset: tiny\nparallel: {strategy: zero}", 4);
  Json spec = {{"replicas", 2},
               {"procsPerPod", 2},
               {"image", "weft:test"},
               {"worker", {{"preset", "tiny"}, {"parallel", {{"strategy", "zero"}}}}},
               {"resources", {{"limits", {{"memory", std::to_string(2 * rank - 1)}}}}}};
  const MemoryCheck below = check_memory(parse_spec(spec));
  EXPECT_EQ(below.needed_bytes, 2 * rank);  // at world size 4, not 2
  EXPECT_FALSE(below.fits);
  EXPECT_NE(below.message.find("a pod of 2 ranks (spec.procsPerPod) about " + format_bytes(2 * rank)),
            std::string::npos)
      << below.message;
  spec["resources"]["limits"]["memory"] = std::to_string(2 * rank);
  EXPECT_TRUE(check_memory(parse_spec(spec)).fits);
}

TEST(MemoryPolicy, ARequestAloneIsNoLimit) {
  Json spec = {
      {"replicas", 1}, {"image", "weft:test"}, {"resources", {{"requests", {{"memory", "1Mi"}}}}}};
  const MemoryCheck m = check_memory(parse_spec(spec));
  EXPECT_TRUE(m.fits);
  EXPECT_EQ(m.reason, kReasonNoMemoryLimit);
}

// On cuda the weights, gradients, optimizer state and activations are GPU
// memory: only the host part (initialisation copy, runtime) meets the limit.
TEST(MemoryPolicy, GpuJobsCompareTheHostPartOnly) {
  const MemoryEstimate e = estimate_memory(resolved(preset("gpt2-124m")), 8);
  ASSERT_TRUE(e.on_device);
  ASSERT_LT(e.host_bytes(), e.total());
  const Json limit = std::to_string(e.host_bytes());  // fits the host part, not the total
  const MemoryCheck fits = check_memory(job({{"preset", "gpt2-124m"}}, 8, limit));
  EXPECT_TRUE(fits.fits) << fits.message;
  EXPECT_EQ(fits.needed_bytes, e.host_bytes());
  EXPECT_NE(fits.message.find("besides its GPU memory"), std::string::npos) << fits.message;
  const MemoryCheck below = check_memory(job({{"preset", "gpt2-124m"}}, 8, e.host_bytes() - 1));
  EXPECT_FALSE(below.fits);
  // The pod's WEFT_DEVICE decides, as in the worker: on cpu the whole model is host memory.
  const Json cpu = Json::array({{{"name", "WEFT_DEVICE"}, {"value", "cpu"}}});
  const MemoryCheck on_cpu = check_memory(job({{"preset", "gpt2-124m"}}, 8, limit, cpu));
  EXPECT_FALSE(on_cpu.fits);
  EXPECT_EQ(on_cpu.needed_bytes, worker_needs("preset: gpt2-124m", 8, {{"WEFT_DEVICE", "cpu"}}));
  // A WEFT_DEVICE the worker refuses (exit 1, naming it) is refused with the
  // job and not estimated as either device.
  const Json spec = {{"replicas", 8},
                     {"image", "weft:test"},
                     {"worker", {{"preset", "gpt2-124m"}}},
                     {"template", {{"env", Json::array({{{"name", "WEFT_DEVICE"}, {"value", "tpu"}}})}}}};
  const TrainingJobSpec tpu = parse_spec(spec);
  const std::vector<SpecError> errors = validate(tpu);
  ASSERT_EQ(errors.size(), 1u) << describe(errors);
  EXPECT_EQ(errors[0].field, "spec.template.env");
  EXPECT_EQ(errors[0].message, "WEFT_DEVICE=tpu: device: 'tpu' is not one of cpu, cuda");
  std::string why;
  EXPECT_FALSE(estimated_config(tpu, &why));
}

TEST(MemoryPolicy, SkippingTheWorkersCheckWarnsOfTheOomKiller) {
  const Json env = Json::array({{{"name", "WEFT_SKIP_MEMORY_CHECK"}, {"value", "1"}}});
  const MemoryCheck m = check_memory(job({{"preset", "tiny"}}, 1, "1Mi", env));
  EXPECT_FALSE(m.fits);
  EXPECT_NE(m.message.find("WEFT_SKIP_MEMORY_CHECK is set"), std::string::npos) << m.message;
  EXPECT_EQ(m.message.find("refuse"), std::string::npos) << m.message;
  const Json off = Json::array({{{"name", "WEFT_SKIP_MEMORY_CHECK"}, {"value", "0"}}});
  EXPECT_NE(check_memory(job({{"preset", "tiny"}}, 1, "1Mi", off)).message.find("refuse"),
            std::string::npos);
}

TEST(MemoryPolicy, AConfigTheOperatorCannotReadIsNotEstimated) {
  const MemoryCheck m = check_memory(job({{"init_from", "/models/llama"}}, 1, "1Mi"));
  EXPECT_TRUE(m.fits);
  EXPECT_EQ(m.reason, kReasonNotEstimated);
  EXPECT_NE(m.message.find("spec.worker.init_from"), std::string::npos) << m.message;
  EXPECT_EQ(m.needed_bytes, 0);
}

TEST(MemoryPolicy, AMalformedQuantityIsAValidationErrorNamingTheField) {
  struct Case {
    Json resources;
    const char* field;
    const char* message;
  };
  const std::vector<Case> cases = {
      {{{"limits", {{"memory", "64MB"}}}},
       "spec.resources.limits.memory",
       "'64MB' is not a quantity"},
      {{{"limits", {{"memory", "1K"}}}}, "spec.resources.limits.memory", "unknown suffix 'K'"},
      {{{"limits", {{"memory", "-1Gi"}}}}, "spec.resources.limits.memory", "must not be negative"},
      {{{"requests", {{"memory", "lots"}}}},
       "spec.resources.requests.memory",
       "'lots' is not a quantity"},
      {{{"limits", {{"cpu", "2 cores"}}}},
       "spec.resources.limits.cpu",
       "'2 cores' is not a quantity"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.resources.dump());
    TrainingJobSpec s =
        parse_spec({{"replicas", 1}, {"image", "weft:test"}, {"resources", c.resources}});
    const std::vector<SpecError> errors = validate(s);
    ASSERT_EQ(errors.size(), 1u) << describe(errors);
    EXPECT_EQ(errors[0].field, c.field);
    EXPECT_NE(errors[0].message.find(c.message), std::string::npos) << errors[0].message;
  }
  // Well-formed amounts of every kind pass.
  TrainingJobSpec ok =
      parse_spec({{"replicas", 1},
                  {"image", "weft:test"},
                  {"resources",
                   {{"limits", {{"memory", "1.5Gi"}, {"cpu", "500m"}, {"nvidia.com/gpu", 1}}},
                    {"requests", {{"memory", 1073741824}, {"cpu", 2}}}}}});
  EXPECT_TRUE(validate(ok).empty()) << describe(validate(ok));
}

// The condition follows the check; the Warning event comes once per new
// warning, not on every reconcile.
TEST(MemoryPolicy, TheConditionFollowsTheCheckAndTheEventComesOnce) {
  TrainingJobStatus st;
  const MemoryCheck below = check_memory(job({{"preset", "tiny"}}, 2, "64Mi"));
  ASSERT_FALSE(below.fits);
  auto event = apply_memory_check(st, below, 1, "t1");
  ASSERT_TRUE(event);
  EXPECT_EQ(*event, below.message);
  const Condition* c = st.condition(kCondMemoryEstimate);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->status, "False");
  EXPECT_EQ(c->reason, kReasonLimitBelowEstimate);
  EXPECT_EQ(c->message, below.message);
  EXPECT_FALSE(apply_memory_check(st, below, 1, "t2")) << "a re-reconcile records no second event";
  EXPECT_EQ(st.condition(kCondMemoryEstimate)->last_transition_time, "t1");

  // A spec change that still does not fit, with another estimate: warned again.
  const MemoryCheck worse =
      check_memory(job({{"preset", "tiny"}, {"train", {{"micro_batch", 64}}}}, 2, "64Mi"));
  ASSERT_FALSE(worse.fits);
  ASSERT_NE(worse.message, below.message);
  EXPECT_TRUE(apply_memory_check(st, worse, 2, "t3"));

  // The limit raised: True, no event, and the transition time moves.
  const MemoryCheck fits = check_memory(job({{"preset", "tiny"}}, 2, "4Gi"));
  EXPECT_FALSE(apply_memory_check(st, fits, 3, "t4"));
  c = st.condition(kCondMemoryEstimate);
  EXPECT_EQ(c->status, "True");
  EXPECT_EQ(c->reason, kReasonWithinLimit);
  EXPECT_EQ(c->last_transition_time, "t4");
  EXPECT_EQ(c->observed_generation, 3);
  EXPECT_EQ(st.conditions.size(), 1u);
}

}  // namespace
}  // namespace weft::tj
