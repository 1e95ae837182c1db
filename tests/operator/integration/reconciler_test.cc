// Reconciler behaviour against the real API server: each test sets up the
// world, lets the operator converge, and asserts the state of the world
// (objects, env, labels, owner references, status), never call sequences.
#include <yaml-cpp/yaml.h>

#include "integration/harness.h"
#include "kube/events.h"
#include "kube/kube_config.h"
#include "trainingjob/builders.h"
#include "trainingjob/constants.h"
#include "weft_contract.h"

namespace weft::it {
namespace {

std::set<std::string> attempts_of(const std::vector<Json>& pods) {
  std::set<std::string> out;
  for (const auto& p : pods) out.insert(p["metadata"]["labels"][tj::kLabelAttempt].get<std::string>());
  return out;
}

class Reconcile : public OperatorTest {
 protected:
  Reconcile() : OperatorTest("it-reconcile") {}
  bool absent(const kube::Resource& r, const std::string& name) {
    auto res = admin_api().get(r, ns(), name);
    return !res.ok() && res.error().not_found();
  }
  std::string world(const std::string& job) {
    std::string out = "status=" + status_of(ns(), job).dump() + " pods=";
    for (const auto& p : job_pods(ns(), job, true))
      out += p["metadata"]["name"].get<std::string>() + "@" + p["metadata"]["labels"].value(tj::kLabelAttempt, "?") +
             (p["metadata"].contains("deletionTimestamp") ? "(terminating) " : " ");
    return out;
  }
  bool pods_are(const std::string& job, size_t n, const std::string& attempt) {
    auto pods = job_pods(ns(), job);
    return pods.size() == n && attempts_of(pods) == std::set<std::string>{attempt} &&
           job_pods(ns(), job, true).size() == n;
  }
};

TEST_F(Reconcile, CreatesTheGangWithTheWorkerContract) {
  create(job_json("llama", 3));
  ASSERT_TRUE(eventually([&] { return pods_are("llama", 3, "0"); })) << job_pods(ns(), "llama").size() << " pods";
  auto job = *get_job(ns(), "llama");
  const std::string uid = job["metadata"]["uid"];
  for (const auto& pod : job_pods(ns(), "llama")) {
    const std::string rank = pod["metadata"]["labels"][tj::kLabelRank];
    EXPECT_EQ(pod["metadata"]["name"], "llama-" + rank);
    EXPECT_EQ(pod["spec"]["hostname"], "llama-" + rank);
    EXPECT_EQ(pod["spec"]["subdomain"], "llama");
    EXPECT_EQ(env_value(pod, "RANK"), rank);
    EXPECT_EQ(env_value(pod, "WORLD_SIZE"), "3");
    EXPECT_EQ(env_value(pod, "MASTER_ADDR"), "llama-0.llama." + ns() + ".svc");
    EXPECT_EQ(env_value(pod, "MASTER_PORT"), "29500");  // the CRD default
    EXPECT_EQ(env_value(pod, "WEFT_ATTEMPT"), "0");
    EXPECT_EQ(env_value(pod, "WEFT_BUCKET_CAP_FILE"), "/etc/weft/bucket_cap_mb");  // the ConfigMap key below
    EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["uid"], uid);
    EXPECT_TRUE(pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"].get<bool>());
    EXPECT_EQ(pod["spec"]["containers"][0]["securityContext"]["capabilities"]["drop"][0], "ALL");
  }
  auto svc = admin_api().get(kube::kServices, ns(), "llama");
  ASSERT_TRUE(svc.ok());
  EXPECT_EQ((*svc)["spec"]["clusterIP"], "None");
  EXPECT_TRUE((*svc)["spec"]["publishNotReadyAddresses"].get<bool>());
  auto cm = admin_api().get(kube::kConfigMaps, ns(), "llama-config");
  ASSERT_TRUE(cm.ok());
  // The spec's cap travels in config.yaml; the key is the tuner's, empty until it writes.
  EXPECT_EQ((*cm)["data"]["bucket_cap_mb"], "");
  const YAML::Node config = YAML::Load((*cm)["data"]["config.yaml"].get<std::string>());
  EXPECT_EQ(config["preset"].as<std::string>(), "tiny");
  EXPECT_EQ(config["parallel"]["bucket_cap_mb"].as<double>(), 4);
  auto secret = admin_api().get(kube::kSecrets, ns(), tj::secret_name("llama", uid));
  ASSERT_TRUE(secret.ok());
  EXPECT_EQ((*secret)["data"]["token"].get<std::string>().size(), 88u);  // base64 of 64 hex chars
  for (const auto& child : {*svc, *cm, *secret}) EXPECT_EQ(child["metadata"]["ownerReferences"][0]["uid"], uid);

  ASSERT_TRUE(eventually([&] { return !status_of(ns(), "llama").value("attemptStartTime", "").empty(); }));
  Json st = status_of(ns(), "llama");
  EXPECT_EQ(st["phase"], tj::kPhasePending);
  EXPECT_EQ(st["attempt"], 0);
  EXPECT_EQ(st["observedGeneration"], 1);

  // Pods that run but whose /ready probe has not passed (no step finished
  // yet) are not training: the job stays Pending and says so.
  for (const auto& p : job_pods(ns(), "llama")) set_pod_phase(ns(), p["metadata"]["name"], "Running", std::nullopt, false);
  auto ready_message = [&] {
    for (const auto& c : status_of(ns(), "llama").value("conditions", Json::array()))
      if (c["type"] == tj::kCondReady) return c.value("message", "");
    return std::string();
  };
  ASSERT_TRUE(eventually([&] { return ready_message() == "0 of 3 ranks training, 3 running"; })) << ready_message();
  EXPECT_EQ(phase_of(ns(), "llama"), tj::kPhasePending);

  set_all_running(ns(), "llama");
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "llama") == tj::kPhaseRunning; }));
  st = status_of(ns(), "llama");
  EXPECT_EQ(st["readyReplicas"], 3);
  bool ready = false;
  for (const auto& c : st["conditions"]) ready |= c["type"] == tj::kCondReady && c["status"] == "True";
  EXPECT_TRUE(ready) << st.dump();
  // `kubectl describe` shows what happened.
  auto events = admin_api().list(kube::kEvents, ns());
  ASSERT_TRUE(events.ok());
  bool created_event = false;
  for (const auto& e : events->items) created_event |= e["reason"] == tj::kReasonPodsCreated;
  EXPECT_TRUE(created_event);
}

TEST_F(Reconcile, ReReconcilingAConvergedJobChangesNothing) {
  create(job_json("steady", 2));
  ASSERT_TRUE(eventually([&] { return pods_are("steady", 2, "0"); }));
  set_all_running(ns(), "steady");
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "steady") == tj::kPhaseRunning; }));
  std::this_thread::sleep_for(500ms);  // let the last status write settle
  auto versions = [&] {
    std::map<std::string, std::string> v;
    for (const auto& p : job_pods(ns(), "steady")) v[p["metadata"]["name"]] = p["metadata"]["resourceVersion"];
    for (auto [res, name] : std::vector<std::pair<kube::Resource, std::string>>{
             {kube::kServices, "steady"}, {kube::kConfigMaps, "steady-config"}, {kube::kNetworkPolicies, "steady"},
             {kube::kSecrets, tj::secret_name("steady", (*get_job(ns(), "steady"))["metadata"]["uid"])},
             {kube::kTrainingJobs, "steady"}})
      v[res.plural + "/" + name] = (*admin_api().get(res, ns(), name))["metadata"]["resourceVersion"];
    return v;
  };
  const auto before = versions();
  auto calls_before = op_->api().request_counts();
  // Poke the job several times without changing its spec: each poke is a reconcile.
  for (int i = 0; i < 5; ++i) {
    auto r = admin_api().merge_patch(kube::kTrainingJobs, ns(), "steady",
                                     {{"metadata", {{"annotations", {{"poke", std::to_string(i)}}}}}});
    ASSERT_TRUE(r.ok());
    std::this_thread::sleep_for(200ms);
  }
  std::this_thread::sleep_for(500ms);
  auto after = versions();
  after.erase("trainingjobs/steady");  // our own annotation pokes changed the job
  auto before_children = before;
  before_children.erase("trainingjobs/steady");
  EXPECT_EQ(after, before_children);
  auto calls_after = op_->api().request_counts();
  for (const char* verb : {"create", "update", "update_status", "patch", "delete"})
    EXPECT_EQ(calls_after[verb], calls_before[verb]) << verb << " calls during idempotent reconciles";
}

TEST_F(Reconcile, FailedRankRestartsTheWholeGang) {
  create(job_json("gang", 3));
  ASSERT_TRUE(eventually([&] { return pods_are("gang", 3, "0"); }));
  set_all_running(ns(), "gang");
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "gang") == tj::kPhaseRunning; }));
  set_pod_phase(ns(), "gang-1", "Failed", contract::kExitPeerLost);
  ASSERT_TRUE(eventually([&] { return status_of(ns(), "gang").value("restarts", 0) == 1; }));
  ASSERT_TRUE(eventually([&] { return pods_are("gang", 3, "1"); }, 20s)) << "new gang never appeared";
  Json st = status_of(ns(), "gang");
  EXPECT_EQ(st["attempt"], 1);
  bool restarting = false;
  for (const auto& c : st["conditions"])
    if (c["type"] == tj::kCondRestarting) {
      restarting = true;
      EXPECT_EQ(c["reason"], tj::kReasonRankFailed);
      EXPECT_NE(c["message"].get<std::string>().find("rank 1 (pod gang-1) exited with code 3"), std::string::npos) << c.dump();
    }
  EXPECT_TRUE(restarting) << st.dump();
  for (const auto& p : job_pods(ns(), "gang")) EXPECT_EQ(env_value(p, "WEFT_ATTEMPT"), "1");
  set_all_running(ns(), "gang");
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "gang") == tj::kPhaseRunning; }));
}

TEST_F(Reconcile, ExitCodeOneFailsTheJobWithoutRestart) {
  create(job_json("badcfg", 2));
  ASSERT_TRUE(eventually([&] { return pods_are("badcfg", 2, "0"); }));
  set_all_running(ns(), "badcfg");
  set_pod_phase(ns(), "badcfg-0", "Failed", contract::kExitBadConfig);
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "badcfg") == tj::kPhaseFailed; }));
  Json st = status_of(ns(), "badcfg");
  EXPECT_EQ(st["restarts"], 0);
  EXPECT_FALSE(st.value("completionTime", "").empty());
  bool failed = false;
  for (const auto& c : st["conditions"]) failed |= c["type"] == tj::kCondFailed && c["reason"] == tj::kReasonBadConfig;
  EXPECT_TRUE(failed) << st.dump();
  // The still-running rank is stopped; the failed one stays for its logs.
  ASSERT_TRUE(eventually([&] { return job_pods(ns(), "badcfg").size() == 1; })) << [&] {
    std::string pods;  // what is there instead, terminating ones too
    for (const auto& p : job_pods(ns(), "badcfg", true))
      pods += p["metadata"].value("name", "") + " uid " + p["metadata"].value("uid", "") + " phase " +
              p["status"].value("phase", "") + (p["metadata"].contains("deletionTimestamp") ? " (terminating)" : "") +
              "; ";
    return pods + "job status " + status_of(ns(), "badcfg").dump();
  }();
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(status_of(ns(), "badcfg")["attempt"], 0);
}

TEST_F(Reconcile, MaxRestartsEndsInFailed) {
  Json job = job_json("flaky", 2);
  job["spec"]["restartPolicy"] = {{"maxRestarts", 1}, {"backoffSeconds", 0}};
  create(job);
  ASSERT_TRUE(eventually([&] { return pods_are("flaky", 2, "0"); }));
  set_pod_phase(ns(), "flaky-0", "Failed", contract::kExitPeerLost);
  ASSERT_TRUE(eventually([&] { return pods_are("flaky", 2, "1"); }));
  set_pod_phase(ns(), "flaky-1", "Failed", contract::kExitCheckpointIo);
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "flaky") == tj::kPhaseFailed; }));
  Json st = status_of(ns(), "flaky");
  EXPECT_EQ(st["restarts"], 1);
  bool max = false;
  for (const auto& c : st["conditions"]) max |= c["type"] == tj::kCondFailed && c["reason"] == tj::kReasonMaxRestarts;
  EXPECT_TRUE(max) << st.dump();
}

// A counted restart waits its whole backoff before the new gang's pods exist,
// although status times have whole seconds only (the restart's fraction of a
// second once came off the backoff).
TEST_F(Reconcile, CountedRestartWaitsTheWholeBackoff) {
  Json job = job_json("backoff", 2);
  job["spec"]["restartPolicy"] = {{"maxRestarts", 3}, {"backoffSeconds", 2}};
  create(job);
  ASSERT_TRUE(eventually([&] { return pods_are("backoff", 2, "0"); }));
  set_all_running(ns(), "backoff");
  const auto failed_at = std::chrono::steady_clock::now();
  set_pod_phase(ns(), "backoff-1", "Failed", contract::kExitPeerLost);
  ASSERT_TRUE(eventually([&] { return pods_are("backoff", 2, "1"); }, 20s)) << world("backoff");
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - failed_at).count();
  EXPECT_GE(waited, 2.0) << "the new gang came " << waited << " s after the failure, within backoffSeconds 2";
  std::printf("relaunched %.2f s after the failure (backoffSeconds 2)\n", waited);
}

TEST_F(Reconcile, DeletedPodRestartsTheGangWithoutCounting) {
  create(job_json("evict", 2));
  ASSERT_TRUE(eventually([&] { return pods_are("evict", 2, "0"); }));
  ASSERT_TRUE(eventually([&] { return !status_of(ns(), "evict").value("attemptStartTime", "").empty(); }));
  ASSERT_TRUE(admin_api().remove(kube::kPods, ns(), "evict-1").ok());
  ASSERT_TRUE(eventually([&] { return pods_are("evict", 2, "1"); }, 20s)) << world("evict");
  Json st = status_of(ns(), "evict");
  EXPECT_EQ(st["restarts"], 1);
  EXPECT_EQ(st["restartsByCause"], Json({{"Deleted", 1}})) << st.dump();
  EXPECT_EQ(st["lastRestartCause"], "Deleted");
  bool deleted = false;
  for (const auto& c : st["conditions"]) deleted |= c["type"] == tj::kCondRestarting && c["reason"] == tj::kReasonRankDeleted;
  EXPECT_TRUE(deleted) << st.dump();
}

// With maxRestarts 0, ranks taken away from outside the job (a kubelet
// eviction, an API eviction as Kubernetes >= 1.26 marks it) still restart the
// gang, counted by cause; the first failure of the job's own then fails it.
TEST_F(Reconcile, DisruptionsDoNotCountAgainstMaxRestarts) {
  Json job = job_json("disrupt", 2);
  job["spec"]["restartPolicy"] = {{"maxRestarts", 0}, {"backoffSeconds", 30}};
  create(job);
  ASSERT_TRUE(eventually([&] { return pods_are("disrupt", 2, "0"); }));
  set_all_running(ns(), "disrupt");
  // The kubelet evicts rank 0 for node pressure: phase Failed, reason Evicted.
  ASSERT_TRUE(admin_api()
                  .merge_patch(kube::kPods, ns(), "disrupt-0",
                               {{"status", {{"phase", "Failed"}, {"reason", "Evicted"},
                                            {"message", "The node was low on resource: memory."}}}},
                               true)
                  .ok());
  // No backoff for a restart that does not count, despite backoffSeconds 30.
  ASSERT_TRUE(eventually([&] { return pods_are("disrupt", 2, "1"); }, 15s)) << world("disrupt");
  Json st = status_of(ns(), "disrupt");
  EXPECT_EQ(st["restartsByCause"], Json({{"Evicted", 1}})) << st.dump();
  bool evicted = false;
  for (const auto& c : st["conditions"])
    if (c["type"] == tj::kCondRestarting) {
      evicted = c["reason"] == tj::kReasonRankEvicted;
      EXPECT_NE(c["message"].get<std::string>().find("not counted against maxRestarts"), std::string::npos) << c.dump();
    }
  EXPECT_TRUE(evicted) << st.dump();

  // An API eviction on a server that marks it (DisruptionTarget), after the
  // worker stopped on SIGTERM.
  // (One patch: a Failed pod without the condition would be the worker's own
  // failure, and end the job.)
  set_all_running(ns(), "disrupt");
  const Json terminated = {{"name", tj::kContainerName}, {"image", "ghcr.io/weft-dev/weft:test"}, {"imageID", ""},
                           {"restartCount", 0}, {"ready", false},
                           {"state", {{"terminated", {{"exitCode", 143}, {"reason", "Error"},
                                                      {"startedAt", "2026-01-01T00:00:00Z"},
                                                      {"finishedAt", "2026-01-01T00:01:00Z"}}}}}};
  ASSERT_TRUE(admin_api()
                  .merge_patch(kube::kPods, ns(), "disrupt-1",
                               {{"status", {{"phase", "Failed"},
                                            {"conditions", {{{"type", "DisruptionTarget"}, {"status", "True"},
                                                             {"reason", "EvictionByEvictionAPI"}}}},
                                            {"containerStatuses", {terminated}}}}},
                               true)
                  .ok());
  ASSERT_TRUE(eventually([&] { return pods_are("disrupt", 2, "2"); }, 15s)) << world("disrupt");
  st = status_of(ns(), "disrupt");
  EXPECT_EQ(st["restarts"], 2);
  EXPECT_EQ(st["restartsByCause"], Json({{"Evicted", 2}})) << st.dump();

  // The worker's own failure counts: maxRestarts 0 ends the job.
  set_all_running(ns(), "disrupt");
  set_pod_phase(ns(), "disrupt-0", "Failed", contract::kExitPeerLost);
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "disrupt") == tj::kPhaseFailed; }));
  st = status_of(ns(), "disrupt");
  bool max = false;
  for (const auto& c : st["conditions"]) max |= c["type"] == tj::kCondFailed && c["reason"] == tj::kReasonMaxRestarts;
  EXPECT_TRUE(max) << st.dump();
  EXPECT_EQ(st["restarts"], 2);
}

TEST_F(Reconcile, SuspendDeletesPodsAndKeepsStateResumeStartsAFreshAttempt) {
  create(job_json("pause", 2));
  ASSERT_TRUE(eventually([&] { return pods_are("pause", 2, "0"); }));
  patch_spec("pause", {{"suspend", true}});
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "pause") == tj::kPhaseSuspended; }));
  ASSERT_TRUE(eventually([&] { return job_pods(ns(), "pause", true).empty(); }));
  EXPECT_TRUE(admin_api().get(kube::kConfigMaps, ns(), "pause-config").ok());
  EXPECT_TRUE(admin_api().get(kube::kSecrets, ns(), tj::secret_name("pause", (*get_job(ns(), "pause"))["metadata"]["uid"])).ok());
  EXPECT_EQ(status_of(ns(), "pause")["restarts"], 0);
  patch_spec("pause", {{"suspend", false}});
  ASSERT_TRUE(eventually([&] { return pods_are("pause", 2, "1"); }));
  // Status is written at the end of the reconcile that created the pods.
  ASSERT_TRUE(eventually([&] { return status_of(ns(), "pause").value("phase", "") == tj::kPhasePending; }));
  Json st = status_of(ns(), "pause");
  EXPECT_EQ(st["restarts"], 0);  // a resume is not a restart
  EXPECT_EQ(st["attempt"], 1);
  EXPECT_EQ(st["phase"], tj::kPhasePending);
}

TEST_F(Reconcile, SuccessSetsCompletionAndTtlDeletesTheJob) {
  Json job = job_json("done", 2);
  job["spec"]["ttlSecondsAfterFinished"] = 2;
  create(job);
  ASSERT_TRUE(eventually([&] { return pods_are("done", 2, "0"); }));
  set_pod_phase(ns(), "done-0", "Succeeded", 0);
  std::this_thread::sleep_for(300ms);
  EXPECT_NE(phase_of(ns(), "done"), tj::kPhaseSucceeded);  // one rank done is not success
  set_pod_phase(ns(), "done-1", "Succeeded", 0);
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "done") == tj::kPhaseSucceeded; })) << world("done");
  EXPECT_FALSE(status_of(ns(), "done").value("completionTime", "").empty());
  ASSERT_TRUE(eventually([&] { return !get_job(ns(), "done"); }, 20s)) << "TTL did not delete the job";
}

TEST_F(Reconcile, AJobThatEndsMidSearchStopsTuning) {
  Json job = job_json("tune-end", 2);
  job["spec"]["tuning"] = {{"bucketSize", {{"enabled", true}, {"minMB", 1}, {"maxMB", 8}}}};
  create(job);
  ASSERT_TRUE(eventually([&] { return pods_are("tune-end", 2, "0"); })) << world("tune-end");
  // The tuner's record in the middle of a search (these pods have no IP, so
  // the tuner itself never gets to scrape them and leaves it alone).
  Json tuning = {{"state", "Searching"},
                 {"currentBucketMB", 2},
                 {"trials", Json::array({{{"bucketMB", 4}, {"steps", 20}, {"medianStepSeconds", 0.5},
                                          {"exposedCommSeconds", 0.1}, {"score", 0.5}},
                                         {{"bucketMB", 2}, {"steps", 3}}})}};
  auto r = admin_api().merge_patch(kube::kTrainingJobs, ns(), "tune-end", {{"status", {{"tuning", tuning}}}}, true);
  ASSERT_TRUE(r.ok()) << r.error().message;
  set_pod_phase(ns(), "tune-end-0", "Succeeded", 0);
  set_pod_phase(ns(), "tune-end-1", "Succeeded", 0);
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "tune-end") == tj::kPhaseSucceeded; })) << world("tune-end");
  Json t = status_of(ns(), "tune-end")["tuning"];
  EXPECT_EQ(t["state"], "Stopped") << t.dump();
  EXPECT_EQ(t["currentBucketMB"], 2) << t.dump();  // what the ranks ran last
  EXPECT_FALSE(t.contains("chosenBucketMB")) << t.dump();
  EXPECT_EQ(t["trials"].size(), 2u) << t.dump();  // the record is kept
  EXPECT_TRUE(eventually([&] {
    auto events = admin_api().list(kube::kEvents, ns());
    if (!events.ok()) return false;
    for (const auto& e : events->items)
      if (e.value("reason", "") == "TuningStopped") return true;
    return false;
  })) << "no TuningStopped event";
}

TEST_F(Reconcile, JobDeletionCascadesThroughTheGarbageCollector) {
  create(job_json("gone", 2));
  ASSERT_TRUE(eventually([&] { return pods_are("gone", 2, "0"); }));
  ASSERT_TRUE(admin_api().get(kube::kConfigMaps, ns(), "gone-config").ok());
  const std::string secret = tj::secret_name("gone", (*get_job(ns(), "gone"))["metadata"]["uid"]);
  ASSERT_TRUE(admin_api().get(kube::kSecrets, ns(), secret).ok());
  ASSERT_TRUE(admin_api().remove(kube::kTrainingJobs, ns(), "gone", kube::Propagation::Background).ok());
  ASSERT_TRUE(eventually(
      [&] {
        return job_pods(ns(), "gone", true).empty() && absent(kube::kServices, "gone") &&
               absent(kube::kConfigMaps, "gone-config") && absent(kube::kSecrets, secret);
      },
      60s))
      << "children survived their owner";
}

TEST_F(Reconcile, InvalidSpecIsRejectedBySchemaOrFailedCondition) {
  // The schema rejects what it can express...
  Json bad = job_json("schema", 0);
  auto r = admin_api().create(kube::kTrainingJobs, ns(), bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().status, 422);
  EXPECT_NE(r.error().message.find("spec.replicas"), std::string::npos) << r.error().message;
  // ...the cross-field rules are CEL, which the API server enforces...
  Json cross = job_json("cross", 6);
  cross["spec"]["worker"]["parallel"] = {{"strategy", "isp"}, {"sp", 4}, {"wp", 2}};
  auto refused = admin_api().create(kube::kTrainingJobs, ns(), cross);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().status, 422);
  EXPECT_NE(refused.error().message.find("must be divisible by spec.worker.parallel.sp"), std::string::npos)
      << refused.error().message;
  // ...and the operator as well, seen here where CEL cannot state the rule:
  // procsPerPod auto (a string to CEL) takes the pods' 3 GPUs, 6 ranks, sp 4.
  cross = job_json("cross", 2);
  cross["spec"]["procsPerPod"] = "auto";
  cross["spec"]["resources"] = {{"limits", {{"nvidia.com/gpu", 3}}}};
  cross["spec"]["worker"]["parallel"] = {{"strategy", "isp"}, {"sp", 4}};
  create(cross);
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "cross") == tj::kPhaseFailed; }));
  Json st = status_of(ns(), "cross");
  bool invalid = false;
  for (const auto& c : st["conditions"])
    if (c["type"] == tj::kCondFailed && c["reason"] == tj::kReasonInvalidSpec) {
      invalid = true;
      EXPECT_NE(c["message"].get<std::string>().find("divisible by spec.worker.parallel.sp"), std::string::npos);
    }
  EXPECT_TRUE(invalid) << st.dump();
  std::this_thread::sleep_for(500ms);
  EXPECT_TRUE(job_pods(ns(), "cross", true).empty());
  EXPECT_TRUE(absent(kube::kConfigMaps, "cross-config"));
}

TEST_F(Reconcile, SpecChangeRelaunchesTheGangWithoutCountingARestart) {
  create(job_json("grow", 2));
  ASSERT_TRUE(eventually([&] { return pods_are("grow", 2, "0"); }));
  set_all_running(ns(), "grow");
  patch_spec("grow", {{"replicas", 3}, {"worker", {{"train", {{"steps", 50}}}}}});
  ASSERT_TRUE(eventually([&] { return pods_are("grow", 3, "1"); }, 20s)) << world("grow");
  for (const auto& p : job_pods(ns(), "grow")) EXPECT_EQ(env_value(p, "WORLD_SIZE"), "3");
  Json st = status_of(ns(), "grow");
  EXPECT_EQ(st["restarts"], 0);
  EXPECT_EQ(st["attempt"], 1);
  EXPECT_EQ(st["observedGeneration"], 2);
  auto cm = admin_api().get(kube::kConfigMaps, ns(), "grow-config");
  ASSERT_TRUE(cm.ok());
  EXPECT_NE((*cm)["data"]["config.yaml"].get<std::string>().find("steps: 50"), std::string::npos);
  // Annotations and labels alone change nothing.
  ASSERT_TRUE(admin_api().merge_patch(kube::kTrainingJobs, ns(), "grow", {{"metadata", {{"labels", {{"x", "y"}}}}}}).ok());
  std::this_thread::sleep_for(800ms);
  EXPECT_TRUE(pods_are("grow", 3, "1"));
}

// The reconciler alone, on caches the test controls: a reconcile runs when
// the test says, and a watch that is never started stands for one that lags
// behind the operator's own writes.
class DirectReconcile : public ::testing::Test {
 protected:
  DirectReconcile()
      : ns_("it-direct"),
        api_(kube::load_kubeconfig(kubeconfig_path()), kube::ApiOptions{100, 200}),
        jobs_(api_, kube::kTrainingJobs, ns()),
        pods_(api_, kube::kPods, ns(), kSelector, std::chrono::seconds(0), tj::kLabelJob),
        services_(api_, kube::kServices, ns(), kSelector, std::chrono::seconds(0)),
        configmaps_(api_, kube::kConfigMaps, ns(), kSelector, std::chrono::seconds(0)),
        events_(api_, "weft-operator"),
        reconciler_(api_, tj::Caches{jobs_, pods_, services_, configmaps_}, events_, nullptr) {}
  const std::string& ns() const { return ns_.name(); }
  void watch(std::initializer_list<kube::Informer*> informers) {
    for (kube::Informer* inf : informers) watching_.emplace_back([inf](std::stop_token stop) { inf->run(stop); });
  }
  tj::ReconcileResult reconcile(const std::string& job) { return reconciler_.reconcile(ns() + "/" + job); }
  long cached_generation(const std::string& job) {
    auto obj = jobs_.get(ns(), job);
    return obj ? (*obj)["metadata"].value("generation", 0L) : 0L;
  }
  // Reconciles until `pred` holds (the caches catch up in between).
  bool reconcile_until(const std::string& job, const std::function<bool()>& pred) {
    return eventually([&] {
      reconcile(job);
      return pred();
    });
  }
  long calls(const std::string& verb) const { return api_.request_counts()[verb]; }

  static inline const std::string kSelector = std::string(tj::kLabelManagedBy) + "=" + tj::kManagedBy;
  TestNamespace ns_;
  kube::KubeApi api_;
  kube::Informer jobs_, pods_, services_, configmaps_;
  kube::EventRecorder events_;
  tj::Reconciler reconciler_;
  std::vector<std::jthread> watching_;  // last: stopped before the caches go
};

// The ConfigMap created a moment ago is not in the cache when the spec
// changes. The relaunched gang must still read the new spec.worker (it once
// read the old one: the create answered AlreadyExists and the stale content
// was taken as current).
TEST_F(DirectReconcile, AConfigMapTheCacheHasNotSeenIsBroughtUpToDate) {
  watch({&jobs_, &pods_, &services_});  // the ConfigMap watch never runs
  auto config_yaml = [&] {
    auto cm = admin_api().get(kube::kConfigMaps, ns(), "lag-config");
    return cm.ok() ? (*cm)["data"].value(std::string(contract::kConfigKey), "") : "(none)";
  };
  create_job(ns(), job_json("lag", 2));
  ASSERT_TRUE(eventually([&] { return cached_generation("lag") == 1; }));
  reconcile("lag");  // creates the children and the gang
  ASSERT_NE(YAML::Load(config_yaml())["train"]["steps"].as<int>(0), 50) << config_yaml();
  patch_job_spec(ns(), "lag", {{"worker", {{"train", {{"steps", 50}}}}}});
  ASSERT_TRUE(eventually([&] { return cached_generation("lag") == 2; }));
  for (int i = 0; i < 3; ++i) reconcile("lag");
  EXPECT_EQ(YAML::Load(config_yaml())["train"]["steps"].as<int>(0), 50) << config_yaml();
}

// A relaunch writes the new attempt before it deletes a pod: were the pods
// deleted first and the status write lost, the next reconcile would take
// the missing ranks for deleted pods and count a restart.
TEST_F(DirectReconcile, ARelaunchWritesTheNewAttemptBeforeItDeletesAPod) {
  watch({&jobs_, &pods_, &services_, &configmaps_});
  create_job(ns(), job_json("order", 2));
  ASSERT_TRUE(eventually([&] { return cached_generation("order") == 1; }));
  ASSERT_TRUE(reconcile_until("order", [&] { return job_pods(ns(), "order").size() == 2; }));
  set_all_running(ns(), "order");
  ASSERT_TRUE(reconcile_until("order", [&] { return phase_of(ns(), "order") == tj::kPhaseRunning; }));

  // A spec change: the reconcile that sees it writes attempt 1 and deletes nothing.
  patch_job_spec(ns(), "order", {{"replicas", 3}});
  ASSERT_TRUE(eventually([&] { return cached_generation("order") == 2; }));
  const long deletes = calls("delete"), writes = calls("update_status");
  reconcile("order");
  EXPECT_EQ(calls("delete"), deletes);
  EXPECT_EQ(calls("update_status"), writes + 1);
  EXPECT_EQ(status_of(ns(), "order")["attempt"], 1);
  EXPECT_EQ(job_pods(ns(), "order").size(), 2u);  // attempt 0's, stale now
  ASSERT_TRUE(reconcile_until("order", [&] {
    auto pods = job_pods(ns(), "order", true);
    return pods.size() == 3 && attempts_of(pods) == std::set<std::string>{"1"};
  }));
  EXPECT_EQ(status_of(ns(), "order")["restarts"], 0);

  // A failed rank: the restart is on record before the gang is deleted.
  set_all_running(ns(), "order");
  ASSERT_TRUE(reconcile_until("order", [&] { return phase_of(ns(), "order") == tj::kPhaseRunning; }));
  set_pod_phase(ns(), "order-1", "Failed", 3);
  ASSERT_TRUE(eventually([&] {
    auto pod = pods_.get(ns(), "order-1");
    return pod && (*pod)["status"].value("phase", "") == "Failed";
  }));
  const long deletes_before_restart = calls("delete");
  reconcile("order");
  EXPECT_EQ(calls("delete"), deletes_before_restart);
  Json st = status_of(ns(), "order");
  EXPECT_EQ(st["attempt"], 2);
  EXPECT_EQ(st["restarts"], 1);
  EXPECT_EQ(job_pods(ns(), "order").size(), 3u);
  ASSERT_TRUE(reconcile_until("order", [&] {
    auto pods = job_pods(ns(), "order", true);
    return pods.size() == 3 && attempts_of(pods) == std::set<std::string>{"2"};
  }));
  EXPECT_EQ(status_of(ns(), "order")["restarts"], 1);
}

// With the pod watch behind, the relaunched gang's creates find the old
// attempt's pods still there (AlreadyExists). Those are deleted and their
// ranks created again, not taken for the new attempt's (which once launched
// a gang with a stale rank in it, then counted that rank as lost).
TEST_F(DirectReconcile, AnOldAttemptsPodTheCacheHasNotSeenIsReplaced) {
  watch({&jobs_, &services_, &configmaps_});  // the pod watch never runs
  create_job(ns(), job_json("behind", 2));
  ASSERT_TRUE(eventually([&] { return cached_generation("behind") == 1; }));
  ASSERT_TRUE(reconcile_until("behind", [&] { return job_pods(ns(), "behind").size() == 2; }));
  patch_job_spec(ns(), "behind", {{"worker", {{"train", {{"steps", 50}}}}}});
  ASSERT_TRUE(eventually([&] { return cached_generation("behind") == 2; }));
  ASSERT_TRUE(reconcile_until("behind", [&] {
    auto pods = job_pods(ns(), "behind", true);
    return pods.size() == 2 && attempts_of(pods) == std::set<std::string>{"1"} &&
           !status_of(ns(), "behind").value("attemptStartTime", "").empty();
  }));
  for (int i = 0; i < 3; ++i) reconcile("behind");
  Json st = status_of(ns(), "behind");
  EXPECT_EQ(st["attempt"], 1) << st.dump();
  EXPECT_EQ(st["restarts"], 0) << st.dump();
}

// --kueue, on an API server that does not serve Kueue's Workloads (this
// fixture's): the queue step decides to create the Workload and reports it
// created; finish() makes the create, and its refusal is what the one status
// write and the events say, in the same reconcile. No pod is created.
TEST_F(DirectReconcile, AWorkloadTheApiServerRefusesIsReportedInTheSameReconcile) {
  watch({&jobs_, &pods_, &services_, &configmaps_});
  kube::Informer workloads(api_, kube::kWorkloads, ns(), "", std::chrono::seconds(0), tj::kLabelJob);  // never run
  tj::Reconciler queued(api_, tj::Caches{jobs_, pods_, services_, configmaps_, nullptr, &workloads}, events_, nullptr);
  Json job = job_json("queued", 2);
  job["metadata"]["labels"] = {{tj::kLabelKueueQueue, "team-a"}};
  create_job(ns(), job);
  ASSERT_TRUE(eventually([&] { return cached_generation("queued") == 1; }));
  EXPECT_EQ(queued.reconcile(ns() + "/queued").kind, tj::ReconcileResult::Kind::Done);
  Json st = status_of(ns(), "queued");
  EXPECT_EQ(st.value("phase", ""), tj::kPhaseQueued) << st.dump();
  bool refused = false;
  for (const auto& c : st["conditions"])
    if (c["type"] == tj::kCondAdmitted) {
      refused = c["status"] == "False" && c["reason"] == tj::kReasonWorkloadUnavailable &&
                c["message"].get<std::string>().find("is not served") != std::string::npos;
      EXPECT_TRUE(refused) << c.dump();
    }
  EXPECT_TRUE(refused) << st.dump();
  std::vector<std::string> reasons;
  ASSERT_TRUE(eventually([&] {
    reasons.clear();
    auto list = admin_api().list(kube::kEvents, ns());
    if (list)
      for (const auto& e : list->items)
        if (e["involvedObject"].value("name", "") == "queued") reasons.push_back(e.value("reason", ""));
    return !reasons.empty();
  }));
  EXPECT_EQ(reasons, std::vector<std::string>{tj::kReasonWorkloadUnavailable});  // not WorkloadCreated too
  EXPECT_TRUE(job_pods(ns(), "queued", true).empty());
}

TEST_F(Reconcile, PodsTheApiServerRefusesFailTheJobAfterOneAttempt) {
  // Valid for the CRD schema (volumes are free-form) but not for the pod API.
  Json job = job_json("refused", 8);
  job["spec"]["template"] = {{"volumes", {{{"name", "Not_A_DNS_Label"}, {"emptyDir", Json::object()}}}}};
  auto before = op_->api().request_counts();
  create(job);
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "refused") == tj::kPhaseFailed; }));
  Json st = status_of(ns(), "refused");
  bool refused = false;
  for (const auto& c : st["conditions"])
    if (c["type"] == tj::kCondFailed && c["reason"] == tj::kReasonCreateFailed) {
      refused = true;
      EXPECT_NE(c["message"].get<std::string>().find("Not_A_DNS_Label"), std::string::npos) << c.dump();
    }
  EXPECT_TRUE(refused) << st.dump();
  std::this_thread::sleep_for(500ms);
  EXPECT_TRUE(job_pods(ns(), "refused", true).empty());
  // Slow start: one refused pod stops the launch; 4 children + 1 pod + 1 event.
  auto after = op_->api().request_counts();
  EXPECT_LE(after["create"] - before["create"], 6);
}

}  // namespace
}  // namespace weft::it
