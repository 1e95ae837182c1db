// Child-object builders: the worker contract (env, config mount), naming,
// labels, owner references and the pod security baseline.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "test_builders.h"
#include "trainingjob/builders.h"
#include "trainingjob/constants.h"
#include "tuner/bucket_tuner.h"
#include "weft_contract.h"

namespace weft::tj {
namespace {
using testing::MakeJob;

std::map<std::string, Json> env_of(const Json& pod) {
  std::map<std::string, Json> out;
  for (const auto& e : pod["spec"]["containers"][0]["env"]) out[e["name"]] = e;
  return out;
}

TEST(Builders, PodCarriesTheEnvContract) {
  Json job = MakeJob("llama", "team-a").Replicas(8).Obj();
  Json pod = build_pod(job, parse_spec(job["spec"]), 3, 2);
  auto env = env_of(pod);
  EXPECT_EQ(env["RANK"]["value"], "3");
  EXPECT_EQ(env["WORLD_SIZE"]["value"], "8");
  EXPECT_EQ(env["LOCAL_RANK"]["value"], "0");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"]["value"], "1");
  EXPECT_EQ(env["NODE_RANK"]["value"], "3");
  EXPECT_EQ(env["MASTER_ADDR"]["value"], "llama-0.llama.team-a.svc");
  EXPECT_EQ(env["MASTER_PORT"]["value"], "29500");
  EXPECT_EQ(env["MASTER_PORT"]["value"], "29500");
  EXPECT_EQ(env["WEFT_ATTEMPT"]["value"], "2");
  EXPECT_EQ(env["WEFT_RDZV_TOKEN"]["valueFrom"]["secretKeyRef"]["name"], "llama-rdzv-llama-uid");
  EXPECT_EQ(pod["metadata"]["name"], "llama-3");
  EXPECT_EQ(pod["spec"]["hostname"], "llama-3");
  EXPECT_EQ(pod["spec"]["subdomain"], "llama");
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(pod["spec"]["containers"][0]["command"], Json::array({"weft-worker"}));
  EXPECT_EQ(pod["spec"]["containers"][0]["args"], Json::array({"/etc/weft/config.yaml"}));
}

// Ready means training: the pod's readiness probe is the worker's /ready on
// the metrics port; a job without metrics has no probe (Ready when it runs).
TEST(Builders, ReadinessProbeIsTheWorkersReadyOnTheMetricsPort) {
  Json job = MakeJob("probed", "team-a").Replicas(2).Obj();
  Json pod = build_pod(job, parse_spec(job["spec"]), 1, 0);
  const Json& probe = pod["spec"]["containers"][0]["readinessProbe"];
  EXPECT_EQ(probe["httpGet"]["path"], "/ready");
  EXPECT_EQ(probe["httpGet"]["port"], "metrics");
  EXPECT_EQ(probe["failureThreshold"], 1);
  EXPECT_FALSE(pod["spec"]["containers"][0].contains("livenessProbe")) << "a slow first step must restart nothing";
  job["spec"]["worker"]["metrics"] = {{"port", 0}};
  Json off = build_pod(job, parse_spec(job["spec"]), 1, 0);
  EXPECT_FALSE(off["spec"]["containers"][0].contains("readinessProbe"));
}

// Kueue's queue-name label of the TrainingJob reaches every pod; a template
// label of the same name gives way to the job's.
TEST(Builders, KueueQueueNameOfTheJobReachesThePods) {
  Json job = MakeJob("queued", "team-a").Replicas(2).Obj();
  Json plain = build_pod(job, parse_spec(job["spec"]), 0, 0);
  EXPECT_FALSE(plain["metadata"]["labels"].contains(kLabelKueueQueue));
  job["metadata"]["labels"] = {{kLabelKueueQueue, "team-a-gpus"}};
  job["spec"]["template"]["labels"] = {{kLabelKueueQueue, "other"}, {"team", "a"}};
  for (int i = 0; i < 2; ++i) {
    Json pod = build_pod(job, parse_spec(job["spec"]), i, 0);
    EXPECT_EQ(pod["metadata"]["labels"][kLabelKueueQueue], "team-a-gpus");
    EXPECT_EQ(pod["metadata"]["labels"]["team"], "a");
  }
}

// procsPerPod P: pod i runs weft-run for ranks i·P .. i·P+P-1 of pods·P.
// weft-run sets RANK and LOCAL_RANK per process (tests/comm/weft_run_test.cc
// checks that arithmetic); the pod carries the rest of the contract.
TEST(Builders, PodOfSeveralRanksRunsTheInPodLauncher) {
  Json job = MakeJob("llama", "team-a").Replicas(3).Spec("procsPerPod", 4)
                 .Template({{"env", {{{"name", "NCCL_IB_HCA"}, {"value", "mlx5"}}}}}).Obj();
  const TrainingJobSpec spec = parse_spec(job["spec"]);
  EXPECT_EQ(spec.ranks_per_pod(), 4);
  EXPECT_EQ(spec.world_size(), 12);
  Json pod = build_pod(job, spec, 2, 1);
  const Json& c = pod["spec"]["containers"][0];
  EXPECT_EQ(c["command"], Json::array({"weft-run"}));
  // The gang's shape once, in the environment below, which weft-run reads.
  EXPECT_EQ(c["args"], Json::array({"--from-env", "--", "/etc/weft/config.yaml"}));
  auto env = env_of(pod);
  EXPECT_FALSE(env.count("RANK"));
  EXPECT_FALSE(env.count("LOCAL_RANK"));
  EXPECT_EQ(env["WORLD_SIZE"]["value"], "12");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"]["value"], "4");
  EXPECT_EQ(env["NODE_RANK"]["value"], "2");
  EXPECT_EQ(env["MASTER_ADDR"]["value"], "llama-0.llama.team-a.svc");
  EXPECT_EQ(env["MASTER_PORT"]["value"], "29500");
  EXPECT_EQ(env["WEFT_RDZV_TOKEN"]["valueFrom"]["secretKeyRef"]["name"], "llama-rdzv-llama-uid");
  EXPECT_EQ(env["NCCL_IB_HCA"]["value"], "mlx5");  // weft-run passes its environment to every rank
  EXPECT_EQ(pod["metadata"]["labels"][kLabelRank], "2");  // the pod's index
  // Local rank L serves metrics on the base port + L.
  std::vector<std::pair<std::string, int>> ports;
  for (const auto& p : c["ports"]) ports.emplace_back(p["name"], p["containerPort"]);
  EXPECT_EQ(ports, (std::vector<std::pair<std::string, int>>{
                       {"rendezvous", 29500}, {"metrics", 9400}, {"metrics-1", 9401}, {"metrics-2", 9402},
                       {"metrics-3", 9403}}));
}

TEST(Builders, ProcsPerPodAutoIsTheGpuLimit) {
  Json job = MakeJob("j", "ns").Replicas(2).Spec("procsPerPod", "auto")
                 .Spec("resources", {{"limits", {{"nvidia.com/gpu", 8}}}}).Obj();
  const TrainingJobSpec spec = parse_spec(job["spec"]);
  EXPECT_TRUE(validate(spec).empty()) << describe(validate(spec));
  EXPECT_EQ(spec.ranks_per_pod(), 8);
  EXPECT_EQ(spec.world_size(), 16);
  EXPECT_EQ(env_of(build_pod(job, spec, 1, 0))["LOCAL_WORLD_SIZE"]["value"], "8");
  Json as_text = MakeJob("j", "ns").Spec("procsPerPod", "auto")
                     .Spec("resources", {{"limits", {{"nvidia.com/gpu", "4"}}}}).Obj();
  EXPECT_EQ(parse_spec(as_text["spec"]).ranks_per_pod(), 4);
}

TEST(Builders, EveryPodGetsAMemoryBackedDevShm) {
  for (int procs : {1, 2}) {
    Json job = MakeJob("j", "ns").Spec("procsPerPod", procs).Spec("shmSize", "8Gi").Obj();
    Json pod = build_pod(job, parse_spec(job["spec"]), 0, 0);
    Json shm;
    for (const auto& v : pod["spec"]["volumes"])
      if (v["name"] == kShmVolume) shm = v;
    EXPECT_EQ(shm["emptyDir"]["medium"], "Memory");
    EXPECT_EQ(shm["emptyDir"]["sizeLimit"], "8Gi");
    bool mounted = false;
    for (const auto& m : pod["spec"]["containers"][0]["volumeMounts"])
      mounted |= m["name"] == kShmVolume && m["mountPath"] == "/dev/shm";
    EXPECT_TRUE(mounted);
  }
  EXPECT_EQ(MakeJob("j", "ns").TypedSpec().shm_size, "1Gi");
}

// What GPU clusters schedule and run pods by reaches every pod unchanged.
TEST(Builders, PodSettingsOfTheTemplateReachThePod) {
  const Json tpl = Json::parse(R"({
    "nodeSelector": {"gpu": "h100"},
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"weft.dev/job": "j"}}}],
    "priorityClassName": "training",
    "schedulerName": "volcano",
    "runtimeClassName": "nvidia",
    "imagePullSecrets": [{"name": "registry"}],
    "hostNetwork": true,
    "dnsPolicy": "ClusterFirstWithHostNet",
    "terminationGracePeriodSeconds": 600})");
  Json job = MakeJob("j", "ns").Template(tpl).Obj();
  Json pod = build_pod(job, parse_spec(job["spec"]), 0, 0);
  for (auto it = tpl.begin(); it != tpl.end(); ++it) EXPECT_EQ(pod["spec"][it.key()], it.value()) << it.key();
}

TEST(Builders, LabelsAndOwnerReference) {
  Json job = MakeJob("llama", "ns").Obj();
  Json pod = build_pod(job, parse_spec(job["spec"]), 1, 0);
  const Json& labels = pod["metadata"]["labels"];
  EXPECT_EQ(labels[kLabelJob], "llama");
  EXPECT_EQ(labels[kLabelRank], "1");
  EXPECT_EQ(labels[kLabelAttempt], "0");
  const Json& ref = pod["metadata"]["ownerReferences"][0];
  EXPECT_EQ(ref["uid"], "llama-uid");
  EXPECT_EQ(ref["kind"], "TrainingJob");
  EXPECT_TRUE(ref["controller"].get<bool>());
  EXPECT_TRUE(ref["blockOwnerDeletion"].get<bool>());
  for (const Json& child : {build_service(job, parse_spec(job["spec"])), build_configmap(job, parse_spec(job["spec"])),
                            build_secret(job, "t")}) {
    EXPECT_EQ(child["metadata"]["labels"][kLabelJob], "llama");
    EXPECT_EQ(child["metadata"]["ownerReferences"][0]["uid"], "llama-uid");
  }
}

TEST(Builders, SecurityBaseline) {
  Json job = MakeJob("j", "ns").Obj();
  Json pod = build_pod(job, parse_spec(job["spec"]), 0, 0);
  const Json& sc = pod["spec"]["containers"][0]["securityContext"];
  EXPECT_TRUE(sc["runAsNonRoot"].get<bool>());
  EXPECT_TRUE(sc["readOnlyRootFilesystem"].get<bool>());
  EXPECT_FALSE(sc["allowPrivilegeEscalation"].get<bool>());
  EXPECT_EQ(sc["capabilities"]["drop"], Json::array({"ALL"}));
  EXPECT_TRUE(pod["spec"]["securityContext"]["runAsNonRoot"].get<bool>());
  EXPECT_FALSE(pod["spec"]["automountServiceAccountToken"].get<bool>());
}

TEST(Builders, UserOverridesMergeButCannotBreakTheContract) {
  Json job = MakeJob("j", "ns")
                 .Template({{"labels", {{"team", "nlp"}, {"weft.dev/job", "evil"}}},
                            {"nodeSelector", {{"gpu", "h100"}}},
                            {"tolerations", {{{"key", "gpu"}, {"operator", "Exists"}}}},
                            {"volumes", {{{"name", "data"}, {"emptyDir", Json::object()}}}},
                            {"volumeMounts", {{{"name", "data"}, {"mountPath", "/data"}}}},
                            {"env", {{{"name", "NCCL_DEBUG"}, {"value", "INFO"}}, {{"name", "RANK"}, {"value", "9"}}}}})
                 .Spec("resources", {{"limits", {{"nvidia.com/gpu", 1}}}})
                 .Obj();
  Json pod = build_pod(job, parse_spec(job["spec"]), 0, 0);
  EXPECT_EQ(pod["metadata"]["labels"]["team"], "nlp");
  EXPECT_EQ(pod["metadata"]["labels"][kLabelJob], "j");
  EXPECT_EQ(pod["spec"]["nodeSelector"]["gpu"], "h100");
  EXPECT_EQ(pod["spec"]["tolerations"][0]["key"], "gpu");
  EXPECT_EQ(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], 1);
  auto env = env_of(pod);
  EXPECT_EQ(env["NCCL_DEBUG"]["value"], "INFO");
  EXPECT_EQ(env["RANK"]["value"], "0");
  bool data = false, config = false;
  for (const auto& m : pod["spec"]["containers"][0]["volumeMounts"]) {
    data |= m["mountPath"] == "/data";
    config |= m["mountPath"] == "/etc/weft";
  }
  EXPECT_TRUE(data && config);
}

// One channel for each value: the spec's cap travels in config.yaml only; the
// bucket cap key starts empty and carries only the tuner's later values.
TEST(Builders, ConfigMapHoldsWorkerYamlAndSeparateBucketKey) {
  Json job = MakeJob("j", "ns").Parallel("zero", 1, 1).BucketMB(2.5).Obj();
  job["spec"]["worker"]["train"] = {{"steps", 200}, {"out_dir", "/tmp/run: x"}};
  Json cm = build_configmap(job, parse_spec(job["spec"]));
  EXPECT_EQ(cm["data"][contract::kBucketCapKey], "");
  YAML::Node y = YAML::Load(cm["data"][contract::kConfigKey].get<std::string>());
  EXPECT_EQ(y["preset"].as<std::string>(), "tiny");
  EXPECT_EQ(y["parallel"]["strategy"].as<std::string>(), "zero");
  EXPECT_EQ(y["parallel"]["bucket_cap_mb"].as<double>(), 2.5);
  EXPECT_EQ(y["train"]["steps"].as<int>(), 200);
  EXPECT_EQ(y["train"]["out_dir"].as<std::string>(), "/tmp/run: x");
  // Without a number (absent, or auto) the key is empty too: the workers keep
  // the size they derive from the model until the tuner writes one.
  for (Json v : {Json(), Json("auto")}) {
    Json j = MakeJob("j", "ns").Obj();
    if (!v.is_null()) j["spec"]["worker"]["parallel"] = {{"bucket_cap_mb", v}};
    const TrainingJobSpec spec = parse_spec(j["spec"]);
    EXPECT_FALSE(spec.bucket_cap_mb().has_value());
    EXPECT_EQ(build_configmap(j, spec)["data"][contract::kBucketCapKey], "");
  }
}

// The tuning path end to end on the pod: WEFT_BUCKET_CAP_FILE names the
// ConfigMap's bucket cap key inside the directory the ConfigMap is mounted at,
// and the mount is a whole-directory one (a subPath mount never sees updates).
TEST(Builders, EveryPodReadsTheBucketCapFromTheConfigMap) {
  Json job = MakeJob("llama", "ns").BucketMB(4).Obj();
  const TrainingJobSpec spec = parse_spec(job["spec"]);
  const Json cm = build_configmap(job, spec);
  ASSERT_TRUE(cm["data"].contains(contract::kBucketCapKey));
  EXPECT_EQ(cm["data"][contract::kBucketCapKey], "");
  for (int rank : {0, 3}) {
    SCOPED_TRACE(rank);
    Json pod = build_pod(job, spec, rank, 1);
    auto env = env_of(pod);
    ASSERT_TRUE(env.count("WEFT_BUCKET_CAP_FILE"));
    EXPECT_EQ(env["WEFT_BUCKET_CAP_FILE"]["value"], "/etc/weft/bucket_cap_mb");

    std::string volume;  // the pod volume backed by the job's ConfigMap
    for (const auto& v : pod["spec"]["volumes"])
      if (v.contains("configMap") && v["configMap"]["name"] == cm["metadata"]["name"]) volume = v["name"];
    ASSERT_FALSE(volume.empty()) << pod["spec"]["volumes"].dump();
    const Json* mount = nullptr;
    for (const auto& m : pod["spec"]["containers"][0]["volumeMounts"])
      if (m["name"] == volume) mount = &m;
    ASSERT_NE(mount, nullptr);
    EXPECT_FALSE(mount->contains("subPath")) << mount->dump();
    EXPECT_TRUE((*mount)["readOnly"].get<bool>());
    // The file the worker polls is that key inside that mount.
    EXPECT_EQ(env["WEFT_BUCKET_CAP_FILE"]["value"].get<std::string>(),
              (*mount)["mountPath"].get<std::string>() + "/" + contract::kBucketCapKey);
  }
}

TEST(Builders, BucketCapIsWrittenSoItReadsBackExactly) {
  for (double mb : {25.0, 2.5, 0.1, 12.3456789, 4096.0}) {
    SCOPED_TRACE(mb);
    Json cm = build_configmap(MakeJob("j", "ns").BucketMB(mb).Obj(), MakeJob("j", "ns").BucketMB(mb).TypedSpec());
    YAML::Node y = YAML::Load(cm["data"][contract::kConfigKey].get<std::string>());
    EXPECT_EQ(y["parallel"]["bucket_cap_mb"].as<double>(), mb);
    // The tuner's channel: format_mb reads back exactly too.
    EXPECT_EQ(std::stod(tuner::format_mb(mb)), mb);
  }
}

TEST(Builders, TemplateCannotRedirectTheBucketCapFile) {
  Json job = MakeJob("j", "ns").Template({{"env", {{{"name", "WEFT_BUCKET_CAP_FILE"}, {"value", "/data/cap"}}}}}).Obj();
  const TrainingJobSpec spec = parse_spec(job["spec"]);
  EXPECT_EQ(env_of(build_pod(job, spec, 0, 0))["WEFT_BUCKET_CAP_FILE"]["value"], "/etc/weft/bucket_cap_mb");
  EXPECT_NE(describe(validate(spec)).find("cannot override WEFT_BUCKET_CAP_FILE"), std::string::npos)
      << describe(validate(spec));
}

TEST(Builders, PodEnvIsExactlyTheContract) {
  Json job = MakeJob("j", "ns").Obj();
  auto env = env_of(build_pod(job, parse_spec(job["spec"]), 0, 0));
  std::set<std::string> names;
  for (const auto& [name, _] : env) names.insert(name);
  std::set<std::string> contract_names(std::begin(contract::kOperatorEnv), std::end(contract::kOperatorEnv));
  // Only an elastic gang smaller than planned is told the planned size
  // (elastic_test.cc).
  contract_names.erase(contract::kEnvPlannedWorldSize);
  EXPECT_EQ(names, contract_names);
  for (const auto& name : names) EXPECT_TRUE(is_contract_env(name)) << name;
  EXPECT_FALSE(is_contract_env("CUDA_VISIBLE_DEVICES"));
  // In a pod of several ranks weft-run sets RANK and LOCAL_RANK for each.
  Json several = MakeJob("j", "ns").Replicas(2).Spec("procsPerPod", 2).Obj();
  names.clear();
  for (const auto& [name, _] : env_of(build_pod(several, parse_spec(several["spec"]), 1, 0))) names.insert(name);
  contract_names.erase("RANK");
  contract_names.erase("LOCAL_RANK");
  EXPECT_EQ(names, contract_names);
}

TEST(Builders, HeadlessServicePublishesNotReadyAddresses) {
  Json job = MakeJob("j", "ns").Obj();
  Json svc = build_service(job, parse_spec(job["spec"]));
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_TRUE(svc["spec"]["publishNotReadyAddresses"].get<bool>());
  EXPECT_EQ(svc["spec"]["selector"][kLabelJob], "j");
}

TEST(Builders, RandomTokensDiffer) {
  auto a = random_token(), b = random_token();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace weft::tj

namespace weft::tj {
namespace {
using testing::MakeJob;

TEST(Builders, SpecHashIsStableAndTracksPodShapingFields) {
  const auto base = MakeJob("j", "ns").TypedSpec();
  EXPECT_EQ(pod_spec_hash(base), pod_spec_hash(MakeJob("j", "ns").TypedSpec()));
  EXPECT_EQ(pod_spec_hash(base).size(), 16u);
  EXPECT_NE(pod_spec_hash(base), pod_spec_hash(MakeJob("j", "ns").Replicas(3).TypedSpec()));
  EXPECT_NE(pod_spec_hash(base), pod_spec_hash(MakeJob("j", "ns").Image("other").TypedSpec()));
  EXPECT_NE(pod_spec_hash(base), pod_spec_hash(MakeJob("j", "ns").BucketMB(8).TypedSpec()));
  EXPECT_NE(pod_spec_hash(base), pod_spec_hash(MakeJob("j", "ns").Spec("procsPerPod", 2).TypedSpec()));
  EXPECT_NE(pod_spec_hash(base), pod_spec_hash(MakeJob("j", "ns").Spec("shmSize", "2Gi").TypedSpec()));
  // Stated defaults hash like absent fields: pods made before they existed keep their gang.
  EXPECT_EQ(pod_spec_hash(base),
            pod_spec_hash(MakeJob("j", "ns").Spec("procsPerPod", 1).Spec("shmSize", "1Gi").TypedSpec()));
  // Restart policy and TTL do not shape pods: changing them keeps the gang.
  EXPECT_EQ(pod_spec_hash(base), pod_spec_hash(MakeJob("j", "ns").MaxRestarts(9).TTL(5).TypedSpec()));
  Json job = MakeJob("j", "ns").Obj();
  EXPECT_EQ(build_pod(job, base, 0, 0)["metadata"]["annotations"][kAnnotationSpecHash], pod_spec_hash(base));
}

}  // namespace
}  // namespace weft::tj
