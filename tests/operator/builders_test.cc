// Child-object builders: the worker contract (env, config mount), naming,
// labels, owner references and the pod security baseline.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "test_builders.h"
#include "trainingjob/builders.h"
#include "trainingjob/constants.h"
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
  EXPECT_EQ(env["MASTER_ADDR"]["value"], "llama-0.llama.team-a.svc");
  EXPECT_EQ(env["MASTER_PORT"]["value"], "29500");
  EXPECT_EQ(env["WEFT_ATTEMPT"]["value"], "2");
  EXPECT_EQ(env["WEFT_RDZV_TOKEN"]["valueFrom"]["secretKeyRef"]["name"], "llama-rdzv-llama-uid");
  EXPECT_EQ(pod["metadata"]["name"], "llama-3");
  EXPECT_EQ(pod["spec"]["hostname"], "llama-3");
  EXPECT_EQ(pod["spec"]["subdomain"], "llama");
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(pod["spec"]["containers"][0]["args"], Json::array({"/etc/weft/config.yaml"}));
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

TEST(Builders, ConfigMapHoldsWorkerYamlAndSeparateBucketKey) {
  Json job = MakeJob("j", "ns").Parallel("zero", 1, 1).BucketMB(2.5).Obj();
  job["spec"]["worker"]["train"] = {{"steps", 200}, {"out_dir", "/tmp/run: x"}};
  Json cm = build_configmap(job, parse_spec(job["spec"]));
  EXPECT_EQ(cm["data"][contract::kBucketCapKey], "2.5");
  YAML::Node y = YAML::Load(cm["data"][contract::kConfigKey].get<std::string>());
  EXPECT_EQ(y["preset"].as<std::string>(), "tiny");
  EXPECT_EQ(y["parallel"]["strategy"].as<std::string>(), "zero");
  EXPECT_EQ(y["parallel"]["bucket_cap_mb"].as<double>(), 2.5);
  EXPECT_EQ(y["train"]["steps"].as<int>(), 200);
  EXPECT_EQ(y["train"]["out_dir"].as<std::string>(), "/tmp/run: x");
  // Without a number (absent, or auto) the key is empty: the workers keep the
  // size they derive from the model until the tuner writes one.
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
  EXPECT_EQ(cm["data"][contract::kBucketCapKey], "4");
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
    EXPECT_EQ(std::stod(cm["data"][contract::kBucketCapKey].get<std::string>()), mb);
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
  EXPECT_EQ(names, contract_names);
  for (const auto& name : names) EXPECT_TRUE(is_contract_env(name)) << name;
  EXPECT_FALSE(is_contract_env("LOCAL_RANK"));  // pods leave it unset: one rank per pod
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
  // Restart policy and TTL do not shape pods: changing them keeps the gang.
  EXPECT_EQ(pod_spec_hash(base), pod_spec_hash(MakeJob("j", "ns").MaxRestarts(9).TTL(5).TypedSpec()));
  Json job = MakeJob("j", "ns").Obj();
  EXPECT_EQ(build_pod(job, base, 0, 0)["metadata"]["annotations"][kAnnotationSpecHash], pod_spec_hash(base));
}

}  // namespace
}  // namespace weft::tj
