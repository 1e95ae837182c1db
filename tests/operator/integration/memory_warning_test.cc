// The memory warning on the user's path: a TrainingJob applied to the real API
// server with a pod memory limit below what its model needs gets the
// MemoryEstimate condition (False, LimitBelowEstimate) and a Warning event
// before any rank runs, and its pods are still created (the worker's own check
// decides); a roomy limit gets no warning; a limit that is not a quantity is
// refused as InvalidSpec naming the field.
#include "integration/harness.h"
#include "trainingjob/constants.h"

namespace weft::it {
namespace {

std::optional<Json> condition(const std::string& ns, const std::string& job,
                              const std::string& type) {
  const Json st = status_of(ns, job);
  if (!st.contains("conditions")) return std::nullopt;
  for (const auto& c : st["conditions"])
    if (c.value("type", "") == type) return c;
  return std::nullopt;
}

std::vector<Json> events_of(const std::string& ns, const std::string& job,
                            const std::string& reason) {
  std::vector<Json> out;
  auto events = admin_api().list(kube::kEvents, ns);
  if (!events.ok()) return out;
  for (const auto& e : events->items)
    if (e["involvedObject"].value("name", "") == job && e.value("reason", "") == reason)
      out.push_back(e);
  return out;
}

TEST(MemoryWarning, ALimitBelowTheEstimateWarnsBeforeTheRanksRunAndRefusesNothing) {
  TestNamespace ns("it-memory");
  InProcessOperator op(ns.name());
  // A 512-wide, 8-layer model needs far more than 64Mi per rank.
  Json small = job_json("small", 2);
  small["spec"]["resources"] = {{"limits", {{"memory", "64Mi"}}}};
  small["spec"]["worker"]["model"] = {
      {"d_model", 512}, {"n_layers", 8}, {"n_heads", 8}, {"n_kv_heads", 8}};
  Json roomy = job_json("roomy", 2);
  roomy["spec"]["resources"] = {{"limits", {{"memory", "8Gi"}}}};
  Json typo = job_json("typo", 2);
  typo["spec"]["resources"] = {{"limits", {{"memory", "64MB"}}}};
  for (const Json& j : {small, roomy, typo})
    ASSERT_TRUE(admin_api().create(kube::kTrainingJobs, ns.name(), j).ok());

  ASSERT_TRUE(eventually([&] {
    return condition(ns.name(), "small", tj::kCondMemoryEstimate).has_value();
  })) << status_of(ns.name(), "small").dump();
  const Json c = *condition(ns.name(), "small", tj::kCondMemoryEstimate);
  EXPECT_EQ(c["status"], "False");
  EXPECT_EQ(c["reason"], tj::kReasonLimitBelowEstimate);
  const std::string msg = c.value("message", "");
  EXPECT_NE(msg.find("a rank needs about"), std::string::npos) << msg;
  EXPECT_NE(msg.find("spec.resources.limits.memory is 64Mi"), std::string::npos) << msg;
  EXPECT_NE(msg.find("spec.worker.model.d_model"), std::string::npos) << msg;
  ASSERT_TRUE(eventually(
      [&] { return !events_of(ns.name(), "small", tj::kReasonLimitBelowEstimate).empty(); }));
  const Json ev = events_of(ns.name(), "small", tj::kReasonLimitBelowEstimate)[0];
  EXPECT_EQ(ev["type"], "Warning");
  EXPECT_EQ(ev["message"], msg);
  // A warning, not a refusal: the gang is created as usual.
  ASSERT_TRUE(eventually([&] { return job_pods(ns.name(), "small").size() == 2; }));
  EXPECT_NE(phase_of(ns.name(), "small"), tj::kPhaseFailed);

  ASSERT_TRUE(eventually(
      [&] { return condition(ns.name(), "roomy", tj::kCondMemoryEstimate).has_value(); }));
  const Json r = *condition(ns.name(), "roomy", tj::kCondMemoryEstimate);
  EXPECT_EQ(r["status"], "True");
  EXPECT_EQ(r["reason"], tj::kReasonWithinLimit);
  ASSERT_TRUE(eventually([&] { return job_pods(ns.name(), "roomy").size() == 2; }));
  EXPECT_TRUE(events_of(ns.name(), "roomy", tj::kReasonLimitBelowEstimate).empty());

  ASSERT_TRUE(eventually([&] { return phase_of(ns.name(), "typo") == tj::kPhaseFailed; }));
  const auto failed = condition(ns.name(), "typo", tj::kCondFailed);
  ASSERT_TRUE(failed);
  EXPECT_EQ((*failed)["reason"], tj::kReasonInvalidSpec);
  EXPECT_NE((*failed)["message"].get<std::string>().find(
                "spec.resources.limits.memory: '64MB' is not a quantity"),
            std::string::npos)
      << failed->dump();
  EXPECT_TRUE(job_pods(ns.name(), "typo", true).empty());

  // Reconciling again records no second warning for the same spec.
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(events_of(ns.name(), "small", tj::kReasonLimitBelowEstimate).size(), 1u);
}

}  // namespace
}  // namespace weft::it
