// The operator under a misbehaving network and control plane: watch streams
// cut by a proxy, and the API server restarted mid-test. In every case it
// must resume (or relist) and converge, and never create a second pod for a
// rank. HostileSpec (below): careless and hostile TrainingJob manifests.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "integration/harness.h"
#include "integration/tcp_proxy.h"
#include "kube/kube_config.h"
#include "trainingjob/constants.h"
#include "weft_contract.h"

namespace weft::it {
namespace {

std::map<std::string, std::string> read_env(const std::string& dir) {
  std::map<std::string, std::string> env;
  std::ifstream in(dir + "/env");
  std::string line;
  while (std::getline(in, line))
    if (auto eq = line.find('='); eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  return env;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A kubeconfig identical to `src` but pointing at 127.0.0.1:port.
std::string kubeconfig_via(const std::string& src, int port, const std::string& out) {
  std::string text = read_file(src);
  auto pos = text.find("server: https://127.0.0.1:");
  auto end = text.find('\n', pos);
  text.replace(pos, end - pos, "server: https://127.0.0.1:" + std::to_string(port));
  std::ofstream(out) << text;
  return out;
}

// Every pod name exists once and every job has exactly `replicas` live pods
// of one attempt.
::testing::AssertionResult converged(kube::KubeApi& api, const std::string& ns, const std::string& job, size_t replicas,
                                     const std::string& attempt) {
  kube::ListOptions o;
  o.label_selector = std::string(tj::kLabelJob) + "=" + job;
  auto pods = api.list(kube::kPods, ns, o);
  if (!pods) return ::testing::AssertionFailure() << pods.error().message;
  std::set<std::string> ranks;
  for (const auto& p : pods->items) {
    if (p["metadata"]["labels"][tj::kLabelAttempt] != attempt)
      return ::testing::AssertionFailure() << p["metadata"]["name"] << " has attempt " << p["metadata"]["labels"][tj::kLabelAttempt];
    if (!ranks.insert(p["metadata"]["labels"][tj::kLabelRank].get<std::string>()).second)
      return ::testing::AssertionFailure() << "duplicate rank " << p["metadata"]["labels"][tj::kLabelRank];
  }
  if (ranks.size() != replicas) return ::testing::AssertionFailure() << ranks.size() << " pods, want " << replicas;
  return ::testing::AssertionSuccess();
}

TEST(Robustness, WatchesCutByAProxyResumeAndConverge) {
  TestNamespace ns("it-proxy");
  auto env = read_env(env_dir());
  TcpProxy proxy(std::stoi(env.at("APISERVER_PORT")));
  const std::string kc = kubeconfig_via(kubeconfig_path(), proxy.port(), env_dir() + "/kubeconfig-proxy-" + ns.name());
  InProcessOperator op(ns.name(), kc);
  ASSERT_TRUE(eventually([&] { return op.controller().workers_running(); }));

  std::atomic<bool> cutting{true};
  std::thread cutter([&] {
    while (cutting) {
      std::this_thread::sleep_for(400ms);
      proxy.cut_all();
    }
  });
  ASSERT_TRUE(admin_api().create(kube::kTrainingJobs, ns.name(), job_json("cut-a", 3)).ok());
  ASSERT_TRUE(eventually([&] { return converged(admin_api(), ns.name(), "cut-a", 3, "0"); }, 60s));
  // Let several cuts land on established watches before changing the world.
  ASSERT_TRUE(eventually([&] { return proxy.cuts() >= 3; }, 10s));
  set_pod_phase(ns.name(), "cut-a-2", "Failed", contract::kExitPeerLost);
  ASSERT_TRUE(admin_api().create(kube::kTrainingJobs, ns.name(), job_json("cut-b", 2)).ok());
  ASSERT_TRUE(eventually([&] { return converged(admin_api(), ns.name(), "cut-a", 3, "1"); }, 60s));
  ASSERT_TRUE(eventually([&] { return converged(admin_api(), ns.name(), "cut-b", 2, "0"); }, 60s));
  ASSERT_TRUE(eventually([&] { return proxy.cuts() >= 6; }, 10s));
  cutting = false;
  cutter.join();
  // Quiet again: the state must stay converged (no late duplicates, no extra restarts).
  std::this_thread::sleep_for(1500ms);
  EXPECT_TRUE(converged(admin_api(), ns.name(), "cut-a", 3, "1"));
  EXPECT_TRUE(converged(admin_api(), ns.name(), "cut-b", 2, "0"));
  EXPECT_EQ(status_of(ns.name(), "cut-a")["restarts"], 1);
  EXPECT_GE(proxy.cuts(), 6);
  EXPECT_GT(op.controller().pods().watches(), 3) << "watches were never re-established";
}

// Restarting the API server would break every other test sharing the
// fixture, so this one runs its own control plane.
class OwnControlPlane : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / unique_name("weft-it-restart");
    std::filesystem::create_directories(dir_);
    ASSERT_EQ(sh("start"), 0) << "testenv start failed:\n" << read_file(dir_ / "testenv.out");
    // The kubectl of the control plane's own release (testenv's env file).
    const std::string kubectl = read_env(dir_.string())["WEFT_KUBE_BIN"] + "/kubectl --kubeconfig " + kc();
    ASSERT_EQ(std::system((kubectl + " apply -f " WEFT_SOURCE_DIR "/manifests/crd/ >/dev/null && " + kubectl +
                           " wait --for condition=established crd/trainingjobs.weft.dev --timeout=60s >/dev/null")
                              .c_str()),
              0);
    api_ = std::make_unique<kube::KubeApi>(kube::load_kubeconfig(kc()));
  }
  void TearDown() override {
    api_.reset();
    sh("stop");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  int sh(const std::string& cmd) {
    return std::system((std::string(WEFT_SOURCE_DIR) + "/localcluster/testenv.sh " + cmd + " " + dir_.string() +
                        " >>" + dir_.string() + "/testenv.out 2>&1")
                           .c_str());
  }
  std::string kc() const { return (dir_ / "kubeconfig").string(); }
  std::filesystem::path dir_;
  std::unique_ptr<kube::KubeApi> api_;
};

TEST_F(OwnControlPlane, ApiServerRestartMidTestConverges) {
  InProcessOperator op("default", kc());
  ASSERT_TRUE(api_->create(kube::kTrainingJobs, "default", job_json("rs-a", 3)).ok());
  ASSERT_TRUE(eventually([&] { return converged(*api_, "default", "rs-a", 3, "0"); }, 30s));
  const long watches_before = op.controller().jobs().watches();

  ASSERT_EQ(sh("restart-apiserver"), 0) << "apiserver did not come back";
  // Changes made right after the restart must reach the operator through
  // re-established watches (or a relist).
  auto fail = api_->merge_patch(kube::kPods, "default", "rs-a-1",
                                {{"status", {{"phase", "Failed"},
                                             {"containerStatuses", {{{"name", "worker"}, {"image", "x"}, {"imageID", ""},
                                                                     {"restartCount", 0}, {"ready", false},
                                                                     {"state", {{"terminated", {{"exitCode", 3}}}}}}}}}}},
                                true);
  ASSERT_TRUE(fail.ok()) << fail.error().message;
  ASSERT_TRUE(api_->create(kube::kTrainingJobs, "default", job_json("rs-b", 2)).ok());
  ASSERT_TRUE(eventually([&] { return converged(*api_, "default", "rs-a", 3, "1"); }, 60s));
  ASSERT_TRUE(eventually([&] { return converged(*api_, "default", "rs-b", 2, "0"); }, 60s));
  std::this_thread::sleep_for(1s);
  EXPECT_TRUE(converged(*api_, "default", "rs-a", 3, "1"));
  auto job = api_->get(kube::kTrainingJobs, "default", "rs-a");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ((*job)["status"]["restarts"], 1);
  EXPECT_GT(op.controller().jobs().watches(), watches_before);
}

// Hostile and careless manifests: values of the wrong type or size, names
// and combinations the pods or PodGroups could not carry, changes to a
// running gang, and its PodGroup taken away behind the operator's back.
// Every bad input is refused at apply with the field named, or ends in
// Failed/InvalidSpec naming it with no pods and no PodGroup; nothing is
// silently launched as something else.
class HostileSpec : public OperatorTest {
 protected:
  HostileSpec() : OperatorTest("it-hostile") {}
  // The Failed condition's message when its reason is InvalidSpec, else "".
  std::string invalid_spec(const std::string& job) {
    for (const auto& c : status_of(ns(), job).value("conditions", Json::array()))
      if (c.value("type", "") == tj::kCondFailed && c.value("reason", "") == tj::kReasonInvalidSpec)
        return c.value("message", "");
    return "";
  }
  // Creates `job`, waits for Failed/InvalidSpec naming `field`; no pods, no PodGroup.
  void expect_refused(const Json& job, const std::string& field) {
    const std::string name = job["metadata"]["name"];
    SCOPED_TRACE(name + " / " + field);
    create(job);
    ASSERT_TRUE(eventually([&] { return phase_of(ns(), name) == tj::kPhaseFailed; })) << status_of(ns(), name).dump();
    const std::string msg = invalid_spec(name);
    EXPECT_NE(msg.find(field), std::string::npos) << status_of(ns(), name).dump();
    EXPECT_TRUE(job_pods(ns(), name, true).empty());
    EXPECT_FALSE(podgroup(kube::kPodGroups, name));
    EXPECT_FALSE(podgroup(kube::kVolcanoPodGroups, name));
  }
  std::optional<Json> podgroup(const kube::Resource& r, const std::string& name) {
    auto res = admin_api().get(r, ns(), name);
    if (!res) return std::nullopt;
    return *res;
  }
};

// The user writes 2^32 + 2 for procsPerPod (int-or-string: the schema has no
// bounds) or for worker.parallel.sp (an int64 to the schema). Read as 32-bit
// ints they wrapped to 2, and the job launched 2 ranks per pod, or passed the
// sp check a 2-rank ISP group would: a job other than the one written. Both
// must be refused, naming the field.
TEST_F(HostileSpec, NumbersBeyondInt32AreRefusedNotWrapped) {
  Json procs = job_json("procs-2p32", 2);
  procs["spec"]["procsPerPod"] = 4294967298LL;
  expect_refused(procs, "spec.procsPerPod");
  EXPECT_NE(invalid_spec("procs-2p32").find("4294967298"), std::string::npos) << invalid_spec("procs-2p32");

  Json sp = job_json("sp-2p32", 2);
  sp["spec"]["worker"]["parallel"] = {{"strategy", "isp"}, {"sp", 4294967298LL}};
  // The CRD's CEL rule, in 64 bits, refuses it at apply (the operator's own
  // check, the same rule, is unit-tested in cel_cases_test.cc).
  auto r = admin_api().create(kube::kTrainingJobs, ns(), sp);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("divisible by spec.worker.parallel.sp"), std::string::npos) << r.error().message;
}

// procsPerPod: auto on a pod whose nvidia.com/gpu limit is 1000: auto escaped
// the 1..256 bound a number has, and pods launched `weft-run --nproc 1000`
// with 1000 metrics ports (and replicas x GPUs could overflow WORLD_SIZE).
TEST_F(HostileSpec, AutoRanksPerPodIsBoundedLikeANumber) {
  Json job = job_json("auto-1000", 2);
  job["spec"]["procsPerPod"] = "auto";
  job["spec"]["resources"] = {{"limits", {{"nvidia.com/gpu", 1000}}}};
  expect_refused(job, "spec.procsPerPod");
  EXPECT_NE(invalid_spec("auto-1000").find("more than 256"), std::string::npos) << invalid_spec("auto-1000");
}

// scheduling.schedulerName "-gang-" and queue "research." pass the CRD's
// character pattern and the operator's old character check, which promised a
// DNS name; neither is one, and no Volcano Queue (a DNS-named object) can be
// "research.". The API server takes both (the CRD's pattern allows them): the PodGroup and the pods
// were created and waited for a scheduler and a queue that cannot exist.
// They must be refused first, naming the job's field.
TEST_F(HostileSpec, SchedulerAndQueueNamesThatAreNoDnsNamesAreInvalidSpec) {
  Json sched = job_json("dash-scheduler", 2);
  sched["spec"]["scheduling"] = {{"gang", "podgroup"}, {"schedulerName", "-gang-"}};
  expect_refused(sched, "spec.scheduling.schedulerName");

  Json queue = job_json("dot-queue", 2);
  queue["spec"]["scheduling"] = {{"gang", "podgroup"}, {"provider", "volcano"}, {"queue", "research."}};
  expect_refused(queue, "spec.scheduling.queue");
}

// Job names the API server takes for a TrainingJob but not for its children:
// 64 characters (too long for the Service name and the weft.dev/job label),
// a dot (no Service name), 61 characters with 100 replicas (pod hostname
// `<name>-99` over 63). The first two left the job Pending forever with no
// condition (the Service was refused, the operator only logged it); the last
// failed as CreateFailed naming the pod's hostname. All must be InvalidSpec
// naming metadata.name.
TEST_F(HostileSpec, JobNamesItsChildrenCannotCarryAreInvalidSpec) {
  expect_refused(job_json(std::string(64, 'n'), 1), "metadata.name");
  expect_refused(job_json("dotted.name", 1), "metadata.name");
  expect_refused(job_json(std::string(61, 'h'), 100), "metadata.name");
  EXPECT_NE(invalid_spec(std::string(61, 'h')).find("at most 60"), std::string::npos) << invalid_spec(std::string(61, 'h'));
}

// The gang waits for its scheduler when someone deletes its PodGroup (a
// cleanup script, `kubectl delete podgroups --all`), then edits the recreated
// one's minMember. scheduler-plugins then holds the pods forever ("PodGroup
// not found", or a gang of 5 that never comes); the operator only ensured the
// PodGroup at launch, so the job hung Pending. It must restore it, and leave
// one that someone else took over alone, saying so.
TEST_F(HostileSpec, APodGroupDeletedOrEditedWhileTheGangWaitsIsRestored) {
  Json job = job_json("lost-pg", 2);
  job["spec"]["scheduling"] = {{"gang", "podgroup"}};
  create(job);
  ASSERT_TRUE(eventually([&] { return job_pods(ns(), "lost-pg").size() == 2 && podgroup(kube::kPodGroups, "lost-pg"); }));
  const std::string uid = (*get_job(ns(), "lost-pg"))["metadata"]["uid"];
  const std::string first = (*podgroup(kube::kPodGroups, "lost-pg"))["metadata"]["uid"];
  // The operator may create it again at once (a reconcile for the pods): no
  // wait for its absence, only for a new one.
  ASSERT_TRUE(admin_api().remove(kube::kPodGroups, ns(), "lost-pg").ok());
  unschedulable("lost-pg-0", "pod group lost-pg not found");
  ASSERT_TRUE(eventually([&] {
    auto pg = podgroup(kube::kPodGroups, "lost-pg");
    return pg && (*pg)["metadata"]["uid"] != first;
  }, 10s)) << "the PodGroup was not created again; " << status_of(ns(), "lost-pg").dump();
  EXPECT_EQ((*podgroup(kube::kPodGroups, "lost-pg"))["metadata"]["ownerReferences"][0]["uid"], uid);

  ASSERT_TRUE(admin_api().merge_patch(kube::kPodGroups, ns(), "lost-pg", {{"spec", {{"minMember", 5}}}}).ok());
  unschedulable("lost-pg-1", "pre-filter: not enough pods in pod group lost-pg: 2 < 5");
  ASSERT_TRUE(eventually([&] { return (*podgroup(kube::kPodGroups, "lost-pg"))["spec"]["minMember"] == 2; }, 10s))
      << podgroup(kube::kPodGroups, "lost-pg")->dump();
  // Taken over by someone else (its owner reference dropped, its spec
  // theirs): the job says so, leaves it alone, and takes the name back once
  // it is gone, within the 30 s it looks again with no event to wake it.
  std::this_thread::sleep_for(500ms);  // no reconcile of the edit above still in flight
  ASSERT_TRUE(admin_api().merge_patch(kube::kPodGroups, ns(), "lost-pg",
                                      {{"metadata", {{"ownerReferences", nullptr}}}, {"spec", {{"minMember", 1}}}}).ok());
  unschedulable("lost-pg-0", "pre-filter: the pod group lost-pg has 1 member");
  ASSERT_TRUE(eventually([&] {
    for (const auto& c : status_of(ns(), "lost-pg").value("conditions", Json::array()))
      if (c.value("type", "") == tj::kCondGangScheduled) return c.value("reason", "") == tj::kReasonPodGroupUnavailable;
    return false;
  }, 10s)) << status_of(ns(), "lost-pg").dump();
  EXPECT_EQ((*podgroup(kube::kPodGroups, "lost-pg"))["spec"]["minMember"], 1) << "someone else's PodGroup was changed";
  ASSERT_TRUE(admin_api().remove(kube::kPodGroups, ns(), "lost-pg").ok());
  ASSERT_TRUE(eventually([&] {
    auto pg = podgroup(kube::kPodGroups, "lost-pg");
    return pg && (*pg)["metadata"].contains("ownerReferences") && (*pg)["spec"]["minMember"] == 2;
  }, 45s)) << "the job's PodGroup was not created again after the foreign one went";
  // Still the same gang: nothing relaunched or restarted.
  for (const auto& p : job_pods(ns(), "lost-pg", true)) EXPECT_EQ(p["metadata"]["labels"][tj::kLabelAttempt], "0");
  EXPECT_EQ(status_of(ns(), "lost-pg")["restarts"], 0);
}

// A running gang-scheduled job is patched to gang: none, then back on with
// the other provider. The relaunched pods no longer name the old PodGroup,
// which stayed (a Volcano PodGroup keeps holding its queue's quota) until the
// job was deleted. The old one must go; the new provider's must exist.
TEST_F(HostileSpec, GangSchedulingTurnedOffOrSwitchedLeavesNoStalePodGroup) {
  Json job = job_json("switch", 2);
  job["spec"]["scheduling"] = {{"gang", "podgroup"}, {"provider", "volcano"}, {"queue", "research"}};
  create(job);
  ASSERT_TRUE(eventually([&] { return job_pods(ns(), "switch").size() == 2 && podgroup(kube::kVolcanoPodGroups, "switch"); }));
  set_all_running(ns(), "switch");
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "switch") == tj::kPhaseRunning; }));

  patch_spec("switch", {{"scheduling", {{"gang", "none"}, {"provider", nullptr}, {"queue", nullptr}}}});
  ASSERT_TRUE(eventually([&] {
    auto pods = job_pods(ns(), "switch", true);
    return pods.size() == 2 && pods[0]["metadata"]["labels"][tj::kLabelAttempt] == "1" &&
           pods[1]["metadata"]["labels"][tj::kLabelAttempt] == "1";
  })) << status_of(ns(), "switch").dump();
  for (const auto& p : job_pods(ns(), "switch")) EXPECT_FALSE(p["spec"].value("schedulerName", "") == tj::kVolcanoScheduler);
  ASSERT_TRUE(eventually([&] { return !podgroup(kube::kVolcanoPodGroups, "switch"); }, 10s))
      << "the Volcano PodGroup outlived gang scheduling";

  patch_spec("switch", {{"scheduling", {{"gang", "podgroup"}}}});
  ASSERT_TRUE(eventually([&] { return podgroup(kube::kPodGroups, "switch").has_value(); }));
  patch_spec("switch", {{"scheduling", {{"provider", "volcano"}}}});
  ASSERT_TRUE(eventually([&] {
    return podgroup(kube::kVolcanoPodGroups, "switch") && !podgroup(kube::kPodGroups, "switch");
  }, 10s)) << "the scheduler-plugins PodGroup outlived the switch to Volcano";
  EXPECT_EQ(status_of(ns(), "switch")["restarts"], 0);
}

// A running gang-scheduled job is patched: procsPerPod 1 -> 2 relaunches the
// gang with the new WORLD_SIZE (the PodGroup still counts pods); then to
// auto without a GPU limit, which fails the job as InvalidSpec and takes its
// pods and PodGroup away instead of leaving the old gang running.
TEST_F(HostileSpec, RanksPerPodChangedOnARunningGangRelaunchesOrFailsIt) {
  Json job = job_json("live-ppp", 2);
  job["spec"]["scheduling"] = {{"gang", "podgroup"}};
  create(job);
  ASSERT_TRUE(eventually([&] { return job_pods(ns(), "live-ppp").size() == 2; }));
  set_all_running(ns(), "live-ppp");
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "live-ppp") == tj::kPhaseRunning; }));

  patch_spec("live-ppp", {{"procsPerPod", 2}});
  ASSERT_TRUE(eventually([&] {
    auto pods = job_pods(ns(), "live-ppp", true);
    return pods.size() == 2 && env_value(pods[0], "WORLD_SIZE") == "4" && env_value(pods[1], "WORLD_SIZE") == "4";
  })) << status_of(ns(), "live-ppp").dump();
  EXPECT_EQ((*podgroup(kube::kPodGroups, "live-ppp"))["spec"]["minMember"], 2);
  EXPECT_EQ(status_of(ns(), "live-ppp")["ranks"], 4);

  patch_spec("live-ppp", {{"procsPerPod", "auto"}});
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "live-ppp") == tj::kPhaseFailed; }));
  EXPECT_NE(invalid_spec("live-ppp").find("spec.procsPerPod"), std::string::npos) << status_of(ns(), "live-ppp").dump();
  ASSERT_TRUE(eventually([&] { return job_pods(ns(), "live-ppp").empty() && !podgroup(kube::kPodGroups, "live-ppp"); }));
}

// The careless values that were already handled, kept as a record of what
// the probes found: the schema names the field at apply, the CRD's CEL rules
// refuse at apply with the rule's message, and what neither can state ends in
// InvalidSpec naming the field. Refused jobs cost no further writes.
TEST_F(HostileSpec, CarelessValuesAreNamedAtApplyOrInTheFailedCondition) {
  std::vector<std::pair<std::function<void(Json&)>, std::string>> at_apply = {
      {[](Json& s) { s["procsPerPod"] = 2.5; }, "spec.procsPerPod"},
      {[](Json& s) { s["procsPerPod"] = true; }, "spec.procsPerPod"},
      {[](Json& s) { s["replicas"] = 2147483648LL; }, "spec.replicas"},
      {[](Json& s) { s["replicas"] = "2"; }, "spec.replicas"},
      {[](Json& s) { s["suspend"] = "yes"; }, "spec.suspend"},
      {[](Json& s) { s["scheduling"] = {{"gang", "Podgroup"}}; }, "spec.scheduling.gang"},
      {[](Json& s) { s["scheduling"] = {{"gang", "podgroup"}, {"provider", "kueue"}}; }, "spec.scheduling.provider"},
      {[](Json& s) { s["scheduling"] = {{"gang", "podgroup"}, {"schedulerName", ""}}; }, "spec.scheduling.schedulerName"},
      {[](Json& s) { s["scheduling"] = {{"gang", "podgroup"}, {"schedulerName", "gäng"}}; }, "spec.scheduling.schedulerName"},
      {[](Json& s) { s["scheduling"] = {{"gang", "podgroup"}, {"scheduleTimeoutSeconds", 0}}; },
       "spec.scheduling.scheduleTimeoutSeconds"},
      {[](Json& s) { s["scheduling"] = {{"gang", "podgroup"}, {"scheduleTimeoutSeconds", 1e18}}; },
       "spec.scheduling.scheduleTimeoutSeconds"},
      {[](Json& s) { s["scheduling"] = {{"gang", "podgroup"}, {"queue", std::string(254, 'q')}}; }, "spec.scheduling.queue"},
      {[](Json& s) { s["template"] = {{"terminationGracePeriodSeconds", -1}}; }, "spec.template.terminationGracePeriodSeconds"},
      {[](Json& s) { s["template"] = {{"terminationGracePeriodSeconds", "600"}}; }, "spec.template.terminationGracePeriodSeconds"},
      {[](Json& s) { s["worker"]["parallel"]["sp"] = 0; }, "spec.worker.parallel.sp"},
  };
  int n = 0;
  for (const auto& [mutate, field] : at_apply) {
    Json job = job_json("apply-" + std::to_string(n++), 2);
    mutate(job["spec"]);
    auto r = admin_api().create(kube::kTrainingJobs, ns(), job);
    ASSERT_FALSE(r.ok()) << job["spec"].dump() << " was accepted";
    EXPECT_EQ(r.error().status, 422) << r.error().message;
    EXPECT_NE(r.error().message.find(field), std::string::npos) << r.error().message;
  }

  std::vector<std::pair<std::function<void(Json&)>, std::string>> by_operator = {
      {[](Json& s) { s["procsPerPod"] = "AUTO"; }, "spec.procsPerPod"},
      {[](Json& s) { s["procsPerPod"] = -1; }, "spec.procsPerPod"},
      {[](Json& s) { s["procsPerPod"] = 257; }, "spec.procsPerPod"},
      {[](Json& s) { s["procsPerPod"] = "auto"; }, "spec.procsPerPod"},  // no GPU limit
      {[](Json& s) { s["procsPerPod"] = "auto", s["resources"] = {{"limits", {{"nvidia.com/gpu", "0"}}}}; },
       "spec.procsPerPod"},
      {[](Json& s) { s["procsPerPod"] = 3, s["resources"] = {{"limits", {{"nvidia.com/gpu", 2}}}}; }, "spec.procsPerPod"},
      {[](Json& s) { s["procsPerPod"] = "auto", s["resources"] = {{"limits", {{"nvidia.com/gpu", 3}}}},
                     s["worker"]["parallel"] = {{"strategy", "isp"}, {"sp", 4}}; },
       "divisible by spec.worker.parallel.sp"},
      {[](Json& s) { s["scheduling"] = {{"gang", "podgroup"}}, s["template"] = {{"schedulerName", "default-scheduler"}}; },
       "spec.template.schedulerName"},
      // procsPerPod "": the API server stores the string, the operator refuses it.
      {[](Json& s) { s["procsPerPod"] = ""; }, "spec.procsPerPod"},
      // spec.worker by the worker's own rules (the operator reads it with
      // the worker's parser): fields no operator source names.
      {[](Json& s) { s["worker"]["model"] = {{"d_model", 130}, {"n_heads", 4}}; }, "spec.worker.model.n_heads: 4 does not divide model.d_model 130"},
      {[](Json& s) { s["worker"]["optim"] = {{"lr", 1e300}}; }, "spec.worker.optim.lr"},
      {[](Json& s) { s["worker"]["data"] = {{"shard", "x"}}; }, "spec.worker.data.shard"},
      {[](Json& s) { s["template"] = {{"env", {{{"name", "WEFT_STEPS"}, {"value", "many"}}}}}; },
       "spec.template.env: WEFT_STEPS"},
  };
  // The CRD's CEL rules: refused at apply with the rule's message.
  const std::vector<std::tuple<std::function<void(Json&)>, std::string, std::string>> by_cel = {
      {[](Json& s) { s["procsPerPod"] = 3, s["worker"]["parallel"] = {{"strategy", "isp"}, {"wp", 4}}; },
       "divisible by spec.worker.parallel.wp", "divisible by spec.worker.parallel.wp"},
      {[](Json& s) { s["scheduling"] = {{"provider", "volcano"}}; }, "spec.scheduling.provider",
       "apply only with gang: podgroup"},
      {[](Json& s) { s["scheduling"] = {{"gang", "podgroup"}, {"queue", "research"}}; }, "spec.scheduling.queue",
       "spec.scheduling.queue is Volcano's field"},
      {[](Json& s) { s["scheduling"] = {{"gang", "podgroup"}, {"provider", "volcano"}, {"scheduleTimeoutSeconds", 60}}; },
       "spec.scheduling.scheduleTimeoutSeconds", "spec.scheduling.scheduleTimeoutSeconds is scheduler-plugins' field"},
  };
  for (const auto& [mutate, field, rule] : by_cel) {
    Json job = job_json("cel-" + std::to_string(n++), 2);
    mutate(job["spec"]);
    auto r = admin_api().create(kube::kTrainingJobs, ns(), job);
    ASSERT_FALSE(r.ok()) << job["spec"].dump() << " was accepted";
    EXPECT_EQ(r.error().status, 422) << r.error().message;
    EXPECT_NE(r.error().message.find(rule), std::string::npos) << r.error().message;
  }
  std::vector<std::string> names;
  for (const auto& [mutate, field] : by_operator) {
    Json job = job_json("op-" + std::to_string(names.size()), 2);
    mutate(job["spec"]);
    names.push_back(job["metadata"]["name"]);
    create(job);
  }
  for (size_t i = 0; i < names.size(); ++i) {
    SCOPED_TRACE(names[i] + " / " + by_operator[i].second);
    ASSERT_TRUE(eventually([&] { return phase_of(ns(), names[i]) == tj::kPhaseFailed; }))
        << status_of(ns(), names[i]).dump();
    EXPECT_NE(invalid_spec(names[i]).find(by_operator[i].second), std::string::npos) << status_of(ns(), names[i]).dump();
    EXPECT_TRUE(job_pods(ns(), names[i], true).empty());
    EXPECT_FALSE(podgroup(kube::kPodGroups, names[i]));
    EXPECT_FALSE(podgroup(kube::kVolcanoPodGroups, names[i]));
  }
  // Refused for good: no reconcile loop keeps writing.
  std::this_thread::sleep_for(500ms);
  const auto before = op_->api().request_counts();
  std::this_thread::sleep_for(1500ms);
  const auto after = op_->api().request_counts();
  for (const auto& [verb, calls] : after) {
    if (verb != "get" && verb != "list" && verb != "watch") {
      EXPECT_EQ(calls, before.count(verb) ? before.at(verb) : 0) << verb;
    }
  }
}

}  // namespace
}  // namespace weft::it
