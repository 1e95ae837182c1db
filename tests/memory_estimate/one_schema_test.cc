// One schema for the worker's config in both programs: the operator reads
// spec.worker, as the API server hands it over (JSON), into the very
// WorkerConfig weft-worker runs from the same text and environment (the
// struct's defaulted == compares every field, so a field added to the schema
// is compared without a line here), refuses what the worker refuses with the
// worker's words at the same field, and estimates the same bytes per rank.
// weft-worker --print-config, run on the ConfigMap's config.yaml, prints the
// operator's reading.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/run_process.h"
#include "support/yaml_json.h"
#include "config/config.h"
#include "train/memory_estimate.h"
#include "trainingjob/builders.h"
#include "trainingjob/constants.h"
#include "trainingjob/memory_policy.h"
#include "trainingjob/types.h"

namespace weft {
namespace {

using Json = nlohmann::json;

Json to_json(const YAML::Node& n) { return test::yaml_to_json(n); }

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Case {
  std::string name;
  std::string yaml;  // the worker's config file, also spec.worker
  int replicas;
  Json env = Json::array();  // spec.template.env
};

std::vector<Case> cases() {
  const std::string root = WEFT_SOURCE_DIR;
  return {
      {"demo", read_file(root + "/configs/demo.yaml"), 2},
      {"tiny one rank", read_file(root + "/configs/tiny.yaml"), 1},
      {"gpt2-124m shards on 8 GPUs", read_file(root + "/configs/gpt2-124m-shards.yaml"), 8},
      {"zero-2 bf16 wire on cpu",
       "preset: gpt2-124m\ndevice: cpu\ntrain: {dtype: f32, micro_batch: 2, seq_len: 256}\n"
       "parallel: {strategy: zero, zero: {stage: 2}, bf16_wire: true}\n",
       4},
      {"zero-1 bf16",
       "model: {d_model: 256, n_heads: 8, n_kv_heads: 8}\ntrain: {dtype: bf16}\nparallel: "
       "{strategy: zero}\n",
       3},
      {"isp sp 2 wp 2 recompute, wdp zero-2",
       "model: {d_model: 256, n_layers: 6, n_heads: 8, n_kv_heads: 4, vocab_size: 4096}\n"
       "train: {dtype: f32, seq_len: 128}\n"
       "parallel: {strategy: isp, sp: 2, wp: 2, isp: {recompute_blocks: 3, wdp_strategy: zero}, "
       "zero: {stage: 2}}\n",
       8},
      {"isp wp 4", "parallel: {strategy: isp, wp: 4, isp: {recompute_blocks: 4}}\n", 4},
      {"isp sp 4 above 2 KV heads (replicated)", "parallel: {strategy: isp, sp: 4}\n", 4},
      {"head_dim apart from d_model / n_heads, isp sp 2",
       "model: {d_model: 96, n_heads: 4, n_kv_heads: 2, head_dim: 32}\n"
       "parallel: {strategy: isp, sp: 2}\n",
       2},
      {"tied, ffn_hidden, bf16",
       "model: {tie_embeddings: true, ffn_hidden: 500}\ntrain: {dtype: bf16, micro_batch: 3}\n"
       "parallel: {bf16_wire: true}\n",
       2},
      {"logits in chunks of 0.5 MiB", "preset: gpt2-124m\ntrain: {micro_batch: 2, logits_chunk_mb: 0.5}\n", 2},
      {"logits chunk auto on cuda", "preset: gpt2-124m\ndevice: cuda\ntrain: {logits_chunk_mb: auto}\n", 2},
      {"pointwise recompute on cpu", "preset: gpt2-124m\ndevice: cpu\ntrain: {micro_batch: 2, recompute: pointwise}\n", 2},
      {"recompute none on cuda", "preset: gpt2-124m\ndevice: cuda\ntrain: {recompute: none}\n", 2},
      {"device from the pod's WEFT_DEVICE", "preset: tiny\n", 2,
       Json::array({{{"name", "WEFT_DEVICE"}, {"value", "cuda"}}})},
      {"gpt2-124m preset, WEFT_DEVICE cpu", "preset: gpt2-124m\n", 1,
       Json::array({{{"name", "WEFT_DEVICE"}, {"value", "cpu"}}})},
  };
}

// What weft-worker runs for `yaml` as its config file and `env` as its
// environment: the steps of its load_config (worker/cli/weft_worker.cc).
WorkerConfig worker_runs(const std::string& yaml, const std::map<std::string, std::string>& env) {
  WorkerConfig cfg = parse_config(yaml, "config.yaml");
  apply_env_overrides(cfg, env);
  validate(cfg);
  resolve(cfg);
  return cfg;
}

std::map<std::string, std::string> env_of(const Json& list) {
  std::map<std::string, std::string> env;
  for (const auto& e : list) env[e["name"]] = e["value"];
  return env;
}

tj::TrainingJobSpec spec_of(const std::string& yaml, int replicas, const Json& env, std::vector<tj::SpecError>* errors) {
  const Json spec = {{"replicas", replicas},
                     {"image", "weft:test"},
                     {"worker", yaml.empty() ? Json::object() : to_json(YAML::Load(yaml))},
                     {"template", {{"env", env}}}};
  tj::TrainingJobSpec s = tj::parse_spec(spec, errors);
  for (auto& e : tj::validate(s)) errors->push_back(e);
  return s;
}

TEST(OneSchema, TheOperatorReadsTheConfigTheWorkerRuns) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const WorkerConfig worker = worker_runs(c.yaml, env_of(c.env));
    std::vector<tj::SpecError> errors;
    const tj::TrainingJobSpec s = spec_of(c.yaml, c.replicas, c.env, &errors);
    ASSERT_TRUE(errors.empty()) << tj::describe(errors);
    ASSERT_TRUE(s.worker_read.config);
    EXPECT_EQ(*s.worker_read.config, worker) << "operator:\n" << to_yaml(*s.worker_read.config) << "worker:\n"
                                             << to_yaml(worker);
    // The same estimate, from the same function; what the operator compares
    // is what the worker checks against its cgroup.
    const MemoryEstimate e = estimate_memory(worker, c.replicas);
    EXPECT_EQ(tj::check_memory(s).needed_bytes, e.host_bytes());
  }
}

// Fields no operator source names are read and checked all the same: the
// operator refuses what the worker refuses, at the same field, in the
// worker's words; and takes what it accepts.
TEST(OneSchema, FieldsTheOperatorNeverNamesAreReadAndChecked) {
  const std::vector<std::string> refused = {
      "model: {n_heads: 0}\n",
      "optim: {lr: 1.0e+300}\n",
      "optim: {beta2: 1.5}\n",
      "eval: {every: 0, batches: -1}\n",
      "model: {d_model: 130}\n",
      "data: {shard: x}\n",
      "train: {dtype: fp16}\n",
      "parallel: {strategy: tensor}\n",
      "parallel: {sp: 2}\n",
      "parallel: {bucket_cap_mb: 4097}\n",
      "metrics: {port: 70000}\n",
      "checkpoint: {every: -3}\n",
      "comm: {simulate: {bandwidth_gbps: 1.0e+300}}\n",
  };
  for (const std::string& yaml : refused) {
    SCOPED_TRACE(yaml);
    std::string path, problem;
    try {
      worker_runs(yaml, {});
      ADD_FAILURE() << "the worker runs it";
    } catch (const ConfigError& e) {
      path = e.path;
      problem = e.problem;
    }
    ASSERT_FALSE(path.empty());
    std::vector<tj::SpecError> errors;
    spec_of(yaml, 4, Json::array(), &errors);
    ASSERT_EQ(errors.size(), 1u) << tj::describe(errors);
    EXPECT_EQ(errors[0].field, "spec.worker." + path);
    EXPECT_EQ(errors[0].message, problem);
  }
  std::vector<tj::SpecError> errors;
  const tj::TrainingJobSpec s =
      spec_of("optim: {beta2: 0.97}\neval: {every: 10, batches: 3}\ndata: {seed: 77}\n", 2, Json::array(), &errors);
  ASSERT_TRUE(errors.empty()) << tj::describe(errors);
  EXPECT_EQ(s.worker_read.config->optim.beta2, 0.97);
  EXPECT_EQ(s.worker_read.config->eval.batches, 3);
  EXPECT_EQ(s.worker_read.config->data.seed, 77u);
  // An override in the pod's env that the worker refuses is named by its variable.
  spec_of("", 2, Json::array({{{"name", "WEFT_STEPS"}, {"value", "many"}}}), &errors);
  ASSERT_EQ(errors.size(), 1u) << tj::describe(errors);
  EXPECT_EQ(errors[0].field, "spec.template.env");
  EXPECT_NE(errors[0].message.find("WEFT_STEPS"), std::string::npos) << errors[0].message;
}

// The second program: weft-worker --print-config on the ConfigMap's
// config.yaml (with the pod template's env) prints the operator's reading.
TEST(OneSchema, WeftWorkerPrintsTheOperatorsReadingOfTheConfigMap) {
  const auto dir = testing::fresh_dir("one-schema");
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    std::vector<tj::SpecError> errors;
    const tj::TrainingJobSpec s = spec_of(c.yaml, c.replicas, c.env, &errors);
    ASSERT_TRUE(errors.empty()) << tj::describe(errors);
    const Json job = {{"metadata", {{"name", "j"}, {"namespace", "n"}, {"uid", "u"}}}};
    const std::string file = testing::write_file(
        dir / "config.yaml", tj::build_configmap(job, s)["data"][contract::kConfigKey].get<std::string>());
    std::vector<std::string> env;
    for (const auto& [k, v] : env_of(c.env)) env.push_back(k + "=" + v);
    const testing::ProcessResult r =
        testing::run_process({testing::bin("weft-worker"), file, "--print-config"}, env);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(testing::has(r.output, to_yaml(*s.worker_read.config))) << r.output;
  }
}

// init_from's config.json is inside the pod: the operator reads and types
// the fields and applies every rule that does not read the model section;
// those that do are the worker's at start, and there is no estimate.
TEST(OneSchema, InitFromLeavesTheModelsRulesToTheWorker) {
  std::vector<tj::SpecError> errors;
  const tj::TrainingJobSpec s =
      spec_of("init_from: /models/llama\nmodel: {n_heads: 32}\n", 2, Json::array(), &errors);
  EXPECT_TRUE(errors.empty()) << tj::describe(errors);  // tiny's d_model 128 over 32 heads is config.json's to say
  EXPECT_FALSE(s.worker_read.shape_known);
  const tj::MemoryCheck m = tj::check_memory(s);
  EXPECT_EQ(m.reason, tj::kReasonNotEstimated);
  EXPECT_NE(m.message.find("spec.worker.init_from is set"), std::string::npos) << m.message;
  // A field of the wrong form, and a rule that does not read the model, are
  // still refused, in the worker's words.
  for (const auto& [yaml, field] : std::vector<std::pair<std::string, std::string>>{
           {"train: {dtype: fp16}\n", "spec.worker.train.dtype"},
           {"metrics: {port: 70000}\n", "spec.worker.metrics.port"},
           {"parallel: {strategy: dp, sp: 2}\n", "spec.worker.parallel.strategy"},
           {"optim: {lr: 1.0e+300}\n", "spec.worker.optim.lr"},
           {"parallel: {strategy: isp, sp: 3}\ntrain: {seq_len: 64}\n", "spec.worker.parallel.sp"}}) {
    SCOPED_TRACE(yaml);
    errors.clear();
    spec_of("init_from: /models/llama\n" + yaml, 6, Json::array(), &errors);
    ASSERT_EQ(errors.size(), 1u) << tj::describe(errors);
    EXPECT_EQ(errors[0].field, field);
  }
  // An ISP layout the model may or may not split into is config.json's to say.
  errors.clear();
  spec_of("init_from: /models/llama\nparallel: {strategy: isp, wp: 3}\n", 6, Json::array(), &errors);
  EXPECT_TRUE(errors.empty()) << tj::describe(errors);
}

// The shipped examples: each passes the operator and fits its limit.
TEST(OneSchema, EveryExampleFitsItsMemoryLimit) {
  int jobs = 0;
  for (const auto& f :
       std::filesystem::directory_iterator(std::string(WEFT_SOURCE_DIR) + "/manifests/examples")) {
    if (f.path().extension() != ".yaml") continue;
    for (const YAML::Node& doc : YAML::LoadAllFromFile(f.path().string())) {
      if (!doc["kind"] || doc["kind"].as<std::string>() != "TrainingJob") continue;
      SCOPED_TRACE(f.path().filename().string());
      ++jobs;
      std::vector<tj::SpecError> errors;
      const tj::TrainingJobSpec s = tj::parse_spec(to_json(doc["spec"]), &errors);
      for (auto& e : tj::validate(s)) errors.push_back(e);
      ASSERT_TRUE(errors.empty()) << tj::describe(errors);
      const tj::MemoryCheck m = tj::check_memory(s);
      EXPECT_TRUE(m.fits) << m.message;
      ASSERT_NE(m.reason, tj::kReasonNotEstimated) << m.message;
      WorkerConfig cfg = parse_config(
          doc["spec"]["worker"] ? YAML::Dump(doc["spec"]["worker"]) : "", f.path().string());
      std::map<std::string, std::string> env;
      if (doc["spec"]["template"] && doc["spec"]["template"]["env"])
        for (const auto& e : doc["spec"]["template"]["env"])
          if (e["value"]) env[e["name"].as<std::string>()] = e["value"].as<std::string>();
      apply_env_overrides(cfg, env);
      resolve(cfg);
      // A pod holds procsPerPod ranks of a job of pods x procsPerPod.
      EXPECT_EQ(m.needed_bytes, s.ranks_per_pod() * estimate_memory(cfg, s.world_size()).host_bytes());
    }
  }
  EXPECT_GE(jobs, 5);
}

}  // namespace
}  // namespace weft
