// The queue policy (trainingjob/queue_policy.h): the Workload a queued job
// gets, what the operator reads of Kueue's decisions, and the status
// patches it writes as the Workload's owner. The Workloads below have the
// shape Kueue v0.17 (kueue.x-k8s.io/v1beta2) writes; tests/e2e/kueue*.sh run
// the real Kueue.
#include <gtest/gtest.h>

#include "test_builders.h"
#include "trainingjob/builders.h"
#include "trainingjob/constants.h"
#include "trainingjob/phase_policy.h"
#include "trainingjob/queue_policy.h"
#include "trainingjob/types.h"

namespace weft::tj {
namespace {
using testing::MakeJob;

Json queued_job() {
  Json job = MakeJob("tj", "team-a").Replicas(3).Obj();
  job["metadata"]["uid"] = "0123456789-uid";
  job["metadata"]["labels"][kLabelKueueQueue] = "user-queue";
  job["spec"]["resources"] = {{"requests", {{"cpu", "1"}, {"memory", "1Gi"}}}};
  return job;
}

TrainingJobSpec spec_of(const Json& job) { return parse_spec(job["spec"], nullptr); }

Json cond(const std::string& type, const std::string& status, const std::string& reason, const std::string& msg = "",
          const std::string& when = "2026-12-07T00:00:00Z") {
  return {{"type", type}, {"status", status}, {"reason", reason}, {"message", msg}, {"lastTransitionTime", when},
          {"observedGeneration", 1}};
}

Json workload_with(Json conditions, Json admission = nullptr) {
  const Json job = queued_job();
  const TrainingJobSpec spec = spec_of(job);
  Json wl = build_workload(job, spec, build_pod(job, spec, 0, 0), "user-queue", std::nullopt);
  wl["metadata"]["resourceVersion"] = "42";
  wl["metadata"]["generation"] = 1;
  wl["status"]["conditions"] = std::move(conditions);
  if (!admission.is_null()) wl["status"]["admission"] = std::move(admission);
  return wl;
}

const Json kAdmission = {{"clusterQueue", "cq"},
                         {"podSetAssignments",
                          {{{"name", "workers"}, {"flavors", {{"cpu", "on-demand"}, {"memory", "on-demand"}}}, {"count", 3}}}}};

const Json* condition(const Json& patch, const std::string& type) {
  for (const auto& c : patch["status"]["conditions"])
    if (c["type"] == type) return &c;
  return nullptr;
}

TEST(QueuePolicy, WorkloadDescribesTheWholeGangAndIsOwnedByTheJob) {
  const Json job = queued_job();
  const TrainingJobSpec spec = spec_of(job);
  const Json pod = build_pod(job, spec, 0, 0);
  const Json wl = build_workload(job, spec, pod, "user-queue", WorkloadPriority{"high", 1000});
  EXPECT_EQ(wl["apiVersion"], "kueue.x-k8s.io/v1beta2");
  EXPECT_EQ(wl["metadata"]["name"], "trainingjob-tj-01234");
  EXPECT_EQ(wl["metadata"]["namespace"], "team-a");
  EXPECT_EQ(wl["metadata"]["labels"][kLabelKueueJobUid], "0123456789-uid");
  EXPECT_EQ(wl["metadata"]["labels"][kLabelJob], "tj");  // the operator's informer finds it by the job
  const Json& owner = wl["metadata"]["ownerReferences"][0];
  EXPECT_EQ(owner["kind"], "TrainingJob");
  EXPECT_EQ(owner["uid"], "0123456789-uid");
  EXPECT_TRUE(owner["controller"].get<bool>());
  EXPECT_EQ(wl["spec"]["queueName"], "user-queue");
  ASSERT_EQ(wl["spec"]["podSets"].size(), 1u);
  const Json& ps = wl["spec"]["podSets"][0];
  EXPECT_EQ(ps["count"], 3);  // every pod of the gang
  EXPECT_EQ(ps["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"], "1");
  // Queued through the Workload: the queue label is the job's, not the pods'.
  TrainingJobSpec via_workload = spec;
  via_workload.queued_by_workload = true;
  EXPECT_FALSE(build_pod(job, via_workload, 0, 0)["metadata"]["labels"].contains(kLabelKueueQueue));
  EXPECT_TRUE(pod["metadata"]["labels"].contains(kLabelKueueQueue));  // without --kueue it reaches the pods
  EXPECT_EQ(wl["spec"]["priority"], 1000);
  EXPECT_EQ(wl["spec"]["priorityClassRef"]["name"], "high");
  EXPECT_EQ(wl["spec"]["priorityClassRef"]["kind"], "WorkloadPriorityClass");
  EXPECT_FALSE(workload_outdated(wl, spec));
}

TEST(QueuePolicy, SeveralRanksPerPodCountPods) {
  Json job = queued_job();
  job["spec"]["replicas"] = 2;
  job["spec"]["procsPerPod"] = 4;
  const TrainingJobSpec spec = spec_of(job);
  const Json wl = build_workload(job, spec, build_pod(job, spec, 0, 0), "q", std::nullopt);
  EXPECT_EQ(wl["spec"]["podSets"][0]["count"], 2);  // Kueue counts pods; each pod's requests serve its 4 ranks
  EXPECT_FALSE(wl["spec"].contains("priority"));
}

TEST(QueuePolicy, AChangedGangOutdatesTheWorkload) {
  const Json job = queued_job();
  const Json wl = build_workload(job, spec_of(job), build_pod(job, spec_of(job), 0, 0), "q", std::nullopt);
  Json more = job;
  more["spec"]["replicas"] = 4;
  EXPECT_TRUE(workload_outdated(wl, spec_of(more)));
  Json bigger = job;
  bigger["spec"]["resources"]["requests"]["cpu"] = "2";
  EXPECT_TRUE(workload_outdated(wl, spec_of(bigger)));
  // Kueue's admission (status) does not outdate it.
  Json admitted = wl;
  admitted["status"]["admission"] = kAdmission;
  EXPECT_FALSE(workload_outdated(admitted, spec_of(job)));
}

TEST(QueuePolicy, ReadsWhatKueueDecided) {
  // Waiting: QuotaReserved False carries Kueue's reason.
  WorkloadState w = read_workload(workload_with(
      {cond("QuotaReserved", "False", "Pending",
            "couldn't assign flavors to pod set workers: insufficient unused quota for cpu in flavor on-demand, 1 more needed")}));
  EXPECT_FALSE(w.admitted);
  EXPECT_FALSE(w.evicted);
  EXPECT_NE(w.waiting.find("insufficient unused quota for cpu"), std::string::npos);

  // Admitted, with the flavors of every resource once.
  w = read_workload(workload_with({cond("QuotaReserved", "True", "QuotaReserved"), cond("Admitted", "True", "Admitted")},
                                  kAdmission));
  EXPECT_TRUE(w.admitted);
  EXPECT_TRUE(w.quota_reserved);
  EXPECT_EQ(w.cluster_queue, "cq");
  EXPECT_EQ(w.flavors, std::vector<std::string>{"on-demand"});

  // An Admitted condition without status.admission is not an admission.
  EXPECT_FALSE(read_workload(workload_with({cond("Admitted", "True", "Admitted")})).admitted);

  // Evicted while admitted: the gang must stop.
  w = read_workload(workload_with({cond("QuotaReserved", "True", "QuotaReserved"), cond("Admitted", "True", "Admitted"),
                                   cond("Evicted", "True", "Preempted", "Preempted to accommodate a workload (UID: x)")},
                                  kAdmission));
  EXPECT_TRUE(w.evicted);
  EXPECT_EQ(w.evicted_reason, "Preempted");
  EXPECT_TRUE(read_workload(workload_with({cond("Finished", "True", "Succeeded")})).finished);
}

TEST(QueuePolicy, RequeueReleasesTheQuotaTheWayKueuesJobsDo) {
  const Json wl = workload_with({cond("QuotaReserved", "True", "QuotaReserved"), cond("Admitted", "True", "Admitted"),
                                 cond("Evicted", "True", "Preempted", "Preempted to accommodate a workload")},
                                kAdmission);
  const Json patch = requeue_patch(wl, "2026-12-07T01:00:00Z");
  EXPECT_EQ(patch["metadata"]["resourceVersion"], "42");  // a stale owner gets a Conflict
  EXPECT_TRUE(patch["status"]["admission"].is_null());    // merge patch: removes it
  EXPECT_EQ((*condition(patch, "QuotaReserved"))["status"], "False");
  EXPECT_EQ((*condition(patch, "QuotaReserved"))["reason"], "Pending");
  EXPECT_EQ((*condition(patch, "Admitted"))["status"], "False");
  EXPECT_EQ((*condition(patch, "Requeued"))["status"], "True");  // a preemption requeues at once
  EXPECT_EQ((*condition(patch, "Requeued"))["reason"], "Preempted");
  EXPECT_EQ((*condition(patch, "Evicted"))["status"], "True");  // Kueue's own, kept
  EXPECT_EQ((*condition(patch, "QuotaReserved"))["lastTransitionTime"], "2026-12-07T01:00:00Z");

  // Pods not ready in time: Requeued False, Kueue's backoff decides when.
  const Json timeout = workload_with({cond("QuotaReserved", "True", "QuotaReserved"), cond("Admitted", "True", "Admitted"),
                                      cond("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout")},
                                     kAdmission);
  const Json p2 = requeue_patch(timeout, "2026-12-07T01:00:00Z");
  EXPECT_EQ((*condition(p2, "Requeued"))["status"], "False");
  EXPECT_EQ((*condition(p2, "Requeued"))["reason"], "PodsReadyTimeout");
}

TEST(QueuePolicy, PodsReadyOnlyWhenItChanges) {
  const Json admitted =
      workload_with({cond("QuotaReserved", "True", "QuotaReserved"), cond("Admitted", "True", "Admitted")}, kAdmission);
  // Not all pods run yet: no condition (Kueue's timeout runs from the admission).
  EXPECT_FALSE(pods_ready_patch(admitted, false, "t").has_value());
  auto ready = pods_ready_patch(admitted, true, "2026-12-07T02:00:00Z");
  ASSERT_TRUE(ready.has_value());
  EXPECT_EQ((*condition(*ready, "PodsReady"))["status"], "True");
  Json now_ready = admitted;
  now_ready["status"]["conditions"] = (*ready)["status"]["conditions"];
  EXPECT_FALSE(pods_ready_patch(now_ready, true, "t").has_value());
  auto lost = pods_ready_patch(now_ready, false, "2026-12-07T03:00:00Z");
  ASSERT_TRUE(lost.has_value());
  EXPECT_EQ((*condition(*lost, "PodsReady"))["reason"], "WaitForRecovery");
}

TEST(QueuePolicy, FinishedGivesTheQuotaBack) {
  const Json wl =
      workload_with({cond("QuotaReserved", "True", "QuotaReserved"), cond("Admitted", "True", "Admitted")}, kAdmission);
  const Json patch = finished_patch(wl, true, "every rank exited 0", "t");
  EXPECT_EQ((*condition(patch, "Finished"))["status"], "True");
  EXPECT_EQ((*condition(patch, "Finished"))["reason"], "Succeeded");
  EXPECT_EQ((*condition(finished_patch(wl, false, "", "t"), "Finished"))["reason"], "Failed");
}

TEST(QueuePolicy, FlavorsPlaceThePods) {
  FlavorPlacement p;
  std::string conflict;
  const Json spot = {{"metadata", {{"name", "spot"}}},
                     {"spec",
                      {{"nodeLabels", {{"weft.dev/pool", "spot"}}},
                       {"tolerations", {{{"key", "spot"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}}}}}};
  ASSERT_TRUE(add_flavor(p, spot, &conflict));
  ASSERT_TRUE(add_flavor(p, spot, &conflict));  // the same flavor for cpu and memory: once
  EXPECT_EQ(p.node_selector, (Json{{"weft.dev/pool", "spot"}}));
  EXPECT_EQ(p.tolerations.size(), 1u);
  const Json other = {{"metadata", {{"name", "other"}}}, {"spec", {{"nodeLabels", {{"weft.dev/pool", "reserved"}}}}}};
  EXPECT_FALSE(add_flavor(p, other, &conflict));
  EXPECT_NE(conflict.find("weft.dev/pool"), std::string::npos);

  // The pods get them over the template's own.
  Json job = queued_job();
  job["spec"]["template"] = {{"nodeSelector", {{"weft.dev/pool", "any"}, {"disk", "ssd"}}}};
  TrainingJobSpec spec = spec_of(job);
  spec.queue_node_selector = p.node_selector;
  spec.queue_tolerations = p.tolerations;
  const Json pod = build_pod(job, spec, 1, 0);
  EXPECT_EQ(pod["spec"]["nodeSelector"], (Json{{"weft.dev/pool", "spot"}, {"disk", "ssd"}}));
  EXPECT_EQ(pod["spec"]["tolerations"].size(), 1u);
  // ... without changing the gang's identity (no relaunch on admission).
  EXPECT_EQ(pod_spec_hash(spec), pod_spec_hash(spec_of(job)));
}

TEST(QueuePolicy, QueuedPhaseRanksBelowSuspendedAndAboveRunning) {
  GangObservation g;
  EXPECT_EQ(compute_phase(g, PhaseFacts{.queued = true}).phase, kPhaseQueued);
  EXPECT_EQ(compute_phase(g, PhaseFacts{.suspended = true, .queued = true}).phase, kPhaseSuspended);
  EXPECT_EQ(compute_phase(g, PhaseFacts{.failed = true, .queued = true}).phase, kPhaseFailed);
}

}  // namespace
}  // namespace weft::tj
