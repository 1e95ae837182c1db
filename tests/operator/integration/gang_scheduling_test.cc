// Gang scheduling against the real API server with the PodGroup CRDs of
// scheduler-plugins and Volcano installed as their projects publish them
// (tests/kube/testdata, installed by the `kube` fixture). No gang scheduler
// runs: the test plays it, writing the PodScheduled verdicts a scheduler
// writes, and plays the kubelet as the other integration tests do.
#include <set>

#include "integration/harness.h"
#include "trainingjob/builders.h"
#include "trainingjob/constants.h"

namespace weft::it {
namespace {

class GangScheduling : public OperatorTest {
 protected:
  GangScheduling() : OperatorTest("it-gang") {}
  std::optional<Json> podgroup(const kube::Resource& r, const std::string& name) {
    auto res = admin_api().get(r, ns(), name);
    if (!res) return std::nullopt;
    return *res;
  }
  bool gang_condition_is(const std::string& job, const std::string& status, const std::string& reason) {
    const Json c = condition(job, tj::kCondGangScheduled);
    return c.value("status", "") == status && c.value("reason", "") == reason;
  }
  std::set<std::string> attempts(const std::string& job) {
    std::set<std::string> out;
    for (const auto& p : job_pods(ns(), job, true)) out.insert(p["metadata"]["labels"].value(tj::kLabelAttempt, "?"));
    return out;
  }

};

// scheduler-plugins: the PodGroup comes first and holds minMember = the pods;
// the pods name it and wait for its scheduler; the job stays Pending, the
// condition saying why, until every pod is placed; a change of replicas
// moves minMember (and a dropped timeout leaves) with the relaunched gang; the PodGroup goes with the job's end.
TEST_F(GangScheduling, SchedulerPluginsGangIsPendingUntilPlacedThenRuns) {
  Json job = job_json("gang", 3);
  job["spec"]["scheduling"] = {{"gang", "podgroup"}, {"scheduleTimeoutSeconds", 90}};
  job["spec"]["resources"] = {{"requests", {{"cpu", "250m"}, {"memory", "64Mi"}}}};
  create(job);
  ASSERT_TRUE(eventually([&] { return job_pods(ns(), "gang").size() == 3; }));
  const std::string uid = (*get_job(ns(), "gang"))["metadata"]["uid"];
  auto pg = podgroup(kube::kPodGroups, "gang");
  ASSERT_TRUE(pg) << "no scheduling.x-k8s.io PodGroup";
  EXPECT_EQ((*pg)["spec"]["minMember"], 3);
  EXPECT_EQ((*pg)["spec"]["scheduleTimeoutSeconds"], 90);
  EXPECT_EQ((*pg)["spec"]["minResources"], Json({{"cpu", "750m"}, {"memory", std::to_string(3 * (64LL << 20))}}));
  EXPECT_EQ((*pg)["metadata"]["ownerReferences"][0]["uid"], uid);
  for (const auto& pod : job_pods(ns(), "gang")) {
    EXPECT_EQ(pod["spec"]["schedulerName"], tj::kSchedulerPluginsScheduler);
    EXPECT_EQ(pod["metadata"]["labels"][tj::kLabelPodGroup], "gang");
  }
  ASSERT_TRUE(eventually([&] { return gang_condition_is("gang", "False", tj::kReasonWaitingForScheduler); }))
      << status_of(ns(), "gang").dump();
  EXPECT_EQ(phase_of(ns(), "gang"), tj::kPhasePending);

  // The scheduler cannot place the gang: the job says why and stays Pending.
  const std::string why = "0/2 nodes are available: 2 Insufficient cpu.";
  unschedulable("gang-1", why);
  ASSERT_TRUE(eventually([&] { return gang_condition_is("gang", "False", tj::kReasonUnschedulable); }))
      << status_of(ns(), "gang").dump();
  EXPECT_EQ(condition("gang", tj::kCondGangScheduled)["message"],
            "scheduler-plugins-scheduler cannot place the gang: 1 of 3 pods unschedulable, 0 placed; pod gang-1: " +
                why);
  EXPECT_EQ(phase_of(ns(), "gang"), tj::kPhasePending);

  // Fewer pods: a new gang, and the PodGroup asks for what the new gang is.
  // Fewer pods and no timeout: a new gang, and the PodGroup asks for what
  // the new gang is.
  patch_spec("gang", {{"replicas", 2}, {"scheduling", {{"scheduleTimeoutSeconds", nullptr}}}});
  ASSERT_TRUE(eventually([&] {
    auto pods = job_pods(ns(), "gang", true);
    auto g = podgroup(kube::kPodGroups, "gang");
    return pods.size() == 2 && attempts("gang") == std::set<std::string>{"1"} && g && (*g)["spec"]["minMember"] == 2;
  })) << job_pods(ns(), "gang", true).size() << " pods; " << podgroup(kube::kPodGroups, "gang")->dump();
  EXPECT_EQ((*podgroup(kube::kPodGroups, "gang"))["spec"]["minResources"]["cpu"], "500m");
  EXPECT_FALSE((*podgroup(kube::kPodGroups, "gang"))["spec"].contains("scheduleTimeoutSeconds"));

  // Placed and training: Running, and the condition says so.
  set_all_running(ns(), "gang");
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "gang") == tj::kPhaseRunning; })) << status_of(ns(), "gang").dump();
  ASSERT_TRUE(eventually([&] { return gang_condition_is("gang", "True", tj::kReasonGangPlaced); }));

  for (const auto& p : job_pods(ns(), "gang")) set_pod_phase(ns(), p["metadata"]["name"], "Succeeded", 0);
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "gang") == tj::kPhaseSucceeded; }));
  ASSERT_TRUE(eventually([&] { return !podgroup(kube::kPodGroups, "gang"); })) << "the PodGroup outlived the job's end";
}

// Volcano: its PodGroup API, queue and group annotation; a suspended job
// gives its place in the queue back (no PodGroup) and takes it again on
// resume; deleting the job removes the PodGroup with it.
TEST_F(GangScheduling, VolcanoGangLeavesItsQueueWhileSuspended) {
  Json job = job_json("vc", 2);
  job["spec"]["scheduling"] = {{"gang", "podgroup"}, {"provider", "volcano"}, {"queue", "research"}};
  create(job);
  ASSERT_TRUE(eventually([&] { return job_pods(ns(), "vc").size() == 2; }));
  auto pg = podgroup(kube::kVolcanoPodGroups, "vc");
  ASSERT_TRUE(pg) << "no scheduling.volcano.sh PodGroup";
  EXPECT_EQ((*pg)["spec"]["minMember"], 2);
  EXPECT_EQ((*pg)["spec"]["queue"], "research");
  EXPECT_FALSE(podgroup(kube::kPodGroups, "vc")) << "one PodGroup, of the provider asked for";
  for (const auto& pod : job_pods(ns(), "vc")) {
    EXPECT_EQ(pod["spec"]["schedulerName"], tj::kVolcanoScheduler);
    EXPECT_EQ(pod["metadata"]["annotations"][tj::kAnnotationVolcanoGroup], "vc");
  }
  patch_spec("vc", {{"suspend", true}});
  ASSERT_TRUE(eventually([&] {
    return phase_of(ns(), "vc") == tj::kPhaseSuspended && job_pods(ns(), "vc", true).empty() &&
           !podgroup(kube::kVolcanoPodGroups, "vc");
  })) << status_of(ns(), "vc").dump();
  patch_spec("vc", {{"suspend", false}});
  ASSERT_TRUE(eventually([&] {
    return job_pods(ns(), "vc", true).size() == 2 && attempts("vc") == std::set<std::string>{"1"} &&
           podgroup(kube::kVolcanoPodGroups, "vc");
  }));
  ASSERT_TRUE(admin_api().remove(kube::kTrainingJobs, ns(), "vc", kube::Propagation::Background).ok());
  ASSERT_TRUE(eventually([&] { return !podgroup(kube::kVolcanoPodGroups, "vc"); }, 120s))
      << "the PodGroup survived its owner";
}

}  // namespace
}  // namespace weft::it
