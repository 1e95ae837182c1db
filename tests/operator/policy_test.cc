// Table-driven tests of the pure policies: restart, success, phase, TTL and
// spec validation. Each row is built from the small builders.
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>
#include <yaml-cpp/yaml.h>

#include <cmath>

#include "test_builders.h"
#include "trainingjob/constants.h"
#include "trainingjob/operator_metrics.h"
#include "trainingjob/gang.h"
#include "trainingjob/phase_policy.h"
#include "trainingjob/restart_policy.h"
#include "trainingjob/success_policy.h"
#include "trainingjob/ttl_policy.h"
#include "trainingjob/types.h"
#include "weft_contract.h"

namespace weft::tj {
namespace {
using testing::MakeGang;
using testing::MakeJob;
using testing::Restarts;

struct RestartCase {
  std::string name;
  GangObservation gang;
  int restarts;
  RestartSpec spec;
  GangVerdict want;
  std::string want_reason;
};

TEST(RestartPolicy, Table) {
  const std::vector<RestartCase> cases = {
      {"all running", MakeGang(4).Launched().AllRunning().Obj(), 0, Restarts(3), GangVerdict::Healthy, ""},
      {"not launched yet, ranks missing", MakeGang(4).Running(0).Obj(), 0, Restarts(3), GangVerdict::Healthy, ""},
      {"peer lost (3) restarts", MakeGang(4).Launched().Running(0).Failed(1, 3).Running(2).Running(3).Obj(), 0,
       Restarts(3), GangVerdict::Restart, kReasonRankFailed},
      {"checkpoint io (4) restarts", MakeGang(2).Launched().Failed(0, 4).Running(1).Obj(), 1, Restarts(3),
       GangVerdict::Restart, kReasonRankFailed},
      {"stopped on SIGTERM (143) restarts uncounted", MakeGang(2).Launched().Failed(0, 143).Failed(1, 143).Obj(), 3,
       Restarts(3), GangVerdict::Restart, kReasonRankDeleted},
      {"killed (137, no OOM) counts", MakeGang(2).Launched().Failed(0, 137).Running(1).Obj(), 3, Restarts(3),
       GangVerdict::Fail, kReasonMaxRestarts},
      {"bad config (1) fails at once", MakeGang(2).Launched().Failed(0, 1).Running(1).Obj(), 0, Restarts(3),
       GangVerdict::Fail, kReasonBadConfig},
      {"exit 1 wins over a retryable failure", MakeGang(3).Launched().Failed(0, 3).Failed(2, 1).Running(1).Obj(), 0,
       Restarts(3), GangVerdict::Fail, kReasonBadConfig},
      {"exit 1 fails even with restarts left", MakeGang(1).Launched().Failed(0, 1).Obj(), 0, Restarts(100),
       GangVerdict::Fail, kReasonBadConfig},
      // A NaN loss diverges at the same step from the same checkpoint.
      {"diverged (5) fails at once", MakeGang(2).Launched().Failed(0, 5).Failed(1, 3).Obj(), 0, Restarts(3),
       GangVerdict::Fail, kReasonDiverged},
      {"evicted restarts", MakeGang(2).Launched().Failed(0, std::nullopt, "Evicted").Running(1).Obj(), 0, Restarts(3),
       GangVerdict::Restart, kReasonRankEvicted},
      {"evicted restarts past the limit: not counted",
       MakeGang(2).Launched().Failed(0, std::nullopt, "Evicted").Running(1).Obj(), 3, Restarts(3),
       GangVerdict::Restart, kReasonRankEvicted},
      {"API eviction (DisruptionTarget) with the peer's lost-peer exit: the eviction is the cause",
       MakeGang(2).Launched().Failed(0, 143).Disruption("EvictionByEvictionAPI").Failed(1, 3).Obj(), 3,
       Restarts(3), GangVerdict::Restart, kReasonRankEvicted},
      {"preempted by the scheduler, not counted",
       MakeGang(2).Launched().Failed(1, 143).Disruption("PreemptionByScheduler").Running(0).Obj(), 5, Restarts(3),
       GangVerdict::Restart, kReasonRankPreempted},
      {"node lost (taint manager), not counted",
       MakeGang(2).Launched().Failed(1, std::nullopt).Disruption("DeletionByTaintManager").Running(0).Obj(), 5,
       Restarts(3), GangVerdict::Restart, kReasonRankNodeLost},
      {"node shutdown, not counted", MakeGang(2).Launched().Failed(0, 143, "Terminated").Running(1).Obj(), 5,
       Restarts(3), GangVerdict::Restart, kReasonRankNodeLost},
      {"a pod being deleted whose worker stopped on SIGTERM, not counted",
       MakeGang(2).Launched().Failed(0, 143).BeingDeleted().Running(1).Obj(), 5, Restarts(3), GangVerdict::Restart,
       kReasonRankDeleted},
      {"deleted pod after launch restarts past the limit: not counted",
       MakeGang(2).Launched().Running(0).Missing(1).Obj(), 3, Restarts(3), GangVerdict::Restart, kReasonRankDeleted},
      {"OOM kill counts: restarts below the limit",
       MakeGang(2).Launched().Failed(1, 137).ContainerReason("OOMKilled").Running(0).Obj(), 2, Restarts(3),
       GangVerdict::Restart, kReasonRankOOMKilled},
      {"OOM kill counts: fails at the limit",
       MakeGang(2).Launched().Failed(1, 137).ContainerReason("OOMKilled").Running(0).Obj(), 3, Restarts(3),
       GangVerdict::Fail, kReasonMaxRestarts},
      {"exit 1 wins over an eviction",
       MakeGang(2).Launched().Failed(0, 1).Failed(1, std::nullopt, "Evicted").Obj(), 0, Restarts(3),
       GangVerdict::Fail, kReasonBadConfig},
      {"deleted pod after launch restarts", MakeGang(2).Launched().Running(0).Missing(1).Obj(), 0, Restarts(3),
       GangVerdict::Restart, kReasonRankDeleted},
      {"a pod being evicted (DisruptionTarget) after launch: evicted, not deleted",
       MakeGang(2).Launched().Running(0).Leaving(1, "EvictionByEvictionAPI").Obj(), 3, Restarts(3),
       GangVerdict::Restart, kReasonRankEvicted},
      {"a pod being deleted with no DisruptionTarget: deleted",
       MakeGang(2).Launched().Running(0).Leaving(1, "").Obj(), 0, Restarts(3), GangVerdict::Restart,
       kReasonRankDeleted},
      {"missing before launch is not a failure", MakeGang(2).Running(0).Missing(1).Obj(), 0, Restarts(3),
       GangVerdict::Healthy, ""},
      {"limit reached fails", MakeGang(2).Launched().Failed(0, 3).Running(1).Obj(), 3, Restarts(3), GangVerdict::Fail,
       kReasonMaxRestarts},
      {"maxRestarts 0 fails on first failure", MakeGang(2).Launched().Failed(1, 3).Running(0).Obj(), 0, Restarts(0),
       GangVerdict::Fail, kReasonMaxRestarts},
      {"one below the limit restarts", MakeGang(2).Launched().Failed(1, 3).Running(0).Obj(), 2, Restarts(3),
       GangVerdict::Restart, kReasonRankFailed},
      {"rank succeeded while others run is healthy", MakeGang(2).Launched().Succeeded(0).Running(1).Obj(), 0,
       Restarts(3), GangVerdict::Healthy, ""},
      {"internal error (2) restarts", MakeGang(2).Launched().Failed(0, 2).Running(1).Obj(), 0, Restarts(3),
       GangVerdict::Restart, kReasonRankFailed},
      {"OOM kill (137), not a worker code, restarts", MakeGang(2).Launched().Failed(1, 137).Running(0).Obj(), 0,
       Restarts(3), GangVerdict::Restart, kReasonRankFailed},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    RestartDecision d = decide_restart(c.gang, c.restarts, c.spec);
    EXPECT_EQ(d.verdict, c.want);
    EXPECT_EQ(d.reason, c.want_reason);
    if (d.verdict != GangVerdict::Healthy) {
      EXPECT_NE(d.message.find("rank"), std::string::npos) << d.message;
    }
  }
}

// Which pod facts make which cause, and which causes count.
TEST(RestartPolicy, ClassifiesFailuresByTheirPod) {
  auto rank = [](const std::string& reason, const std::string& container, const std::string& disruption,
                 bool deleting, int code = 143) {
    RankState r;
    r.phase = "Failed";
    r.exit_code = code;
    r.reason = reason;
    r.container_reason = container;
    r.disruption = disruption;
    r.terminating = deleting;
    return classify_failure(r);
  };
  EXPECT_EQ(rank("", "Error", "", false), FailureCause::Deleted) << "143: stopped on SIGTERM";
  EXPECT_EQ(rank("", "Error", "", false, 3), FailureCause::Failure);
  EXPECT_EQ(rank("", "Error", "", false, 137), FailureCause::Failure) << "killed, not for memory";
  EXPECT_EQ(rank("", "OOMKilled", "", false, 137), FailureCause::OOMKilled);
  EXPECT_EQ(rank("", "OOMKilled", "", false), FailureCause::OOMKilled);
  EXPECT_EQ(rank("Evicted", "", "", false), FailureCause::Evicted);
  EXPECT_EQ(rank("", "", "EvictionByEvictionAPI", true), FailureCause::Evicted);
  EXPECT_EQ(rank("", "", "TerminationByKubelet", false), FailureCause::Evicted);
  EXPECT_EQ(rank("", "", "PreemptionByScheduler", true), FailureCause::Preempted);
  EXPECT_EQ(rank("Preempting", "", "", false), FailureCause::Preempted);
  EXPECT_EQ(rank("", "", "DeletionByTaintManager", true), FailureCause::NodeLost);
  EXPECT_EQ(rank("", "", "DeletionByPodGC", true), FailureCause::NodeLost);
  EXPECT_EQ(rank("NodeLost", "", "", false), FailureCause::NodeLost);
  EXPECT_EQ(rank("Terminated", "", "", false), FailureCause::NodeLost);
  EXPECT_EQ(rank("", "", "SomeFutureReason", true), FailureCause::Deleted);
  EXPECT_EQ(rank("", "Error", "", true), FailureCause::Deleted);
  // The disruption wins over what the container says about itself.
  EXPECT_EQ(rank("", "OOMKilled", "PreemptionByScheduler", true), FailureCause::Preempted);
  for (FailureCause c : {FailureCause::Failure, FailureCause::OOMKilled}) EXPECT_TRUE(counts_against_limit(c));
  for (FailureCause c : {FailureCause::Evicted, FailureCause::Preempted, FailureCause::NodeLost, FailureCause::Deleted})
    EXPECT_FALSE(counts_against_limit(c)) << cause_name(c);
}

TEST(RestartPolicy, CountedRestartsLeaveOutTheCausesThatDoNotCount) {
  TrainingJobStatus st;
  st.restarts = 5;
  EXPECT_EQ(counted_restarts(st), 5) << "a status from before the breakdown counts every restart";
  EXPECT_TRUE(last_restart_counted(st));
  st.restarts_by_cause = {{"Failure", 1}, {"OOMKilled", 1}, {"Evicted", 2}, {"Deleted", 1}};
  EXPECT_EQ(counted_restarts(st), 2);
  st.last_restart_cause = "Evicted";
  EXPECT_FALSE(last_restart_counted(st));
  st.last_restart_cause = "OOMKilled";
  EXPECT_TRUE(last_restart_counted(st));
  const TrainingJobStatus back = parse_status(to_json(st));
  EXPECT_EQ(back.restarts_by_cause, st.restarts_by_cause);
  EXPECT_EQ(back.last_restart_cause, "OOMKilled");
}

TEST(RestartPolicy, ObservesOomKillsAndDisruptionsFromThePod) {
  const nlohmann::json pod = nlohmann::json::parse(R"({
    "metadata": {"labels": {"weft.dev/rank": "1"}, "deletionTimestamp": "2026-11-26T00:00:00Z"},
    "status": {"phase": "Failed",
      "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"},
                     {"type": "Ready", "status": "False"}],
      "containerStatuses": [{"name": "worker", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}})");
  const RankState r = observe_pod(pod, "worker");
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.container_reason, "OOMKilled");
  EXPECT_EQ(r.disruption, "EvictionByEvictionAPI");
  EXPECT_TRUE(r.terminating);
  EXPECT_EQ(classify_failure(r), FailureCause::Evicted);
}

// weft_operator_gang_restarts_total counts restarts by cause.
TEST(RestartPolicy, RestartsMetricIsLabelledByCause) {
  prometheus::Registry registry;
  OperatorMetrics metrics(registry);
  metrics.add_restart(cause_name(FailureCause::Evicted));
  metrics.add_restart(cause_name(FailureCause::Evicted));
  metrics.add_restart(cause_name(FailureCause::Failure));
  const std::string text = prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_NE(text.find("weft_operator_gang_restarts_total{cause=\"Evicted\"} 2"), std::string::npos) << text;
  EXPECT_NE(text.find("weft_operator_gang_restarts_total{cause=\"Failure\"} 1"), std::string::npos) << text;
}

TEST(Contract, OnlyABadConfigOrADivergedRunIsNotRetried) {
  using namespace contract;
  EXPECT_FALSE(retryable(kExitBadConfig));
  EXPECT_FALSE(retryable(kExitDiverged));
  for (int code : {kExitInternal, kExitPeerLost, kExitCheckpointIo, kExitInterrupted, kExitPreempted, 137})
    EXPECT_TRUE(retryable(code)) << code;
  EXPECT_EQ(metrics_port(0), 9400);  // a pod's only rank
  EXPECT_EQ(metrics_port(3, 9500), 9503);
}

TEST(RestartPolicy, MessageNamesRankAndExitCode) {
  auto d = decide_restart(MakeGang(4).Launched().Running(0).Running(1).Failed(2, 3).Running(3).Obj(), 0, Restarts(3));
  EXPECT_EQ(d.message, "rank 2 exited with code 3");
}

TEST(RestartPolicy, MessageCarriesTheWorkersLastLogLine) {
  const std::string tail = "[info] rank 0 starting\n[error] config error: parallel.sp 3 does not divide 130\n\n";
  auto bad = decide_restart(MakeGang(2).Launched().Failed(0, 1).Message(tail).Running(1).Obj(), 0, Restarts(3));
  EXPECT_EQ(bad.message,
            "rank 0 exited with code 1 (bad config or input); not retried: "
            "[error] config error: parallel.sp 3 does not divide 130");
  auto lost = decide_restart(MakeGang(2).Launched().Failed(1, 3).Message("peer 0 closed\n").Running(0).Obj(), 0,
                             Restarts(3));
  EXPECT_EQ(lost.message, "rank 1 exited with code 3: peer 0 closed");
  EXPECT_EQ(last_message_line(""), "");
  EXPECT_EQ(last_message_line(" \n\n"), "");
  EXPECT_EQ(last_message_line("one line"), "one line");
  EXPECT_EQ(last_message_line(std::string(500, 'x'), 10), "xxxxxxxxxx...");
}

TEST(RestartPolicy, BackoffDoublesAndCaps) {
  struct Row { int restarts; int base; int cap; long want; };
  for (const Row& r : std::vector<Row>{{0, 10, 300, 0}, {1, 10, 300, 10}, {2, 10, 300, 20}, {3, 10, 300, 40},
                                       {6, 10, 300, 300}, {50, 10, 300, 300}, {3, 0, 300, 0}, {1, 7, 5, 5}}) {
    SCOPED_TRACE(r.restarts);
    EXPECT_EQ(restart_backoff(r.restarts, Restarts(10, r.base, r.cap)).count(), r.want);
  }
}

TEST(SuccessPolicy, Table) {
  struct Row { std::string name; GangObservation gang; bool want; };
  const std::vector<Row> rows = {
      {"all succeeded", MakeGang(3).Succeeded(0).Succeeded(1).Succeeded(2).Obj(), true},
      {"one still running", MakeGang(3).Succeeded(0).Running(1).Succeeded(2).Obj(), false},
      {"one missing", MakeGang(3).Succeeded(0).Succeeded(2).Obj(), false},
      {"one failed", MakeGang(2).Succeeded(0).Failed(1, 3).Obj(), false},
      {"empty gang", MakeGang(0).Obj(), false},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    EXPECT_EQ(gang_succeeded(r.gang), r.want);
  }
}

TEST(PhasePolicy, Table) {
  struct Row { std::string name; GangObservation gang; PhaseFacts facts; std::string want; int ready; };
  const std::vector<Row> rows = {
      {"nothing yet", MakeGang(2).Obj(), {}, kPhasePending, 0},
      {"some pending", MakeGang(2).Running(0).Pending(1).Obj(), {}, kPhasePending, 1},
      {"all running", MakeGang(2).AllRunning().Obj(), {}, kPhaseRunning, 2},
      // Ready is the worker's /ready probe: a rank that runs but has not
      // finished a step does not train yet.
      {"running but not ready", MakeGang(2).Running(0, false).Running(1).Obj(), {}, kPhasePending, 1},
      {"restart waits for ready", MakeGang(2).Running(0, false).Running(1).Obj(), {false, false, false, true},
       kPhaseRestarting, 1},
      {"terminating does not count", MakeGang(2).Running(0).Terminating(1).Obj(), {}, kPhasePending, 1},
      {"restart in progress", MakeGang(2).Running(0).Obj(), {false, false, false, true}, kPhaseRestarting, 1},
      {"restart done once all run", MakeGang(2).AllRunning().Obj(), {false, false, false, true}, kPhaseRunning, 2},
      {"suspended wins over running", MakeGang(2).AllRunning().Obj(), {false, false, true, false}, kPhaseSuspended, 2},
      {"failed wins", MakeGang(2).AllRunning().Obj(), {true, true, true, true}, kPhaseFailed, 2},
      {"succeeded", MakeGang(2).Obj(), {false, true, false, false}, kPhaseSucceeded, 0},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    PhaseView v = compute_phase(r.gang, r.facts);
    EXPECT_EQ(v.phase, r.want);
    EXPECT_EQ(v.ready, r.ready);
  }
}

TEST(TtlPolicy, Table) {
  const TimePoint t0 = *parse_time("2026-01-01T00:00:00Z");
  struct Row { std::string name; TrainingJobSpec spec; std::string phase, done; TimePoint now; std::optional<long> want; };
  const std::vector<Row> rows = {
      {"no ttl", MakeJob("a", "n").TypedSpec(), kPhaseSucceeded, "2026-01-01T00:00:00Z", t0, std::nullopt},
      {"running", MakeJob("a", "n").TTL(10).TypedSpec(), kPhaseRunning, "", t0, std::nullopt},
      {"just finished", MakeJob("a", "n").TTL(10).TypedSpec(), kPhaseSucceeded, "2026-01-01T00:00:00Z", t0, 10000},
      {"failed counts too", MakeJob("a", "n").TTL(10).TypedSpec(), kPhaseFailed, "2026-01-01T00:00:00Z",
       t0 + std::chrono::seconds(4), 6000},
      {"expired", MakeJob("a", "n").TTL(10).TypedSpec(), kPhaseSucceeded, "2026-01-01T00:00:00Z",
       t0 + std::chrono::seconds(11), -1000},
      {"ttl zero", MakeJob("a", "n").TTL(0).TypedSpec(), kPhaseSucceeded, "2026-01-01T00:00:00Z", t0, 0},
      // Whole seconds truncated 1.9 s to 1 s and 0.9 s to 0 (deleted at once).
      {"sub-second remainder kept", MakeJob("a", "n").TTL(2).TypedSpec(), kPhaseSucceeded, "2026-01-01T00:00:00Z",
       t0 + std::chrono::milliseconds(1100), 900},
      {"no completion time counts as now", MakeJob("a", "n").TTL(10).TypedSpec(), kPhaseSucceeded, "",
       t0 + std::chrono::seconds(100), 10000},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    TrainingJobStatus st;
    st.phase = r.phase;
    st.completion_time = r.done;
    auto got = ttl_remaining(r.spec, st, r.now);
    ASSERT_EQ(got.has_value(), r.want.has_value());
    if (got) {
      EXPECT_EQ(got->count(), *r.want);
    }
  }
}

TEST(SpecValidation, Table) {
  struct Row { std::string name; nlohmann::json job; std::string want_field; };
  const std::vector<Row> rows = {
      {"tiny is valid", MakeJob("a", "n").Obj(), ""},
      {"isp divisible", MakeJob("a", "n").Replicas(8).Parallel("isp", 4, 2).Obj(), ""},
      {"replicas not divisible by sp", MakeJob("a", "n").Replicas(6).Parallel("isp", 4, 1).Obj(), "spec.replicas"},
      {"replicas not divisible by wp", MakeJob("a", "n").Replicas(6).Parallel("isp", 1, 4).Obj(), "spec.replicas"},
      {"sp without isp", MakeJob("a", "n").Replicas(4).Parallel("dp", 2, 1).Obj(), "spec.worker.parallel.strategy"},
      {"unknown strategy", MakeJob("a", "n").Parallel("tensor", 1, 1).Obj(), "spec.worker.parallel.strategy"},
      {"zero replicas", MakeJob("a", "n").Replicas(0).Obj(), "spec.replicas"},
      {"empty image", MakeJob("a", "n").Image("").Obj(), "spec.image"},
      {"bucket 0", MakeJob("a", "n").BucketMB(0).Obj(), "spec.worker.parallel.bucket_cap_mb"},
      {"bucket neither auto nor a number",
       [] {
         Json j = MakeJob("a", "n").Obj();
         j["spec"]["worker"]["parallel"]["bucket_cap_mb"] = "big";
         return j;
       }(),
       "spec.worker.parallel.bucket_cap_mb"},
      {"bucket at the bound", MakeJob("a", "n").BucketMB(contract::kMaxBucketCapMb).Obj(), ""},
      {"bucket above the bound", MakeJob("a", "n").BucketMB(4097).Obj(), "spec.worker.parallel.bucket_cap_mb"},
      {"bucket 1e14", MakeJob("a", "n").BucketMB(1e14).Obj(), "spec.worker.parallel.bucket_cap_mb"},
      {"bucket NaN", MakeJob("a", "n").BucketMB(NAN).Obj(), "spec.worker.parallel.bucket_cap_mb"},
      {"bucket inf", MakeJob("a", "n").BucketMB(INFINITY).Obj(), "spec.worker.parallel.bucket_cap_mb"},
      {"tuning maxMB above the bound",
       MakeJob("a", "n").Spec("tuning", {{"bucketSize", {{"enabled", true}, {"minMB", 1}, {"maxMB", 5000}}}}).Obj(),
       "spec.tuning.bucketSize.maxMB"},
      {"backoff above cap", MakeJob("a", "n").Backoff(100, 50).Obj(), "spec.restartPolicy.backoffSeconds"},
      {"reserved volume name", MakeJob("a", "n").Template({{"volumes", {{{"name", "weft-config"}}}}}).Obj(),
       "spec.template.volumes"},
      {"contract env override", MakeJob("a", "n").Template({{"env", {{{"name", "RANK"}, {"value", "7"}}}}}).Obj(),
       "spec.template.env"},
      {"tuning bounds", MakeJob("a", "n").Spec("tuning", {{"bucketSize", {{"enabled", true}, {"minMB", 8}, {"maxMB", 2}}}}).Obj(),
       "spec.tuning.bucketSize"},
      {"tuning final check out of range",
       MakeJob("a", "n").Spec("tuning", {{"bucketSize", {{"enabled", true}, {"confirmRounds", 9}}}}).Obj(),
       "spec.tuning.bucketSize.confirmRounds"},
      {"tuning final check of 2 rounds",
       MakeJob("a", "n").Spec("tuning", {{"bucketSize", {{"enabled", true}, {"confirmRounds", 2}}}}).Obj(), ""},
      // spec.procsPerPod: ISP groups are ranks, so sp and wp divide pods x procsPerPod.
      {"isp sp across the pods' ranks", MakeJob("a", "n").Replicas(2).Spec("procsPerPod", 2).Parallel("isp", 4, 1).Obj(), ""},
      {"isp sp not dividing the ranks",
       MakeJob("a", "n").Replicas(3).Spec("procsPerPod", 2).Parallel("isp", 4, 1).Obj(), "spec.replicas"},
      {"procsPerPod 0", MakeJob("a", "n").Spec("procsPerPod", 0).Obj(), "spec.procsPerPod"},
      {"procsPerPod above the bound", MakeJob("a", "n").Spec("procsPerPod", 257).Obj(), "spec.procsPerPod"},
      {"procsPerPod neither auto nor a number", MakeJob("a", "n").Spec("procsPerPod", "all").Obj(), "spec.procsPerPod"},
      {"procsPerPod auto without a GPU limit", MakeJob("a", "n").Spec("procsPerPod", "auto").Obj(), "spec.procsPerPod"},
      {"procsPerPod above the GPU limit",
       MakeJob("a", "n").Spec("procsPerPod", 3).Spec("resources", {{"limits", {{"nvidia.com/gpu", 2}}}}).Obj(),
       "spec.procsPerPod"},
      {"procsPerPod at the GPU limit",
       MakeJob("a", "n").Spec("procsPerPod", 2).Spec("resources", {{"limits", {{"nvidia.com/gpu", 2}}}}).Obj(), ""},
      // Numbers beyond an int are refused, not wrapped (2^32 + 2 read as 2).
      {"procsPerPod beyond 32 bits", MakeJob("a", "n").Spec("procsPerPod", 4294967298LL).Obj(), "spec.procsPerPod"},
      {"replicas a fraction", MakeJob("a", "n").Spec("replicas", 2.5).Obj(), "spec.replicas"},
      {"sp beyond 32 bits",
       MakeJob("a", "n").Replicas(2).Spec("worker", {{"parallel", {{"strategy", "isp"}, {"sp", 4294967298LL}}}}).Obj(),
       "spec.worker.parallel.sp"},
      {"sp beyond 64 bits",
       MakeJob("a", "n").Spec("worker", {{"parallel", {{"strategy", "isp"}, {"sp", 18446744073709551615ULL}}}}).Obj(),
       "spec.worker.parallel.sp"},
      {"procsPerPod auto above 256 GPUs",
       MakeJob("a", "n").Spec("procsPerPod", "auto").Spec("resources", {{"limits", {{"nvidia.com/gpu", 1000}}}}).Obj(),
       "spec.procsPerPod"},
      {"procsPerPod auto at 256 GPUs",
       MakeJob("a", "n").Spec("procsPerPod", "auto").Spec("resources", {{"limits", {{"nvidia.com/gpu", 256}}}}).Obj(), ""},
      {"shmSize not a quantity", MakeJob("a", "n").Spec("shmSize", "1GB").Obj(), "spec.shmSize"},
      {"shmSize zero", MakeJob("a", "n").Spec("shmSize", "0").Obj(), "spec.shmSize"},
      {"grace period for a long checkpoint", MakeJob("a", "n").Template({{"terminationGracePeriodSeconds", 900}}).Obj(), ""},
      {"negative grace period", MakeJob("a", "n").Template({{"terminationGracePeriodSeconds", -1}}).Obj(),
       "spec.template.terminationGracePeriodSeconds"},
      {"grace period not a number", MakeJob("a", "n").Template({{"terminationGracePeriodSeconds", "10m"}}).Obj(),
       "spec.template.terminationGracePeriodSeconds"},
      // The port the operator scrapes and opens in the pod: never wrapped
      // into range (2^32 + 9400 read as 9400).
      {"metrics port", MakeJob("a", "n").Spec("worker", {{"metrics", {{"port", 9500}}}}).Obj(), ""},
      {"metrics port 0 (off)", MakeJob("a", "n").Spec("worker", {{"metrics", {{"port", 0}}}}).Obj(), ""},
      {"metrics port above 65535", MakeJob("a", "n").Spec("worker", {{"metrics", {{"port", 70000}}}}).Obj(),
       "spec.worker.metrics.port"},
      {"metrics port beyond 32 bits", MakeJob("a", "n").Spec("worker", {{"metrics", {{"port", 4294976696LL}}}}).Obj(),
       "spec.worker.metrics.port"},
      {"metrics port negative", MakeJob("a", "n").Spec("worker", {{"metrics", {{"port", -1}}}}).Obj(),
       "spec.worker.metrics.port"},
      {"metrics port a word", MakeJob("a", "n").Spec("worker", {{"metrics", {{"port", "http"}}}}).Obj(),
       "spec.worker.metrics.port"},
      // Quoted digits are a number to the worker's YAML reader, so to the operator too.
      {"metrics port in quotes", MakeJob("a", "n").Spec("worker", {{"metrics", {{"port", "9400"}}}}).Obj(), ""},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    testing::ExpectFirstSpecError(r.job, r.want_field);
  }
}

// The job's name is its Service's and, with the rank, each pod's hostname.
TEST(SpecValidation, JobNameFitsTheChildrenItNames) {
  const auto spec = [](int replicas) { return parse_spec(MakeJob("a", "n").Replicas(replicas).Obj()["spec"]); };
  EXPECT_TRUE(validate_name("llm-7b", spec(4)).empty());
  EXPECT_TRUE(validate_name(std::string(61, 'a'), spec(10)).empty());  // a-9: 63
  for (const std::string& bad : {std::string(64, 'a'), std::string("dotted.name"), std::string("7b"),
                                std::string("ends-"), std::string(62, 'a')}) {
    SCOPED_TRACE(bad);
    auto errors = validate_name(bad, spec(11));
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_EQ(errors[0].field, "metadata.name");
  }
}

// The bucket cap's one rule (weft_contract.h), in the worker's words at the
// spec's field: the bound, and the value that broke it.
TEST(SpecValidation, BucketCapNamesTheFieldAndTheBound) {
  auto errors = validate(parse_spec(MakeJob("a", "n").BucketMB(1e14).Obj()["spec"]));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].field, "spec.worker.parallel.bucket_cap_mb");
  EXPECT_EQ(errors[0].message, "must be auto or a number of MiB in (0, 4096], got 1e+14");
}

// The CRD states the same bound as the schema maximum of the tuning range,
// so an API server refuses what the operator would refuse.
TEST(SpecValidation, TheCrdMaximumIsTheContractsBucketCapBound) {
  YAML::Node crd = YAML::LoadFile(std::string(WEFT_SOURCE_DIR) + "/charts/weft/crds/weft.dev_trainingjobs.yaml");
  YAML::Node bucket = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
                         ["tuning"]["properties"]["bucketSize"]["properties"];
  ASSERT_TRUE(bucket) << "spec.tuning.bucketSize not found in the CRD";
  for (const char* f : {"minMB", "maxMB"}) {
    ASSERT_TRUE(bucket[f]["maximum"]) << f;
    EXPECT_EQ(bucket[f]["maximum"].as<double>(), contract::kMaxBucketCapMb) << f;
    EXPECT_TRUE(bucket[f]["exclusiveMinimum"].as<bool>()) << f << ": 0 is not a cap";
  }
}

TEST(SpecValidation, WrongJsonTypeIsReportedNotDefaulted) {
  std::vector<SpecError> errors;
  parse_spec(MakeJob("a", "n").Spec("replicas", "four").Obj()["spec"], &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].field, "spec.replicas");
}

TEST(Conditions, TransitionTimeOnlyChangesOnFlip) {
  TrainingJobStatus st;
  st.set_condition(kCondReady, false, "A", "m", 1, "t1");
  st.set_condition(kCondReady, false, "B", "m2", 2, "t2");
  ASSERT_EQ(st.conditions.size(), 1u);
  EXPECT_EQ(st.conditions[0].last_transition_time, "t1");
  EXPECT_EQ(st.conditions[0].reason, "B");
  st.set_condition(kCondReady, true, "C", "", 2, "t3");
  EXPECT_EQ(st.conditions[0].last_transition_time, "t3");
  auto round = parse_status(to_json(st));
  EXPECT_EQ(to_json(round), to_json(st));
}

TEST(Clock, RoundTrip) {
  auto t = parse_time("2026-03-04T05:06:07Z");
  ASSERT_TRUE(t);
  EXPECT_EQ(format_time(*t), "2026-03-04T05:06:07Z");
  auto micro = parse_time("2026-03-04T05:06:07.250000Z");
  ASSERT_TRUE(micro);
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::milliseconds>(*micro - *t).count(), 250);
  EXPECT_EQ(format_micro_time(*micro), "2026-03-04T05:06:07.250000Z");
  EXPECT_FALSE(parse_time("yesterday"));
}

}  // namespace
}  // namespace weft::tj
