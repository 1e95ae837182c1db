// The operator running as its own ServiceAccount (bound by
// manifests/rbac/rbac.yaml, installed by the kube fixture) can do its whole
// job: leader election, children, status, events. Catches a ClusterRole
// that lacks a verb the code needs.
#include <fstream>
#include <sstream>

#include "integration/harness.h"
#include "trainingjob/constants.h"
#include "weft_contract.h"

namespace weft::it {
namespace {

// The fixture's kubeconfig with the admin client certificate swapped for the
// operator ServiceAccount's static token (tests/kube/testenv.sh tokens.csv).
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
  OperatorProcess op({"--kubeconfig", kc, "--namespace", ns.name(), "--leader-elect", "--lease-namespace", ns.name(),
                      "--retry-period", "0.3", "--metrics-port", "0", "--health-port", "0"},
                     env_dir() + "/logs/operator-rbac-" + ns.name() + ".log");
  Json job = job_json("rbac", 2);
  job["spec"]["restartPolicy"]["backoffSeconds"] = 0;
  ASSERT_TRUE(admin_api().create(kube::kTrainingJobs, ns.name(), job).ok());
  ASSERT_TRUE(eventually([&] { return job_pods(ns.name(), "rbac").size() == 2; }, 30s))
      << "see " << env_dir() << "/logs/operator-rbac-" << ns.name() << ".log";
  ASSERT_TRUE(eventually([&] { return !status_of(ns.name(), "rbac").value("attemptStartTime", "").empty(); }));
  set_pod_phase(ns.name(), "rbac-0", "Failed", contract::kExitPeerLost);  // exercises pod delete
  ASSERT_TRUE(eventually([&] { return status_of(ns.name(), "rbac").value("attempt", 0) == 1; }, 30s));
  auto lease = admin_api().get(kube::kLeases, ns.name(), "weft-operator");
  ASSERT_TRUE(lease.ok());
  EXPECT_FALSE((*lease)["spec"].value("holderIdentity", "").empty());
  auto events = admin_api().list(kube::kEvents, ns.name());
  ASSERT_TRUE(events.ok());
  EXPECT_FALSE(events->items.empty()) << "operator could not record events";
  EXPECT_TRUE(op.running());
}

}  // namespace
}  // namespace weft::it
