// PodPlan: env resolution (values, $(VAR), field/secret/ConfigMap refs),
// command expansion, volumes and mounts, and the errors a kubelet reports.
#include <gtest/gtest.h>

#include "node/pod_plan.h"

namespace weft::node {
namespace {

Json pod_with(Json container, Json volumes = Json::array()) {
  container["name"] = "worker";
  return {{"metadata", {{"name", "job-1"}, {"namespace", "ns"}, {"uid", "u-1"}, {"labels", {{"weft.dev/rank", "1"}}}}},
          {"spec", {{"nodeName", "weft-node-0"}, {"hostname", "job-1"}, {"subdomain", "job"},
                    {"restartPolicy", "Never"}, {"containers", Json::array({container})}, {"volumes", volumes}}}};
}

struct Objects {
  std::map<std::string, Json> secrets, configmaps;
  ObjectLookup lookup() {
    return {[this](const std::string& ns, const std::string& n) -> const Json* {
              auto it = secrets.find(ns + "/" + n);
              return it == secrets.end() ? nullptr : &it->second;
            },
            [this](const std::string& ns, const std::string& n) -> const Json* {
              auto it = configmaps.find(ns + "/" + n);
              return it == configmaps.end() ? nullptr : &it->second;
            }};
  }
};

std::string env_of(const PodPlan& p, const std::string& name) {
  for (const auto& [k, v] : p.env)
    if (k == name) return v;
  return "<unset>";
}

TEST(PodPlan, ResolvesTheOperatorsEnvContract) {
  Objects objs;
  objs.secrets["ns/job-rdzv"] = {{"data", {{"token", "czNjcjN0"}}}};  // base64("s3cr3t")
  Json c = {{"command", {"weft-worker"}},
            {"args", {"/etc/weft/config.yaml", "--rank=$(RANK)", "$$(RANK)"}},
            {"env",
             {{{"name", "RANK"}, {"value", "1"}},
              {{"name", "MASTER_ADDR"}, {"value", "job-0.job.ns.svc"}},
              {{"name", "WEFT_RDZV_TOKEN"}, {"valueFrom", {{"secretKeyRef", {{"name", "job-rdzv"}, {"key", "token"}}}}}},
              {{"name", "POD"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.name"}}}}}},
              {{"name", "IP"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "status.podIP"}}}}}},
              {{"name", "R"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.labels['weft.dev/rank']"}}}}}},
              {{"name", "ADDR"}, {"value", "$(MASTER_ADDR):29500 $(UNKNOWN)"}}}}};
  auto r = plan_pod(pod_with(c), objs.lookup(), "127.1.0.7", "127.0.0.1");
  ASSERT_TRUE(std::holds_alternative<PodPlan>(r)) << std::get<PlanError>(r).message;
  const PodPlan& p = std::get<PodPlan>(r);
  EXPECT_EQ(p.argv, (std::vector<std::string>{"weft-worker", "/etc/weft/config.yaml", "--rank=1", "$(RANK)"}));
  EXPECT_EQ(env_of(p, "WEFT_RDZV_TOKEN"), "s3cr3t");
  EXPECT_EQ(env_of(p, "POD"), "job-1");
  EXPECT_EQ(env_of(p, "IP"), "127.1.0.7");
  EXPECT_EQ(env_of(p, "R"), "1");
  EXPECT_EQ(env_of(p, "ADDR"), "job-0.job.ns.svc:29500 $(UNKNOWN)");
  EXPECT_EQ(p.hostname, "job-1");
  EXPECT_EQ(p.restart_policy, "Never");
  EXPECT_EQ(p.container, "worker");
}

TEST(PodPlan, MissingSecretIsAConfigErrorUnlessOptional) {
  Objects objs;
  Json ref = {{"name", "gone"}, {"key", "token"}};
  Json c = {{"command", {"x"}}, {"env", {{{"name", "T"}, {"valueFrom", {{"secretKeyRef", ref}}}}}}};
  auto r = plan_pod(pod_with(c), objs.lookup(), "", "");
  ASSERT_TRUE(std::holds_alternative<PlanError>(r));
  EXPECT_EQ(std::get<PlanError>(r).reason, "CreateContainerConfigError");
  EXPECT_NE(std::get<PlanError>(r).message.find("secret \"gone\" not found"), std::string::npos);

  ref["optional"] = true;
  c["env"][0]["valueFrom"]["secretKeyRef"] = ref;
  auto ok = plan_pod(pod_with(c), objs.lookup(), "", "");
  ASSERT_TRUE(std::holds_alternative<PodPlan>(ok));
  EXPECT_EQ(env_of(std::get<PodPlan>(ok), "T"), "<unset>");

  objs.secrets["ns/gone"] = {{"data", {{"other", "eA=="}}}};
  ref.erase("optional");
  c["env"][0]["valueFrom"]["secretKeyRef"] = ref;
  auto nokey = plan_pod(pod_with(c), objs.lookup(), "", "");
  ASSERT_TRUE(std::holds_alternative<PlanError>(nokey));
  EXPECT_NE(std::get<PlanError>(nokey).message.find("has no key \"token\""), std::string::npos);
}

TEST(PodPlan, VolumesAndMounts) {
  Objects objs;
  Json vols = {{{"name", "cfg"}, {"configMap", {{"name", "job-config"}}}},
               {{"name", "tmp"}, {"emptyDir", Json::object()}},
               {{"name", "ckpt"}, {"hostPath", {{"path", "/data/ckpt"}, {"type", "DirectoryOrCreate"}}}},
               {{"name", "tok"}, {"secret", {{"secretName", "s"}, {"defaultMode", 0400}}}}};
  Json c = {{"command", {"x"}},
            {"volumeMounts",
             {{{"name", "cfg"}, {"mountPath", "/etc/weft"}, {"readOnly", true}},
              {{"name", "tmp"}, {"mountPath", "/tmp"}},
              {{"name", "ckpt"}, {"mountPath", "/ckpt"}, {"subPath", "job"}}}}};
  auto r = plan_pod(pod_with(c, vols), objs.lookup(), "", "");
  ASSERT_TRUE(std::holds_alternative<PodPlan>(r)) << std::get<PlanError>(r).message;
  const PodPlan& p = std::get<PodPlan>(r);
  ASSERT_EQ(p.volumes.size(), 4u);
  EXPECT_EQ(p.volumes[0].kind, VolumeKind::ConfigMap);
  EXPECT_EQ(p.volumes[0].object, "job-config");
  EXPECT_EQ(p.volumes[2].host_path, "/data/ckpt");
  EXPECT_EQ(p.volumes[3].default_mode, 0400);
  ASSERT_EQ(p.mounts.size(), 3u);
  EXPECT_TRUE(p.mounts[0].read_only);
  EXPECT_EQ(p.mounts[2].sub_path, "job");

  vols.push_back({{"name", "pvc"}, {"persistentVolumeClaim", {{"claimName", "c"}}}});
  auto bad = plan_pod(pod_with(c, vols), objs.lookup(), "", "");
  ASSERT_TRUE(std::holds_alternative<PlanError>(bad));
  EXPECT_NE(std::get<PlanError>(bad).message.find("volume pvc"), std::string::npos);

  c["volumeMounts"].push_back({{"name", "nope"}, {"mountPath", "/x"}});
  auto unknown = plan_pod(pod_with(c, Json::array()), objs.lookup(), "", "");
  ASSERT_TRUE(std::holds_alternative<PlanError>(unknown));
}

// The ServiceAccount admission's kube-api-access-* volume (API servers >=
// 1.22): the token is left to the agent (a TokenRequest for the pod's
// ServiceAccount), ca.crt and namespace are resolved here; a source
// weft-node does not know is refused by name.
TEST(PodPlan, ProjectedServiceAccountVolume) {
  Objects objs;
  Json c = {{"command", {"weft-operator"}},
            {"volumeMounts", {{{"name", "kube-api-access-x1"}, {"mountPath", "/var/run/secrets/kubernetes.io/serviceaccount"}}}}};
  Json vols = {{{"name", "kube-api-access-x1"},
                {"projected",
                 {{"defaultMode", 420},
                  {"sources",
                   {{{"serviceAccountToken", {{"expirationSeconds", 3607}, {"path", "token"}}}},
                    {{"configMap", {{"name", "kube-root-ca.crt"}, {"items", {{{"key", "ca.crt"}, {"path", "ca.crt"}}}}}}},
                    {{"downwardAPI",
                      {{"items", {{{"path", "namespace"}, {"fieldRef", {{"apiVersion", "v1"}, {"fieldPath", "metadata.namespace"}}}}}}}}}}}}}}};
  Json pod = pod_with(c, vols);
  pod["spec"]["serviceAccountName"] = "weft-operator";
  auto missing = plan_pod(pod, objs.lookup(), "", "");
  ASSERT_TRUE(std::holds_alternative<PlanError>(missing)) << "kube-root-ca.crt not published yet";
  EXPECT_NE(std::get<PlanError>(missing).message.find("configmap \"kube-root-ca.crt\" not found"), std::string::npos)
      << std::get<PlanError>(missing).message;
  objs.configmaps["ns/kube-root-ca.crt"] = {{"data", {{"ca.crt", "-----BEGIN CERTIFICATE-----\n"}}}};
  auto r = plan_pod(pod, objs.lookup(), "", "");
  ASSERT_TRUE(std::holds_alternative<PodPlan>(r)) << std::get<PlanError>(r).message;
  const VolumeSpec& v = std::get<PodPlan>(r).volumes.at(0);
  EXPECT_EQ(v.kind, VolumeKind::Projected);
  EXPECT_EQ(v.default_mode, 420);
  EXPECT_EQ(v.service_account, "weft-operator");
  ASSERT_EQ(v.tokens.size(), 1u);
  EXPECT_EQ(v.tokens[0].path, "token");
  EXPECT_EQ(v.tokens[0].expiration_seconds, 3607);
  EXPECT_EQ(v.files, (std::map<std::string, std::string>{{"ca.crt", "-----BEGIN CERTIFICATE-----\n"},
                                                         {"namespace", "ns"}}));
  vols[0]["projected"]["sources"].push_back({{"clusterTrustBundle", {{"path", "b"}}}});
  auto bad = plan_pod(pod_with(c, vols), objs.lookup(), "", "");
  ASSERT_TRUE(std::holds_alternative<PlanError>(bad));
  EXPECT_NE(std::get<PlanError>(bad).message.find("only serviceAccountToken, configMap, secret and downwardAPI"),
            std::string::npos)
      << std::get<PlanError>(bad).message;
}

TEST(PodPlan, VolumeFilesHonourItemsAndDecodeSecrets) {
  Json cm = {{"data", {{"config.yaml", "a: 1\n"}, {"bucket_cap_mb", "4"}}}};
  auto all = volume_files(cm, Json::array(), false);
  ASSERT_TRUE((std::holds_alternative<std::map<std::string, std::string>>(all)));
  EXPECT_EQ(std::get<0>(all).size(), 2u);
  auto some = volume_files(cm, Json::array({{{"key", "bucket_cap_mb"}, {"path", "dir/cap"}}}), false);
  ASSERT_EQ(std::get<0>(some).size(), 1u);
  EXPECT_EQ(std::get<0>(some).at("dir/cap"), "4");
  auto missing = volume_files(cm, Json::array({{{"key", "nope"}}}), false);
  EXPECT_TRUE(std::holds_alternative<std::string>(missing));
  Json secret = {{"data", {{"token", "aGVsbG8gd29ybGQ="}}}};
  EXPECT_EQ(std::get<0>(volume_files(secret, Json::array(), true)).at("token"), "hello world");
}

TEST(PodPlan, ExpandVarsAndGrace) {
  EXPECT_EQ(expand_vars("$(A)-$(B)-$$(A)-$(", {{"A", "1"}}), "1-$(B)-$(A)-$(");
  Json pod = {{"metadata", Json::object()}, {"spec", Json::object()}};
  EXPECT_EQ(grace_period_seconds(pod), 30);
  pod["spec"]["terminationGracePeriodSeconds"] = 5;
  EXPECT_EQ(grace_period_seconds(pod), 5);
  pod["metadata"]["deletionGracePeriodSeconds"] = 0;
  EXPECT_EQ(grace_period_seconds(pod), 0);
}

TEST(PodPlan, NoCommandIsRefused) {
  Objects objs;
  auto r = plan_pod(pod_with({{"image", "busybox"}}), objs.lookup(), "", "");
  ASSERT_TRUE(std::holds_alternative<PlanError>(r));
  EXPECT_NE(std::get<PlanError>(r).message.find("no command"), std::string::npos);
}

}  // namespace
}  // namespace weft::node
