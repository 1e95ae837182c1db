// The operator running as its own ServiceAccount (bound by
// manifests/rbac/rbac.yaml, installed by the kube fixture) can do its whole
// job: leader election in its own namespace, children (the NetworkPolicy and
// the Secret among them), status, events. Catches a ClusterRole that lacks a
// verb the code needs; and that account cannot read Secrets nor hold a Lease
// outside weft-system.
#include <fstream>
#include <sstream>

#include "integration/harness.h"
#include "kube/kube_config.h"
#include "trainingjob/builders.h"
#include "trainingjob/constants.h"
#include "weft_contract.h"

namespace weft::it {
namespace {

// The fixture's kubeconfig with the admin client certificate swapped for the
// operator ServiceAccount's static token (localcluster/testenv.sh tokens.csv).
std::string operator_kubeconfig(const std::string& out) {
  std::ifstream in(kubeconfig_path());
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  auto users = text.find("users:");
  auto contexts = text.find("contexts:");
  text.replace(users, contexts - users, "users:\n- name: weft-admin\n  user:\n    token: weft-operator-token\n");
  std::ofstream(out) << text;
  return out;
}

TEST(Rbac, OperatorServiceAccountHasEveryPermissionItUses) {
  TestNamespace ns("it-rbac");
  const std::string kc = operator_kubeconfig(env_dir() + "/kubeconfig-operator-" + ns.name());
  // The Lease lives in the operator's own namespace, the only one where its Role grants Leases.
  const std::string lease_name = "weft-operator-" + ns.name();
  OperatorProcess op({"--kubeconfig", kc, "--namespace", ns.name(), "--leader-elect", "--lease-namespace",
                      "weft-system", "--lease-name", lease_name, "--retry-period", "0.3", "--metrics-port", "0",
                      "--health-port", "0"},
                     env_dir() + "/logs/operator-rbac-" + ns.name() + ".log");
  Json job = job_json("rbac", 2);
  job["spec"]["restartPolicy"]["backoffSeconds"] = 0;
  ASSERT_TRUE(admin_api().create(kube::kTrainingJobs, ns.name(), job).ok());
  ASSERT_TRUE(eventually([&] { return job_pods(ns.name(), "rbac").size() == 2; }, 30s))
      << "see " << env_dir() << "/logs/operator-rbac-" << ns.name() << ".log";
  ASSERT_TRUE(eventually([&] { return !status_of(ns.name(), "rbac").value("attemptStartTime", "").empty(); }));
  set_pod_phase(ns.name(), "rbac-0", "Failed", contract::kExitPeerLost);  // exercises pod delete
  ASSERT_TRUE(eventually([&] { return status_of(ns.name(), "rbac").value("attempt", 0) == 1; }, 30s));
  auto lease = admin_api().get(kube::kLeases, "weft-system", lease_name);
  ASSERT_TRUE(lease.ok());
  EXPECT_FALSE((*lease)["spec"].value("holderIdentity", "").empty());
  const std::string uid = (*get_job(ns.name(), "rbac"))["metadata"]["uid"];
  EXPECT_TRUE(admin_api().get(kube::kSecrets, ns.name(), tj::secret_name("rbac", uid)).ok());
  EXPECT_TRUE(admin_api().get(kube::kNetworkPolicies, ns.name(), tj::network_policy_name("rbac")).ok());
  auto events = admin_api().list(kube::kEvents, ns.name());
  ASSERT_TRUE(events.ok());
  EXPECT_FALSE(events->items.empty()) << "operator could not record events";
  EXPECT_TRUE(op.running());
  admin_api().remove(kube::kLeases, "weft-system", lease_name);
}

// What the ServiceAccount must not do: read any Secret (it only creates the
// rendezvous Secret), or take a Lease anywhere but weft-system.
TEST(Rbac, OperatorServiceAccountCannotReadSecretsOrLeaseOutsideItsNamespace) {
  TestNamespace ns("it-rbac-deny");
  kube::KubeApi as_operator(kube::load_kubeconfig(operator_kubeconfig(env_dir() + "/kubeconfig-operator-" + ns.name())));
  const Json secret = {{"apiVersion", "v1"}, {"kind", "Secret"}, {"metadata", {{"name", "other"}}},
                       {"stringData", {{"k", "v"}}}};
  ASSERT_TRUE(admin_api().create(kube::kSecrets, ns.name(), secret).ok());
  auto forbidden = [](const auto& r) { return !r.ok() && r.error().status == 403; };
  EXPECT_TRUE(forbidden(as_operator.get(kube::kSecrets, ns.name(), "other")));
  EXPECT_TRUE(forbidden(as_operator.list(kube::kSecrets, ns.name())));
  EXPECT_TRUE(forbidden(as_operator.list(kube::kSecrets, "")));
  const Json lease = {{"apiVersion", "coordination.k8s.io/v1"}, {"kind", "Lease"}, {"metadata", {{"name", "x"}}},
                      {"spec", Json::object()}};
  EXPECT_TRUE(forbidden(as_operator.create(kube::kLeases, ns.name(), lease)));
  EXPECT_TRUE(forbidden(as_operator.get(kube::kLeases, "kube-system", "kube-controller-manager")));
  // The same client is allowed what the operator does do, so the 403s above
  // are RBAC's answer and not a broken client.
  Json own = secret;
  own["metadata"]["name"] = "made-by-operator";
  EXPECT_TRUE(as_operator.create(kube::kSecrets, ns.name(), own).ok());
}

}  // namespace
}  // namespace weft::it
