// Elastic gangs against the real API server: a 4-pod job with two pods that
// cannot be placed shrinks to 2 pods once placementTimeoutSeconds pass (a new
// attempt whose pods are told the planned world size), grows back to 4 after
// growCheckSeconds of training, and reports its size in status, conditions,
// events and metrics. The e2e test (tests/e2e/elastic.sh) does the same with
// a real scheduler, nodes and ranks.
#include <algorithm>

#include "integration/harness.h"
#include "trainingjob/constants.h"

namespace weft::it {
namespace {

class Elastic : public OperatorTest {
 protected:
  Elastic() : OperatorTest("it-elastic") {}

  std::string size_of(const std::string& job) {
    Json st = status_of(ns(), job);
    return st.contains("elastic") ? st["elastic"].value("size", "") : "(no status.elastic)";
  }
  std::vector<std::string> event_reasons(const std::string& job) {
    std::vector<std::string> out;
    auto list = admin_api().list(kube::kEvents, ns());
    if (list)
      for (const auto& e : list->items)
        if (e["involvedObject"].value("name", "") == job) out.push_back(e.value("reason", ""));
    return out;
  }
};

TEST_F(Elastic, ShrinksToThePlacedPodsAndGrowsBack) {
  Json job = job_json("el", 4);
  // The test writes the scheduler's verdicts by hand: the placement timeout
  // leaves it 5 s to do so before the operator may act on the pods (at 1 s
  // a slow host saw the operator delete el-2 and el-3 before the test
  // patched them: "pods \"el-2\" not found").
  job["spec"]["elastic"] = {{"minReplicas", 2}, {"placementTimeoutSeconds", 5}, {"growCheckSeconds", 3}};
  create(job);
  ASSERT_TRUE(eventually([&] { return gang_is("el", 4, 0); }));
  // The launch writes status after it creates the pods.
  EXPECT_TRUE(eventually([&] { return size_of("el") == "4/4"; })) << size_of("el");
  // Two pods placed (their ranks wait for the others), two not.
  set_pod_phase(ns(), "el-0", "Running", std::nullopt, false);
  set_pod_phase(ns(), "el-1", "Running", std::nullopt, false);
  unschedulable("el-2", "0/1 nodes are available: 1 Insufficient cpu.");
  unschedulable("el-3", "0/1 nodes are available: 1 Insufficient cpu.");

  ASSERT_TRUE(eventually([&] { return gang_is("el", 2, 1); }, 20s)) << status_of(ns(), "el").dump();
  Json st = status_of(ns(), "el");
  EXPECT_EQ(st["elastic"]["currentReplicas"], 2);
  EXPECT_EQ(st["elastic"]["plannedReplicas"], 4);
  EXPECT_EQ(st["elastic"]["size"], "2/4");
  EXPECT_EQ(st["elastic"]["resizes"], 1);
  EXPECT_EQ(st["ranks"], 2);
  EXPECT_EQ(st["restarts"], 0) << "a resize is not a restart";
  Json full = condition("el", tj::kCondFullSize);
  EXPECT_EQ(full["status"], "False");
  EXPECT_EQ(full["reason"], tj::kReasonShrunk);
  EXPECT_NE(full.value("message", "").find("2 of 4 pods placed after 5s"), std::string::npos) << full.dump();
  for (const auto& p : pods_of_attempt("el", 1)) {
    EXPECT_EQ(env_value(p, "WORLD_SIZE"), "2");
    EXPECT_EQ(env_value(p, "WEFT_PLANNED_WORLD_SIZE"), "4");
  }

  // The 2-pod gang trains; after growCheckSeconds it tries 4 pods again.
  set_all_running(ns(), "el");
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "el") == tj::kPhaseRunning; }));
  ASSERT_TRUE(eventually([&] { return gang_is("el", 4, 2); }, 20s)) << status_of(ns(), "el").dump();
  st = status_of(ns(), "el");
  EXPECT_EQ(st["elastic"]["size"], "4/4");
  EXPECT_EQ(st["elastic"]["resizes"], 2);
  EXPECT_EQ(condition("el", tj::kCondFullSize)["reason"], tj::kReasonGrowing);
  for (const auto& p : pods_of_attempt("el", 2)) {
    EXPECT_EQ(env_value(p, "WORLD_SIZE"), "4");
    EXPECT_EQ(env_value(p, "WEFT_PLANNED_WORLD_SIZE"), "");
  }
  set_all_running(ns(), "el");
  ASSERT_TRUE(eventually([&] { return condition("el", tj::kCondFullSize).value("status", "") == "True"; }));
  EXPECT_EQ(condition("el", tj::kCondFullSize)["reason"], tj::kReasonPlannedSize);
  ASSERT_TRUE(eventually([&] {
    const auto r = event_reasons("el");
    return std::count(r.begin(), r.end(), tj::kReasonShrunk) == 1 &&
           std::count(r.begin(), r.end(), tj::kReasonGrowing) == 1 &&
           std::count(r.begin(), r.end(), tj::kReasonPlannedSize) == 1;
  })) << ::testing::PrintToString(event_reasons("el"));
  const std::string metrics = op_->metrics_text();
  EXPECT_NE(metrics.find("weft_operator_elastic_resizes_total{direction=\"shrink\"} 1"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("weft_operator_elastic_resizes_total{direction=\"grow\"} 1"), std::string::npos) << metrics;
}

// Not even minReplicas placed: the gang keeps waiting (Pending) and says so.
TEST_F(Elastic, AMinimumThatCannotBePlacedWaitsAndSaysSo) {
  Json job = job_json("held", 4);
  job["spec"]["elastic"] = {{"minReplicas", 2}, {"placementTimeoutSeconds", 1}};
  create(job);
  ASSERT_TRUE(eventually([&] { return gang_is("held", 4, 0); }));
  set_pod_phase(ns(), "held-0", "Running", std::nullopt, false);
  for (const char* p : {"held-1", "held-2", "held-3"}) unschedulable(p, "0/1 nodes are available: 1 Insufficient cpu.");
  // The condition follows the pods the operator has seen: a reconcile at the
  // deadline whose cache lags behind held-0's start says "0 of 4" first.
  ASSERT_TRUE(eventually([&] {
    const Json c = condition("held", tj::kCondFullSize);
    return c.value("reason", "") == tj::kReasonMinimumUnplaced &&
           c.value("message", "").find("1 of 4 pods placed after 1s") != std::string::npos;
  })) << status_of(ns(), "held").dump();
  EXPECT_EQ(phase_of(ns(), "held"), tj::kPhasePending);
  EXPECT_TRUE(gang_is("held", 4, 0)) << "the gang must stay as it is";
  EXPECT_EQ(status_of(ns(), "held")["elastic"]["resizes"], 0);
}

}  // namespace
}  // namespace weft::it
