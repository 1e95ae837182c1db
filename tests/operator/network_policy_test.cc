// The per-job NetworkPolicy and the rendezvous Secret's name, as built.
#include <gtest/gtest.h>

#include "test_builders.h"
#include "trainingjob/builders.h"
#include "trainingjob/constants.h"

namespace weft::tj {
namespace {
using testing::MakeJob;

const Json kOperatorPeer = {
    {"namespaceSelector", {{"matchLabels", {{"kubernetes.io/metadata.name", "weft-system"}}}}},
    {"podSelector", {{"matchLabels", {{"app.kubernetes.io/name", "weft-operator"}}}}}};

TEST(NetworkPolicy, SameJobOnAnyPortMetricsFromThePeers) {
  Json job = MakeJob("llama", "team-a").Spec("masterPort", 29600).Obj();
  const Json peers = Json::array({kOperatorPeer});
  Json np = build_network_policy(job, parse_spec(job["spec"]), peers);
  EXPECT_EQ(np["apiVersion"], "networking.k8s.io/v1");
  EXPECT_EQ(np["kind"], "NetworkPolicy");
  EXPECT_EQ(np["metadata"]["name"], network_policy_name("llama"));
  EXPECT_EQ(np["metadata"]["namespace"], "team-a");
  EXPECT_EQ(np["metadata"]["ownerReferences"][0]["uid"], "llama-uid");  // deleted with the job
  EXPECT_TRUE(np["metadata"]["ownerReferences"][0]["controller"].get<bool>());
  EXPECT_EQ(np["metadata"]["labels"][kLabelJob], "llama");

  const Json& spec = np["spec"];
  const Json job_pods = {{"matchLabels", child_labels("llama")}};
  EXPECT_EQ(spec["podSelector"], job_pods);
  EXPECT_EQ(spec["policyTypes"], Json::array({"Ingress"}));
  ASSERT_EQ(spec["ingress"].size(), 2u) << spec.dump();
  // Rendezvous (masterPort) and the collectives' ephemeral ports: every port,
  // from the job's own pods only.
  const Json& peers_rule = spec["ingress"][0];
  EXPECT_FALSE(peers_rule.contains("ports")) << peers_rule.dump();
  EXPECT_EQ(peers_rule["from"], Json::array({{{"podSelector", job_pods}}}));
  // Metrics: the rank's port, from the given peers.
  const Json& metrics_rule = spec["ingress"][1];
  EXPECT_EQ(metrics_rule["ports"], Json::parse(R"([{"protocol": "TCP", "port": 9400}])"));
  EXPECT_EQ(metrics_rule["from"], peers);
}

TEST(NetworkPolicy, MetricsPortFollowsTheWorkerConfigAndItsPeersMayBeAnyone) {
  Json job = MakeJob("j", "ns").Obj();
  job["spec"]["worker"]["metrics"] = {{"port", 9555}};
  for (const Json& anyone : {Json(), Json::array()}) {
    Json np = build_network_policy(job, parse_spec(job["spec"]), anyone);
    ASSERT_EQ(np["spec"]["ingress"].size(), 2u);
    EXPECT_EQ(np["spec"]["ingress"][1]["ports"][0]["port"], 9555);
    EXPECT_FALSE(np["spec"]["ingress"][1].contains("from")) << "no peers listed: admitted from anywhere";
  }
  // Metrics off: no metrics port to admit.
  job["spec"]["worker"]["metrics"]["port"] = 0;
  Json np = build_network_policy(job, parse_spec(job["spec"]), Json::array({kOperatorPeer}));
  EXPECT_EQ(np["spec"]["ingress"].size(), 1u) << np.dump();
}

TEST(RendezvousSecret, NameCarriesTheJobUidAndPodsReadIt) {
  Json job = MakeJob("llama", "ns").Obj();
  Json other = job;
  other["metadata"]["uid"] = "another-uid";  // a later job of the same name
  const Json secret = build_secret(job, "t0k3n");
  EXPECT_EQ(secret["metadata"]["name"], secret_name("llama", "llama-uid"));
  EXPECT_NE(build_secret(other, "t0k3n")["metadata"]["name"], secret["metadata"]["name"]);
  EXPECT_EQ(secret["stringData"][kSecretTokenKey], "t0k3n");
  Json pod = build_pod(job, parse_spec(job["spec"]), 0, 0);
  bool reads_it = false;
  for (const auto& e : pod["spec"]["containers"][0]["env"])
    if (e.contains("valueFrom"))
      reads_it |= e["valueFrom"]["secretKeyRef"]["name"] == secret["metadata"]["name"] &&
                  e["valueFrom"]["secretKeyRef"]["key"] == kSecretTokenKey;
  EXPECT_TRUE(reads_it);
}

}  // namespace
}  // namespace weft::tj
