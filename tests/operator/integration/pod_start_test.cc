// Bad input on the user's path, against the real API server: an image that
// is not on the node (ErrImageNeverPull), a worker that exits 1 at start, one
// that is OOMKilled, and a pod stuck in ContainerCreating past the start
// deadline. The test writes pod status as a kubelet does (a strategic merge
// patch of the status subresource); each case ends in the TrainingJob's
// status as a condition naming the pod and the cause, with the restarts the
// policy (docs/operator/reconcile.md) counts for it.
//
// The operator runs with a 60 s start deadline; a pod's deadline counts from
// its PodScheduled condition's lastTransitionTime, which the test writes in
// the past to be past it. The pods that wait go to a scheduler that does not
// run, so no scheduler writes their PodScheduled condition but the test.
#include <algorithm>

#include "integration/harness.h"
#include "kube/clock.h"
#include "trainingjob/constants.h"
#include "weft_contract.h"

namespace weft::it {
namespace {

constexpr const char* kNoScheduler = "weft-it-no-scheduler";
const std::string kNeverPull = R"(Container image "ghcr.io/weft-dev/weft:absent" is not present with pull policy of Never)";

class PodStart : public OperatorTest {
 protected:
  PodStart() : OperatorTest("it-podstart") {}
  void SetUp() override {
    tj::ControllerOptions o;
    o.ns = ns();
    o.workers = 2;
    o.resync = std::chrono::seconds(30);
    o.pod_start_timeout = std::chrono::seconds(60);
    op_ = std::make_unique<InProcessOperator>(o);
  }

  // The kubelet's status of a pod bound to its node `bound_ago` ago whose
  // worker container waits with `reason`.
  void kubelet_waiting(const std::string& pod, const std::string& reason, const std::string& message,
                       std::chrono::seconds bound_ago) {
    const std::string bound = kube::format_time(std::chrono::system_clock::now() - bound_ago);
    Json waiting = {{"reason", reason}};
    if (!message.empty()) waiting["message"] = message;
    Json patch = {
        {"status",
         {{"phase", "Pending"},
          {"conditions",
           {{{"type", "PodScheduled"}, {"status", "True"}, {"lastTransitionTime", bound}},
            {{"type", "Ready"}, {"status", "False"}, {"reason", "ContainersNotReady"}}}},
          {"containerStatuses",
           {{{"name", tj::kContainerName}, {"image", "ghcr.io/weft-dev/weft:absent"}, {"imageID", ""},
             {"restartCount", 0}, {"ready", false}, {"started", false}, {"state", {{"waiting", waiting}}}}}}}}};
    auto r = admin_api().strategic_merge_patch(kube::kPods, ns(), pod, patch, true);
    ASSERT_TRUE(r.ok()) << pod << ": " << r.error().message;
  }
  // The kubelet's status of a pod whose worker container ended.
  void kubelet_terminated(const std::string& pod, int code, const std::string& reason, const std::string& message) {
    Json terminated = {{"exitCode", code}, {"reason", reason}, {"startedAt", "2026-01-01T00:00:00Z"},
                       {"finishedAt", "2026-01-01T00:00:01Z"}};
    if (!message.empty()) terminated["message"] = message;
    Json patch = {{"status",
                   {{"phase", "Failed"},
                    {"conditions", {{{"type", "Ready"}, {"status", "False"}, {"reason", "PodFailed"}}}},
                    {"containerStatuses",
                     {{{"name", tj::kContainerName}, {"image", "ghcr.io/weft-dev/weft:test"}, {"imageID", ""},
                       {"restartCount", 0}, {"ready", false}, {"state", {{"terminated", terminated}}}}}}}}};
    auto r = admin_api().strategic_merge_patch(kube::kPods, ns(), pod, patch, true);
    ASSERT_TRUE(r.ok()) << pod << ": " << r.error().message;
  }

  std::vector<Json> events(const std::string& job, const std::string& reason) {
    std::vector<Json> out;
    auto list = admin_api().list(kube::kEvents, ns());
    if (list)
      for (const auto& e : list->items)
        if (e["involvedObject"].value("name", "") == job && e.value("reason", "") == reason) out.push_back(e);
    return out;
  }
  static bool has(const Json& c, const std::string& text) {
    return c.value("message", "").find(text) != std::string::npos;
  }
  Json waiting_job(const std::string& name, int replicas, int max_restarts) {
    Json job = job_json(name, replicas);
    job["spec"]["restartPolicy"] = {{"maxRestarts", max_restarts}, {"backoffSeconds", 1}, {"maxBackoffSeconds", 2}};
    job["spec"]["template"] = {{"schedulerName", kNoScheduler}};
    return job;
  }
};

// Not on the node, never pulled: retrying the gang cannot make it appear.
// The job waits (the image may yet be loaded onto the node) with Ready False
// naming the pods and the kubelet's words, then fails at the deadline,
// counting no restart.
TEST_F(PodStart, AnImageNotPresentIsNamedThenFailsTheJobAtTheDeadlineWithoutARestart) {
  Json job = waiting_job("img", 2, 3);
  job["spec"]["image"] = "ghcr.io/weft-dev/weft:absent";
  job["spec"]["imagePullPolicy"] = "Never";
  create(job);
  ASSERT_TRUE(eventually([&] { return gang_is("img", 2, 0); }));
  kubelet_waiting("img-0", "ErrImageNeverPull", kNeverPull, std::chrono::seconds(1));
  kubelet_waiting("img-1", "ErrImageNeverPull", kNeverPull, std::chrono::seconds(1));

  ASSERT_TRUE(eventually([&] {
    const Json c = condition("img", tj::kCondReady);
    return c.value("reason", "") == tj::kReasonImageNotPresent && has(c, "also pod img-1");
  })) << status_of(ns(), "img").dump();
  const Json ready = condition("img", tj::kCondReady);
  EXPECT_EQ(ready["status"], "False");
  EXPECT_EQ(ready["message"], "pod img-0 (rank 0) cannot start: ErrImageNeverPull: " + kNeverPull +
                                  "; also pod img-1; the job fails if it has not started within 60s of being scheduled");
  Json st = status_of(ns(), "img");
  EXPECT_EQ(st["phase"], tj::kPhasePending);
  EXPECT_EQ(st.value("restarts", 0), 0);
  ASSERT_TRUE(eventually([&] { return !events("img", tj::kReasonImageNotPresent).empty(); }));
  EXPECT_EQ(events("img", tj::kReasonImageNotPresent)[0]["type"], "Warning");

  // The deadline passes for rank 1: Failed, reason ImageNotPresent, no restart.
  kubelet_waiting("img-1", "ErrImageNeverPull", kNeverPull, std::chrono::seconds(120));
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "img") == tj::kPhaseFailed; })) << status_of(ns(), "img").dump();
  const Json failed = condition("img", tj::kCondFailed);
  EXPECT_EQ(failed["status"], "True");
  EXPECT_EQ(failed["reason"], tj::kReasonImageNotPresent);
  EXPECT_EQ(failed["message"], "pod img-1 (rank 1) did not start within 60s of being scheduled: ErrImageNeverPull: " +
                                   kNeverPull + "; not retried (a gang restart would meet the same cause)");
  st = status_of(ns(), "img");
  EXPECT_EQ(st.value("restarts", 0), 0);
  EXPECT_EQ(st["attempt"], 0);
  // Its pods, which never ran, go.
  EXPECT_TRUE(eventually([&] { return job_pods(ns(), "img").empty(); }));
}

// Exit 1 as the worker starts (bad config): Failed at once, never retried,
// the message naming the pod and the worker's last log line.
TEST_F(PodStart, AnExitOneAtStartFailsTheJobNamingThePod) {
  create(job_json("exit1", 2));
  ASSERT_TRUE(eventually([&] { return gang_is("exit1", 2, 0); }));
  set_pod_phase(ns(), "exit1-1", "Running", std::nullopt, false);
  kubelet_terminated("exit1-0", contract::kExitBadConfig, "Error",
                     "[info] weft-worker starting\n[error] config error: parallel.sp 3 does not divide 2\n");
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "exit1") == tj::kPhaseFailed; })) << status_of(ns(), "exit1").dump();
  const Json failed = condition("exit1", tj::kCondFailed);
  EXPECT_EQ(failed["reason"], tj::kReasonBadConfig);
  EXPECT_EQ(failed["message"], "rank 0 (pod exit1-0) exited with code 1 (bad config or input); not retried: "
                               "[error] config error: parallel.sp 3 does not divide 2");
  EXPECT_EQ(status_of(ns(), "exit1").value("restarts", 0), 0);
}

// OOMKilled: a gang restart counted against maxRestarts (it would likely
// happen again), the message naming the pod, OOMKilled and the limit.
TEST_F(PodStart, AnOomKillIsACountedRestartNamingThePodAndTheLimit) {
  Json job = job_json("oom", 2);
  job["spec"]["restartPolicy"] = {{"maxRestarts", 1}, {"backoffSeconds", 1}, {"maxBackoffSeconds", 2}};
  job["spec"]["resources"] = {{"limits", {{"memory", "256Mi"}}}};
  create(job);
  ASSERT_TRUE(eventually([&] { return gang_is("oom", 2, 0); }));
  set_all_running(ns(), "oom");
  kubelet_terminated("oom-1", 137, "OOMKilled", "");
  ASSERT_TRUE(eventually([&] { return status_of(ns(), "oom").value("restarts", 0) == 1; })) << status_of(ns(), "oom").dump();
  Json st = status_of(ns(), "oom");
  EXPECT_EQ(st["restartsByCause"]["OOMKilled"], 1);
  EXPECT_EQ(st["lastRestartCause"], "OOMKilled");
  const Json restarting = condition("oom", tj::kCondRestarting);
  EXPECT_EQ(restarting["status"], "True");
  EXPECT_EQ(restarting["reason"], tj::kReasonRankOOMKilled);
  EXPECT_TRUE(has(restarting, "rank 1 (pod oom-1) was OOMKilled: its container reached its memory limit 256Mi "
                              "(exit code 137); restarting the gang as attempt 1"))
      << restarting.dump();
  EXPECT_TRUE(has(restarting, "1 of maxRestarts 1 counted")) << restarting.dump();

  // Again on the new gang: the limit is reached.
  ASSERT_TRUE(eventually([&] { return gang_is("oom", 2, 1); }, std::chrono::seconds(20)));
  set_all_running(ns(), "oom");
  kubelet_terminated("oom-0", 137, "OOMKilled", "");
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "oom") == tj::kPhaseFailed; })) << status_of(ns(), "oom").dump();
  const Json failed = condition("oom", tj::kCondFailed);
  EXPECT_EQ(failed["reason"], tj::kReasonMaxRestarts);
  EXPECT_EQ(failed["message"], "rank 0 (pod oom-0) was OOMKilled: its container reached its memory limit 256Mi (exit "
                               "code 137); restart limit reached (1 of maxRestarts 1)");
}

// A pod on its node stuck in ContainerCreating: Ready says nothing special
// before the deadline; past it the gang restarts, counted (StartTimeout),
// and a job out of restarts fails.
TEST_F(PodStart, APodStuckInContainerCreatingRestartsTheGangCountedThenFails) {
  create(waiting_job("stuck", 2, 1));
  ASSERT_TRUE(eventually([&] { return gang_is("stuck", 2, 0); }));
  set_pod_phase(ns(), "stuck-0", "Running", std::nullopt, false);
  kubelet_waiting("stuck-1", "ContainerCreating", "", std::chrono::seconds(5));
  ASSERT_TRUE(eventually([&] {
    return has(condition("stuck", tj::kCondReady), "0 of 2 ranks training, 1 running");
  })) << status_of(ns(), "stuck").dump();
  EXPECT_EQ(condition("stuck", tj::kCondReady)["reason"], tj::kReasonWaitingForRanks);
  EXPECT_EQ(status_of(ns(), "stuck").value("restarts", 0), 0);

  kubelet_waiting("stuck-1", "ContainerCreating", "", std::chrono::seconds(120));
  ASSERT_TRUE(eventually([&] { return status_of(ns(), "stuck").value("restarts", 0) == 1; }))
      << status_of(ns(), "stuck").dump();
  Json st = status_of(ns(), "stuck");
  EXPECT_EQ(st["restartsByCause"]["StartTimeout"], 1);
  EXPECT_EQ(st["lastRestartCause"], "StartTimeout");
  const Json restarting = condition("stuck", tj::kCondRestarting);
  EXPECT_EQ(restarting["reason"], tj::kReasonRankStartTimeout);
  EXPECT_TRUE(has(restarting, "pod stuck-1 (rank 1) did not start within 60s of being scheduled: ContainerCreating; "
                              "restarting the gang as attempt 1"))
      << restarting.dump();
  EXPECT_TRUE(has(restarting, "1 of maxRestarts 1 counted")) << restarting.dump();
  ASSERT_TRUE(eventually([&] { return !events("stuck", tj::kReasonRankStartTimeout).empty(); }));

  // The new gang is stuck too: the one counted restart was the last.
  ASSERT_TRUE(eventually([&] { return gang_is("stuck", 2, 1); }, std::chrono::seconds(20)));
  kubelet_waiting("stuck-0", "ContainerCreating", "", std::chrono::seconds(120));
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "stuck") == tj::kPhaseFailed; })) << status_of(ns(), "stuck").dump();
  const Json failed = condition("stuck", tj::kCondFailed);
  EXPECT_EQ(failed["reason"], tj::kReasonMaxRestarts);
  EXPECT_EQ(failed["message"], "pod stuck-0 (rank 0) did not start within 60s of being scheduled: ContainerCreating; "
                               "restart limit reached (1 of maxRestarts 1)");
  EXPECT_EQ(status_of(ns(), "stuck").value("restarts", 0), 1);
}

}  // namespace
}  // namespace weft::it
