// Two weft-operator processes against the real API server: exactly one
// leads (Lease), both answer probes, only the leader reconciles, and the
// standby takes over when the leader stops (cleanly or killed).
#include <fstream>
#include <sstream>

#include "integration/harness.h"
#include "trainingjob/constants.h"

namespace weft::it {
namespace {

std::string lease_holder(const std::string& ns) {
  auto l = admin_api().get(kube::kLeases, ns, "weft-operator");
  return l ? (*l)["spec"].value("holderIdentity", "") : "";
}

double metric(int port, const std::string& series) {
  auto [status, body] = http_get(port, "/metrics");
  if (status != 200) return -1;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  return -1;
}

struct Replica {
  std::string id;
  int metrics_port, health_port;
  std::unique_ptr<OperatorProcess> proc;
};

Replica start_replica(const std::string& ns, const std::string& id) {
  Replica r{id, free_port(), free_port(), nullptr};
  r.proc = std::make_unique<OperatorProcess>(
      std::vector<std::string>{"--kubeconfig", kubeconfig_path(), "--namespace", ns, "--leader-elect",
                               "--lease-namespace", ns, "--identity", id, "--lease-duration", "8",
                               "--renew-deadline", "5", "--retry-period", "0.3", "--bind-address", "127.0.0.1",
                               "--metrics-port", std::to_string(r.metrics_port), "--health-port",
                               std::to_string(r.health_port), "--workers", "2"},
      env_dir() + "/logs/operator-" + ns + "-" + id + ".log");
  return r;
}

TEST(LeaderElection, OneLeaderAndTheStandbyTakesOver) {
  TestNamespace ns("it-leader");
  auto a = start_replica(ns.name(), "op-a");
  auto b = start_replica(ns.name(), "op-b");
  ASSERT_TRUE(eventually([&] { return !lease_holder(ns.name()).empty(); }, 20s)) << "nobody took the lease";
  const std::string first = lease_holder(ns.name());
  Replica& leader = first == "op-a" ? a : b;
  Replica& standby = first == "op-a" ? b : a;

  // Both replicas are alive and ready (warm caches); only one leads.
  ASSERT_TRUE(eventually([&] { return http_get(standby.health_port, "/readyz").status == 200; }, 20s));
  EXPECT_EQ(http_get(leader.health_port, "/healthz").status, 200);
  EXPECT_EQ(http_get(standby.health_port, "/healthz").status, 200);
  ASSERT_TRUE(eventually([&] { return metric(leader.metrics_port, "weft_operator_leader") == 1; }));
  EXPECT_EQ(metric(standby.metrics_port, "weft_operator_leader"), 0);
  std::this_thread::sleep_for(1500ms);  // several renew periods: the lease must not flap
  EXPECT_EQ(lease_holder(ns.name()), first);

  ASSERT_TRUE(admin_api().create(kube::kTrainingJobs, ns.name(), job_json("one", 2)).ok());
  ASSERT_TRUE(eventually([&] { return job_pods(ns.name(), "one").size() == 2; }, 20s));
  ASSERT_TRUE(eventually([&] { return metric(leader.metrics_port, "weft_operator_reconciles_total{result=\"success\"}") > 0; }));
  EXPECT_LE(metric(standby.metrics_port, "weft_operator_reconciles_total{result=\"success\"}"), 0);

  // A clean stop releases the lease: the standby leads well before it would expire.
  auto t0 = std::chrono::steady_clock::now();
  leader.proc->terminate();
  ASSERT_TRUE(eventually([&] { return lease_holder(ns.name()) == standby.id; }, 20s));
  // Waiting for expiry would take the 8 s lease less at most one 0.3 s renew
  // period; a release hands over at the standby's next retry. 6 s leaves room
  // for a loaded machine between the two (3.8 s was seen under load).
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 6s) << "takeover waited for expiry despite a release";
  ASSERT_TRUE(admin_api().create(kube::kTrainingJobs, ns.name(), job_json("two", 3)).ok());
  ASSERT_TRUE(eventually([&] { return job_pods(ns.name(), "two").size() == 3; }, 20s));
  EXPECT_EQ(job_pods(ns.name(), "one", true).size(), 2u);  // the new leader did not duplicate anything

  // A killed leader cannot release: a fresh replica waits for the lease to expire.
  auto c = start_replica(ns.name(), "op-c");
  ASSERT_TRUE(eventually([&] { return http_get(c.health_port, "/readyz").status == 200; }, 20s));
  standby.proc->kill();
  ASSERT_TRUE(eventually([&] { return lease_holder(ns.name()) == "op-c"; }, 20s));
  ASSERT_TRUE(admin_api().create(kube::kTrainingJobs, ns.name(), job_json("three", 1)).ok());
  ASSERT_TRUE(eventually([&] { return job_pods(ns.name(), "three").size() == 1; }, 20s));
  auto lease = admin_api().get(kube::kLeases, ns.name(), "weft-operator");
  ASSERT_TRUE(lease.ok());
  EXPECT_GE((*lease)["spec"].value("leaseTransitions", 0), 1);
}

}  // namespace
}  // namespace weft::it
