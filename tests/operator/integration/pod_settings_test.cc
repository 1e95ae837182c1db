// What GPU clusters set on their pods reaches them: a TrainingJob whose
// template carries every scheduling, runtime and network setting the operator
// passes through, and two ranks per pod, read back from the real API server
// (its defaulting and admission — Priority, RuntimeClass — included).
#include "integration/harness.h"
#include "trainingjob/builders.h"
#include "trainingjob/constants.h"

namespace weft::it {
namespace {

const kube::Resource kPriorityClasses{"scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", false};
const kube::Resource kRuntimeClasses{"node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", false};

class PodSettings : public ::testing::Test {
 protected:
  const std::string& ns() const { return ns_.name(); }
  // Cluster-scoped, so named after the test's namespace; left behind with the
  // API server of the fixture.
  std::string cluster_object(const kube::Resource& res, Json obj) {
    const std::string name = ns() + "-" + obj["metadata"]["name"].get<std::string>();
    obj["metadata"]["name"] = name;
    auto r = admin_api().create(res, "", obj);
    EXPECT_TRUE(r.ok() || r.error().already_exists()) << r.error().message;
    return name;
  }

  TestNamespace ns_{"it-podsettings"};
};

TEST_F(PodSettings, TemplateSettingsAndRanksPerPodReachThePods) {
  const std::string priority = cluster_object(
      kPriorityClasses,
      {{"apiVersion", "scheduling.k8s.io/v1"}, {"kind", "PriorityClass"}, {"metadata", {{"name", "training"}}},
       {"value", 1000}});
  const std::string runtime = cluster_object(
      kRuntimeClasses,
      {{"apiVersion", "node.k8s.io/v1"}, {"kind", "RuntimeClass"}, {"metadata", {{"name", "nvidia"}}},
       {"handler", "nvidia"}});
  InProcessOperator op(tj::ControllerOptions{.ns = ns(), .workers = 2, .allow = {.host_network = true}});

  Json tpl = Json::parse(R"({
    "nodeSelector": {"nvidia.com/gpu.product": "H100"},
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"weft.dev/job": "gpu"}}}],
    "schedulerName": "gang-scheduler",
    "imagePullSecrets": [{"name": "registry"}],
    "hostNetwork": true,
    "dnsPolicy": "ClusterFirstWithHostNet",
    "volumes": [{"name": "data", "emptyDir": {}}],
    "volumeMounts": [{"name": "data", "mountPath": "/data"}]})");
  tpl["priorityClassName"] = priority;
  tpl["runtimeClassName"] = runtime;
  Json job = job_json("gpu", 2);
  job["spec"]["template"] = tpl;
  job["spec"]["procsPerPod"] = 2;
  job["spec"]["shmSize"] = "2Gi";
  job["spec"]["resources"] = {{"limits", {{"memory", "8Gi"}, {"cpu", "4"}}}, {"requests", {{"cpu", "2"}}}};
  auto created = admin_api().create(kube::kTrainingJobs, ns(), job);
  ASSERT_TRUE(created.ok()) << created.error().message;

  ASSERT_TRUE(eventually([&] { return job_pods(ns(), "gpu").size() == 2; })) << status_of(ns(), "gpu").dump();
  // The status is written after the pods are created: wait for it too.
  EXPECT_TRUE(eventually([&] { return status_of(ns(), "gpu").value("ranks", 0) == 4; })) << status_of(ns(), "gpu").dump();
  for (const auto& pod : job_pods(ns(), "gpu")) {
    SCOPED_TRACE(pod["metadata"]["name"].get<std::string>());
    const Json& spec = pod["spec"];
    for (const char* k : {"nodeSelector", "affinity", "topologySpreadConstraints", "schedulerName", "runtimeClassName",
                          "imagePullSecrets", "hostNetwork", "dnsPolicy", "priorityClassName"})
      EXPECT_EQ(spec[k], tpl[k]) << k << ": " << spec[k].dump();
    EXPECT_EQ(spec["priority"], 1000);  // the Priority admission read the class
    // DefaultTolerationSeconds adds its own; the template's is kept.
    bool toleration = false;
    for (const auto& t : spec["tolerations"]) toleration |= t == tpl["tolerations"][0];
    EXPECT_TRUE(toleration) << spec["tolerations"].dump();
    const Json& c = spec["containers"][0];
    EXPECT_EQ(c["resources"]["limits"]["memory"], "8Gi");
    EXPECT_EQ(c["resources"]["requests"]["cpu"], "2");
    bool data = false, shm = false;
    for (const auto& v : spec["volumes"]) {
      data |= v["name"] == "data";
      shm |= v["name"] == tj::kShmVolume && v["emptyDir"]["medium"] == "Memory" && v["emptyDir"]["sizeLimit"] == "2Gi";
    }
    EXPECT_TRUE(data && shm) << spec["volumes"].dump();
    // Two ranks per pod: weft-run is the launcher, the pod is node NODE_RANK.
    EXPECT_EQ(c["command"], Json::array({"weft-run"}));
    const std::string index = pod["metadata"]["labels"][tj::kLabelRank];
    EXPECT_EQ(env_value(pod, "NODE_RANK"), index);
    EXPECT_EQ(env_value(pod, "WORLD_SIZE"), "4");
    EXPECT_EQ(env_value(pod, "LOCAL_WORLD_SIZE"), "2");
    EXPECT_EQ(env_value(pod, "RANK"), "");
  }
}

// The same template without the operator allowing hostNetwork is refused,
// naming the field, and no pod is created.
TEST_F(PodSettings, HostNetworkIsRefusedUnlessAllowed) {
  InProcessOperator op(tj::ControllerOptions{.ns = ns(), .workers = 1});
  Json job = job_json("hostnet", 1);
  job["spec"]["template"] = {{"hostNetwork", true}};
  ASSERT_TRUE(admin_api().create(kube::kTrainingJobs, ns(), job).ok());
  ASSERT_TRUE(eventually([&] { return phase_of(ns(), "hostnet") == tj::kPhaseFailed; }));
  EXPECT_NE(status_of(ns(), "hostnet").dump().find("spec.template.hostNetwork"), std::string::npos)
      << status_of(ns(), "hostnet").dump();
  EXPECT_TRUE(job_pods(ns(), "hostnet", true).empty());
}

}  // namespace
}  // namespace weft::it
