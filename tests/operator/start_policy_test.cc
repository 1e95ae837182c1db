// Pods that do not start, and pods whose worker stopped at once: what the
// operator reads from a kubelet's pod status (observe_pod), what the start
// policy decides (start_policy.h), and how the restart policy's messages
// name the pod and the cause.
#include <gtest/gtest.h>

#include "test_builders.h"
#include "trainingjob/constants.h"
#include "trainingjob/restart_policy.h"
#include "trainingjob/start_policy.h"

namespace weft::tj {
namespace {

using testing::MakeGang;
using testing::Restarts;
using namespace std::chrono_literals;

const TimePoint kNow = *parse_time("2026-03-01T12:00:00Z");

std::string ago(std::chrono::seconds s) { return format_time(kNow - s); }

// A pod bound to its node `since` ago whose worker container waits.
RankState waiting(int rank, const std::string& reason, const std::string& message, std::chrono::seconds since) {
  RankState r;
  r.rank = rank;
  r.pod = "job-" + std::to_string(rank);
  r.phase = "Pending";
  r.scheduled = true;
  r.scheduled_at = ago(since);
  r.created_at = ago(since + 5s);
  r.container_reported = true;
  r.waiting_reason = reason;
  r.waiting_message = message;
  return r;
}

GangObservation gang_of(std::vector<RankState> ranks) {
  GangObservation g;
  g.replicas = static_cast<int>(ranks.size());
  g.launched = true;
  g.ranks = std::move(ranks);
  return g;
}

const std::string kNeverPull = R"(Container image "weft:absent" is not present with pull policy of Never)";

TEST(ObservePod, ReadsWhatTheKubeletSaysOfAContainerThatWaits) {
  const nlohmann::json pod = nlohmann::json::parse(R"({
    "metadata": {"name": "llama-1", "labels": {"weft.dev/rank": "1"}, "creationTimestamp": "2026-03-01T11:58:00Z"},
    "spec": {"nodeName": "node-a", "containers": [
      {"name": "worker", "image": "weft:absent", "resources": {"limits": {"memory": "512Mi", "cpu": "1"}}}]},
    "status": {"phase": "Pending",
      "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-03-01T11:59:00Z"},
                     {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
      "containerStatuses": [{"name": "worker", "ready": false, "restartCount": 0, "image": "weft:absent",
        "state": {"waiting": {"reason": "ErrImageNeverPull",
          "message": "Container image \"weft:absent\" is not present with pull policy of Never"}}}]}})");
  const RankState r = observe_pod(pod, "worker");
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.pod, "llama-1");
  EXPECT_EQ(r.phase, "Pending");
  EXPECT_TRUE(r.scheduled);
  EXPECT_EQ(r.scheduled_at, "2026-03-01T11:59:00Z");
  EXPECT_EQ(r.created_at, "2026-03-01T11:58:00Z");
  EXPECT_TRUE(r.container_reported);
  EXPECT_EQ(r.waiting_reason, "ErrImageNeverPull");
  EXPECT_EQ(r.waiting_message, kNeverPull);
  EXPECT_EQ(r.memory_limit, "512Mi");
  EXPECT_FALSE(r.exit_code);
}

TEST(ObservePod, ReadsTheTerminatedReasonAndTheLastState) {
  const nlohmann::json oom = nlohmann::json::parse(R"({
    "metadata": {"name": "llama-0", "labels": {"weft.dev/rank": "0"}},
    "status": {"phase": "Failed", "containerStatuses": [{"name": "worker",
      "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}})");
  const RankState o = observe_pod(oom, "worker");
  EXPECT_EQ(o.exit_code, 137);
  EXPECT_EQ(o.container_reason, "OOMKilled");
  EXPECT_EQ(classify_failure(o), FailureCause::OOMKilled);

  // A failed pod whose container waits again: its exit is in lastState.
  const nlohmann::json relaunched = nlohmann::json::parse(R"({
    "metadata": {"name": "llama-0", "labels": {"weft.dev/rank": "0"}},
    "status": {"phase": "Failed", "containerStatuses": [{"name": "worker",
      "state": {"waiting": {"reason": "CrashLoopBackOff"}},
      "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": "config error: bad\n"}}}]}})");
  const RankState l = observe_pod(relaunched, "worker");
  EXPECT_EQ(l.last_exit_code, 1);
  EXPECT_EQ(l.last_reason, "Error");
  EXPECT_EQ(l.exit_code, 1);
  EXPECT_EQ(l.message, "config error: bad\n");
  EXPECT_EQ(decide_restart(gang_of({l}), 0, Restarts(3)).reason, kReasonBadConfig);

  // While it runs or waits, lastState is the last run's only.
  nlohmann::json pending = relaunched;
  pending["status"]["phase"] = "Pending";
  const RankState p = observe_pod(pending, "worker");
  EXPECT_EQ(p.last_exit_code, 1);
  EXPECT_FALSE(p.exit_code);
  EXPECT_EQ(p.waiting_reason, "CrashLoopBackOff");

  // Fields of the wrong type are not trusted, and do not throw.
  const nlohmann::json odd = nlohmann::json::parse(R"({
    "metadata": {"name": 7, "labels": {"weft.dev/rank": "0"}},
    "status": {"phase": "Failed", "containerStatuses": [{"name": "worker",
      "state": {"terminated": {"exitCode": "x", "reason": 3}, "waiting": "no"}}, "junk"]}})");
  const RankState d = observe_pod(odd, "worker");
  EXPECT_EQ(d.pod, "");
  EXPECT_EQ(d.exit_code, -1);
  EXPECT_EQ(d.container_reason, "");
}

TEST(StartPolicy, WaitingReasonsARestartCannotCure) {
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"ErrImageNeverPull", kReasonImageNotPresent},
      {"ErrImagePull", kReasonImagePullFailed},
      {"ImagePullBackOff", kReasonImagePullFailed},
      {"ImageInspectError", kReasonImagePullFailed},
      {"InvalidImageName", kReasonInvalidImageName},
      {"CreateContainerConfigError", kReasonContainerConfigError},
      {"CreateContainerError", kReasonContainerCreateFailed},
      {"RunContainerError", kReasonContainerCreateFailed},
      {"ContainerCreating", ""},
      {"PodInitializing", ""},
      {"", ""},
  };
  for (const auto& [waiting_reason, want] : rows) EXPECT_EQ(start_blocker(waiting_reason), want) << waiting_reason;
}

TEST(StartPolicy, AnImageNotPresentKeepsTheJobWaitingThenFailsItAtTheDeadline) {
  // Before the deadline: reported, nothing done, looked at again when it passes.
  auto d = decide_start(gang_of({waiting(0, "ErrImageNeverPull", kNeverPull, 100s), waiting(1, "ContainerCreating", "", 100s)}),
                        kNow, 600s, 0, Restarts(3));
  EXPECT_EQ(d.act.verdict, GangVerdict::Healthy);
  EXPECT_EQ(d.blocked_reason, kReasonImageNotPresent);
  EXPECT_EQ(d.blocked_message, "pod job-0 (rank 0) cannot start: ErrImageNeverPull: " + kNeverPull +
                                   "; the job fails if it has not started within 600s of being scheduled");
  ASSERT_TRUE(d.recheck_in);
  EXPECT_EQ(*d.recheck_in, 500s + 10ms);

  // Past it: Failed with the cause's reason, never a restart.
  auto late = decide_start(gang_of({waiting(0, "ErrImageNeverPull", kNeverPull, 601s)}), kNow, 600s, 0, Restarts(3));
  EXPECT_EQ(late.act.verdict, GangVerdict::Fail);
  EXPECT_EQ(late.act.reason, kReasonImageNotPresent);
  EXPECT_EQ(late.act.message, "pod job-0 (rank 0) did not start within 600s of being scheduled: ErrImageNeverPull: " +
                                  kNeverPull + "; not retried (a gang restart would meet the same cause)");
  // With restarts left or not.
  EXPECT_EQ(decide_start(gang_of({waiting(0, "ImagePullBackOff", "Back-off pulling image", 700s)}), kNow, 600s, 9,
                         Restarts(3)).act.reason,
            kReasonImagePullFailed);
}

TEST(StartPolicy, EveryBlockedPodIsNamed) {
  auto d = decide_start(gang_of({waiting(2, "ErrImagePull", "pull access denied", 10s),
                                 waiting(0, "ImagePullBackOff", "Back-off pulling image \"x\"", 10s),
                                 waiting(1, "ContainerCreating", "", 10s), waiting(3, "ErrImagePull", "", 10s)}),
                        kNow, 0s, 0, Restarts(3));
  EXPECT_EQ(d.blocked_reason, kReasonImagePullFailed);
  EXPECT_EQ(d.blocked_message,
            "pod job-0 (rank 0) cannot start: ImagePullBackOff: Back-off pulling image \"x\"; also pods job-2, job-3")
      << "no deadline: the message promises none";
  EXPECT_FALSE(d.recheck_in);
  EXPECT_EQ(d.act.verdict, GangVerdict::Healthy);
}

TEST(StartPolicy, AContainerCreatingPastTheDeadlineRestartsTheGangCounted) {
  RankState running;
  running.rank = 0;
  running.phase = "Running";
  running.scheduled = true;
  auto d = decide_start(gang_of({running, waiting(1, "ContainerCreating", "", 601s)}), kNow, 600s, 1, Restarts(3));
  EXPECT_EQ(d.act.verdict, GangVerdict::Restart);
  EXPECT_EQ(d.act.reason, kReasonRankStartTimeout);
  EXPECT_EQ(d.act.cause, FailureCause::StartTimeout);
  EXPECT_TRUE(counts_against_limit(d.act.cause));
  EXPECT_EQ(d.act.message, "pod job-1 (rank 1) did not start within 600s of being scheduled: ContainerCreating");
  // At the limit: Failed.
  auto last = decide_start(gang_of({running, waiting(1, "ContainerCreating", "", 601s)}), kNow, 600s, 3, Restarts(3));
  EXPECT_EQ(last.act.verdict, GangVerdict::Fail);
  EXPECT_EQ(last.act.reason, kReasonMaxRestarts);
  EXPECT_EQ(last.act.message,
            "pod job-1 (rank 1) did not start within 600s of being scheduled: ContainerCreating; restart limit "
            "reached (3 of maxRestarts 3)");
  // No container status yet counts as waiting; without a deadline nothing happens.
  RankState silent = waiting(0, "", "", 900s);
  silent.container_reported = false;
  EXPECT_EQ(decide_start(gang_of({silent}), kNow, 600s, 0, Restarts(3)).act.message,
            "pod job-0 (rank 0) did not start within 600s of being scheduled: the kubelet has not reported its "
            "container");
  EXPECT_EQ(decide_start(gang_of({silent}), kNow, 0s, 0, Restarts(3)).act.verdict, GangVerdict::Healthy);
}

TEST(StartPolicy, ABlockedPodPastTheDeadlineFailsBeforeASlowOneRestarts) {
  auto d = decide_start(gang_of({waiting(0, "ContainerCreating", "", 700s), waiting(1, "InvalidImageName",
                                                                                     "couldn't parse image name", 700s)}),
                        kNow, 600s, 0, Restarts(3));
  EXPECT_EQ(d.act.verdict, GangVerdict::Fail);
  EXPECT_EQ(d.act.reason, kReasonInvalidImageName);
}

TEST(StartPolicy, OnlyPodsOnTheirNodeThatHaveNotStartedAreJudged) {
  RankState unplaced = waiting(0, "", "", 900s);
  unplaced.scheduled = false;  // the scheduler's to place: scheduling and elastic policies
  unplaced.container_reported = false;
  RankState leaving = waiting(1, "ErrImageNeverPull", kNeverPull, 900s);
  leaving.terminating = true;
  RankState failed = waiting(2, "", "", 900s);
  failed.phase = "Failed";
  failed.exit_code = 3;
  auto d = decide_start(gang_of({unplaced, leaving, failed}), kNow, 600s, 0, Restarts(3));
  EXPECT_EQ(d.act.verdict, GangVerdict::Healthy);
  EXPECT_EQ(d.blocked_reason, "");
  EXPECT_FALSE(d.recheck_in);
  // The deadline counts from the binding, else from the pod's creation.
  RankState no_binding_time = waiting(0, "ContainerCreating", "", 0s);
  no_binding_time.scheduled_at.clear();
  no_binding_time.created_at = ago(650s);
  EXPECT_EQ(decide_start(gang_of({no_binding_time}), kNow, 600s, 0, Restarts(3)).act.verdict, GangVerdict::Restart);
}

TEST(RestartPolicy, MessagesNameThePodAndTheCause) {
  RankState oom;
  oom.rank = 1;
  oom.pod = "llama-1";
  oom.phase = "Failed";
  oom.exit_code = 137;
  oom.container_reason = "OOMKilled";
  oom.memory_limit = "512Mi";
  auto d = decide_restart(gang_of({oom}), 0, Restarts(3));
  EXPECT_EQ(d.verdict, GangVerdict::Restart);
  EXPECT_EQ(d.reason, kReasonRankOOMKilled);
  EXPECT_EQ(d.message, "rank 1 (pod llama-1) was OOMKilled: its container reached its memory limit 512Mi (exit code 137)");
  oom.memory_limit.clear();
  EXPECT_EQ(decide_restart(gang_of({oom}), 3, Restarts(3)).message,
            "rank 1 (pod llama-1) was OOMKilled: out of memory with no memory limit set (exit code 137); restart limit "
            "reached (3 of maxRestarts 3)");

  RankState bad;
  bad.pod = "llama-0";
  bad.phase = "Failed";
  bad.exit_code = 1;
  bad.container_reason = "Error";
  bad.message = "config error: parallel.sp 3 does not divide 2\n";
  auto b = decide_restart(gang_of({bad}), 0, Restarts(3));
  EXPECT_EQ(b.verdict, GangVerdict::Fail);
  EXPECT_EQ(b.reason, kReasonBadConfig);
  EXPECT_EQ(b.message, "rank 0 (pod llama-0) exited with code 1 (bad config or input); not retried: config error: "
                       "parallel.sp 3 does not divide 2");

  RankState start_error = bad;
  start_error.exit_code = 128;
  start_error.container_reason = "StartError";
  start_error.message = "exec: \"weft-worker\": executable file not found in $PATH";
  EXPECT_EQ(decide_restart(gang_of({start_error}), 0, Restarts(3)).message,
            "rank 0 (pod llama-0) exited with code 128 (StartError): exec: \"weft-worker\": executable file not "
            "found in $PATH");
}

TEST(RestartPolicy, StartTimeoutsCountAgainstTheLimit) {
  TrainingJobStatus st;
  st.restarts = 3;
  st.restarts_by_cause = {{"StartTimeout", 2}, {"Evicted", 1}};
  st.last_restart_cause = "StartTimeout";
  EXPECT_EQ(counted_restarts(st), 2);
  EXPECT_TRUE(last_restart_counted(st));
  EXPECT_STREQ(cause_name(FailureCause::StartTimeout), "StartTimeout");
}

}  // namespace
}  // namespace weft::tj
