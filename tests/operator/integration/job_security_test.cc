// What a TrainingJob may make the operator do, against the real API server:
// each job gets a NetworkPolicy of its own that goes with it, none when the
// operator is told not to; the rendezvous Secret is created (never read) and
// created again for a new gang; hostPath volumes and ServiceAccounts in
// spec.template are refused unless the operator allows them. The local
// control plane does not enforce NetworkPolicies: these tests check the
// objects, not the traffic.
#include "integration/harness.h"
#include "trainingjob/builders.h"
#include "trainingjob/constants.h"
#include "weft_contract.h"

namespace weft::it {
namespace {

const Json kOperatorPeer = Json::parse(R"({
  "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "weft-system"}},
  "podSelector": {"matchLabels": {"app.kubernetes.io/name": "weft-operator"}}})");

class JobSecurity : public ::testing::Test {
 protected:
  const std::string& ns() const { return ns_.name(); }
  void start(tj::ControllerOptions opts) {
    opts.ns = ns();
    opts.workers = 2;
    op_ = std::make_unique<InProcessOperator>(std::move(opts));
  }
  void create(const Json& job) {
    auto r = admin_api().create(kube::kTrainingJobs, ns(), job);
    ASSERT_TRUE(r.ok()) << r.error().message;
  }
  std::optional<Json> get(const kube::Resource& res, const std::string& name) {
    auto r = admin_api().get(res, ns(), name);
    return r.ok() ? std::optional<Json>(*r) : std::nullopt;
  }
  std::string uid_of(const std::string& job) { return (*get_job(ns(), job))["metadata"]["uid"]; }
  // The Failed condition's message when it has reason InvalidSpec, else "".
  std::string invalid_spec_message(const std::string& job) {
    for (const auto& c : status_of(ns(), job).value("conditions", Json::array()))
      if (c["type"] == tj::kCondFailed && c["reason"] == tj::kReasonInvalidSpec) return c.value("message", "");
    return "";
  }

  TestNamespace ns_{"it-security"};
  std::unique_ptr<InProcessOperator> op_;
};

TEST_F(JobSecurity, EveryJobGetsItsNetworkPolicyWhichFollowsTheSpecAndGoesWithTheJob) {
  start({.metrics_from = Json::array({kOperatorPeer})});
  create(job_json("guarded", 2));
  ASSERT_TRUE(eventually([&] { return job_pods(ns(), "guarded").size() == 2; }));
  ASSERT_TRUE(eventually([&] { return get(kube::kNetworkPolicies, tj::network_policy_name("guarded")).has_value(); }));
  Json np = *get(kube::kNetworkPolicies, tj::network_policy_name("guarded"));
  EXPECT_EQ(np["metadata"]["ownerReferences"][0]["uid"], uid_of("guarded"));
  // The policy selects exactly the job's pods.
  for (const auto& pod : job_pods(ns(), "guarded"))
    for (const auto& [k, v] : np["spec"]["podSelector"]["matchLabels"].items())
      EXPECT_EQ(pod["metadata"]["labels"].value(k, ""), v) << k;
  ASSERT_EQ(np["spec"]["ingress"].size(), 2u) << np.dump();
  EXPECT_EQ(np["spec"]["ingress"][0]["from"][0]["podSelector"], np["spec"]["podSelector"]);
  EXPECT_EQ(np["spec"]["ingress"][1]["ports"][0]["port"], contract::metrics_port(0));
  EXPECT_EQ(np["spec"]["ingress"][1]["from"], Json::array({kOperatorPeer}));

  // A new metrics port reaches the policy (and the relaunched gang).
  ASSERT_TRUE(admin_api()
                  .merge_patch(kube::kTrainingJobs, ns(), "guarded", {{"spec", {{"worker", {{"metrics", {{"port", 9555}}}}}}}})
                  .ok());
  EXPECT_TRUE(eventually([&] {
    auto p = get(kube::kNetworkPolicies, tj::network_policy_name("guarded"));
    return p && (*p)["spec"]["ingress"].size() == 2 && (*p)["spec"]["ingress"][1]["ports"][0]["port"] == 9555;
  })) << get(kube::kNetworkPolicies, tj::network_policy_name("guarded")).value_or(Json()).dump();

  ASSERT_TRUE(admin_api().remove(kube::kTrainingJobs, ns(), "guarded", kube::Propagation::Background).ok());
  EXPECT_TRUE(eventually([&] { return !get(kube::kNetworkPolicies, tj::network_policy_name("guarded")); }, 60s))
      << "the NetworkPolicy survived its job";
}

TEST_F(JobSecurity, NoNetworkPolicyWhenTheOperatorIsToldNotTo) {
  start({.network_policy = false});
  create(job_json("open", 1));
  ASSERT_TRUE(eventually([&] { return job_pods(ns(), "open").size() == 1; }));
  std::this_thread::sleep_for(300ms);
  auto list = admin_api().list(kube::kNetworkPolicies, ns());
  ASSERT_TRUE(list.ok()) << list.error().message;
  EXPECT_TRUE(list->items.empty()) << list->items.size() << " NetworkPolicies";
}

TEST_F(JobSecurity, TheRendezvousSecretIsCreatedAgainForANewGang) {
  start({});
  create(job_json("token", 2));
  ASSERT_TRUE(eventually([&] { return job_pods(ns(), "token").size() == 2; }));
  ASSERT_TRUE(eventually([&] { return !status_of(ns(), "token").value("attemptStartTime", "").empty(); }));
  const std::string secret = tj::secret_name("token", uid_of("token"));
  ASSERT_TRUE(get(kube::kSecrets, secret).has_value());
  for (const auto& pod : job_pods(ns(), "token"))
    for (const auto& e : pod["spec"]["containers"][0]["env"])
      if (e["name"] == contract::kEnvRdzvToken) {
        EXPECT_EQ(e["valueFrom"]["secretKeyRef"]["name"], secret);
      }
  // The operator does not watch Secrets: a deleted one comes back when the
  // next gang is launched, since its pods need it.
  ASSERT_TRUE(admin_api().remove(kube::kSecrets, ns(), secret).ok());
  set_pod_phase(ns(), "token-0", "Failed", contract::kExitPeerLost);
  ASSERT_TRUE(eventually([&] {
    auto pods = job_pods(ns(), "token");
    return status_of(ns(), "token").value("attempt", 0) == 1 && pods.size() == 2 &&
           pods[0]["metadata"]["labels"][tj::kLabelAttempt] == "1";
  }, 30s));
  EXPECT_TRUE(get(kube::kSecrets, secret).has_value()) << "the new gang's pods have no Secret to read";
}

TEST_F(JobSecurity, HostPathAndServiceAccountsAreRefusedUnlessAllowed) {
  start({});
  Json host = job_json("hostpath", 2);
  host["spec"]["template"] = {{"volumes", {{{"name", "ckpt"}, {"hostPath", {{"path", "/tmp/ckpt"}}}}}},
                              {"volumeMounts", {{{"name", "ckpt"}, {"mountPath", "/ckpt"}}}}};
  create(host);
  Json account = job_json("account", 1);
  account["spec"]["template"] = {{"serviceAccountName", "deployer"}};
  create(account);
  Json token = job_json("token", 1);
  token["spec"]["template"] = {
      {"volumes", {{{"name", "api"}, {"projected", {{"sources", {{{"serviceAccountToken", {{"path", "t"}}}}}}}}}}}};
  create(token);
  for (const auto& [job, field] : std::vector<std::pair<std::string, std::string>>{
           {"hostpath", "spec.template.volumes[0].hostPath"},
           {"account", "spec.template.serviceAccountName"},
           {"token", "spec.template.volumes[0].projected.sources[0].serviceAccountToken"}}) {
    ASSERT_TRUE(eventually([&] { return phase_of(ns(), job) == tj::kPhaseFailed; })) << job;
    EXPECT_NE(invalid_spec_message(job).find(field), std::string::npos) << status_of(ns(), job).dump();
  }
  std::this_thread::sleep_for(300ms);
  for (const char* job : {"hostpath", "account", "token"}) EXPECT_TRUE(job_pods(ns(), job, true).empty()) << job;

  // The same kinds of spec with the operator allowing them: the pods carry them.
  op_.reset();
  start({.allow = {.host_path = true, .service_account = true}});
  ASSERT_TRUE(admin_api()
                  .create(kube::Resource{"", "v1", "serviceaccounts", "ServiceAccount"}, ns(),
                          {{"apiVersion", "v1"}, {"kind", "ServiceAccount"}, {"metadata", {{"name", "deployer"}}}})
                  .ok());
  host["metadata"]["name"] = "hostpath-ok";
  host["spec"]["template"]["serviceAccountName"] = "deployer";
  create(host);
  ASSERT_TRUE(eventually([&] { return job_pods(ns(), "hostpath-ok").size() == 2; }))
      << status_of(ns(), "hostpath-ok").dump();
  for (const auto& pod : job_pods(ns(), "hostpath-ok")) {
    EXPECT_EQ(pod["spec"]["serviceAccountName"], "deployer");
    bool mounted = false;
    for (const auto& v : pod["spec"]["volumes"]) mounted |= v["name"] == "ckpt" && v.contains("hostPath");
    EXPECT_TRUE(mounted) << pod["spec"]["volumes"].dump();
  }
  EXPECT_EQ(invalid_spec_message("hostpath-ok"), "");
}

}  // namespace
}  // namespace weft::it
