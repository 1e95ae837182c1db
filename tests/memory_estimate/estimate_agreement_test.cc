// The worker and the operator estimate the same bytes per rank for the same
// job: the worker from its parsed config (presets, defaults, env overrides),
// the operator from spec.worker as the API server hands it over (JSON) with
// its own minimal reader. Both end in contract/weft_memory_estimate.h; what
// can diverge is the reading, which these cases cover field by field.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/yaml_json.h"
#include "config/config.h"
#include "train/memory_estimate.h"
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

TEST(EstimateAgreement, WorkerAndOperatorEstimateTheSameBytes) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    WorkerConfig cfg = parse_config(c.yaml, c.name);
    std::map<std::string, std::string> env;
    for (const auto& e : c.env) env[e["name"]] = e["value"];
    apply_env_overrides(cfg, env);
    validate(cfg);  // every case is a config the worker would run
    const contract::MemoryEstimateInputs worker_in = memory_estimate_inputs(cfg, c.replicas);
    const MemoryEstimate worker = estimate_memory(cfg, c.replicas);

    const Json spec = {{"replicas", c.replicas},
                       {"image", "weft:test"},
                       {"worker", to_json(YAML::Load(c.yaml))},
                       {"template", {{"env", c.env}}}};
    std::vector<tj::SpecError> errors;
    const tj::TrainingJobSpec s = tj::parse_spec(spec, &errors);
    ASSERT_TRUE(errors.empty()) << tj::describe(errors);
    std::string why;
    const auto op_in = tj::memory_estimate_inputs(s, &why);
    ASSERT_TRUE(op_in) << why;
    EXPECT_EQ(op_in->device, worker_in.device);
    EXPECT_EQ(op_in->dtype, worker_in.dtype);
    EXPECT_EQ(op_in->vocab_size, worker_in.vocab_size);
    EXPECT_EQ(op_in->d_model, worker_in.d_model);
    EXPECT_EQ(op_in->n_layers, worker_in.n_layers);
    EXPECT_EQ(op_in->n_heads, worker_in.n_heads);
    EXPECT_EQ(op_in->n_kv_heads, worker_in.n_kv_heads);
    EXPECT_EQ(op_in->head_dim, worker_in.head_dim);
    EXPECT_EQ(op_in->ffn, worker_in.ffn);
    EXPECT_EQ(op_in->tie_embeddings, worker_in.tie_embeddings);
    EXPECT_EQ(op_in->micro_batch, worker_in.micro_batch);
    EXPECT_EQ(op_in->seq_len, worker_in.seq_len);
    EXPECT_EQ(op_in->logits_chunk_mb, worker_in.logits_chunk_mb);
    EXPECT_EQ(op_in->recompute, worker_in.recompute);
    EXPECT_EQ(op_in->strategy, worker_in.strategy);
    EXPECT_EQ(op_in->sp, worker_in.sp);
    EXPECT_EQ(op_in->wp, worker_in.wp);
    EXPECT_EQ(op_in->bf16_wire, worker_in.bf16_wire);
    EXPECT_EQ(op_in->zero_stage, worker_in.zero_stage);
    EXPECT_EQ(op_in->recompute_blocks, worker_in.recompute_blocks);
    EXPECT_EQ(op_in->wdp_strategy, worker_in.wdp_strategy);
    EXPECT_EQ(op_in->world, worker_in.world);

    const contract::MemoryEstimate op = contract::estimate_memory(*op_in);
    EXPECT_EQ(op, worker) << "operator " << op.describe() << "\nworker   " << worker.describe();
    // And what the operator compares is what the worker checks against its cgroup.
    EXPECT_EQ(tj::check_memory(s).needed_bytes, worker.host_bytes());
  }
}

// Every preset the worker knows reads the same in the operator; a name the
// worker refuses is one the operator does not estimate.
TEST(EstimateAgreement, PresetsMatchTheWorkers) {
  for (const std::string name : {"tiny", "gpt2-124m"}) {
    SCOPED_TRACE(name);
    tj::TrainingJobSpec s;
    s.replicas = 4;
    s.worker = {{"preset", name}};
    std::string why;
    const auto op_in = tj::memory_estimate_inputs(s, &why);
    ASSERT_TRUE(op_in) << why;
    EXPECT_EQ(contract::estimate_memory(*op_in), estimate_memory(preset(name), 4));
  }
  EXPECT_THROW(preset("gpt3"), ConfigError);
  tj::TrainingJobSpec s;
  s.worker = {{"preset", "gpt3"}};
  std::string why;
  EXPECT_FALSE(tj::memory_estimate_inputs(s, &why));
  EXPECT_NE(why.find("spec.worker.preset 'gpt3'"), std::string::npos) << why;
}

// What the operator cannot read it does not guess.
TEST(EstimateAgreement, ConfigsTheOperatorCannotReadAreNotEstimated) {
  struct Bad {
    Json worker;
    std::string why;
  };
  const std::vector<Bad> bad = {
      {{{"init_from", "/models/llama"}}, "spec.worker.init_from is set"},
      {{{"model", {{"d_model", "512"}}}}, "spec.worker.model.d_model is not an integer"},
      {{{"model", {{"d_model", 512.5}}}}, "spec.worker.model.d_model is not an integer"},
      {{{"parallel", {{"bf16_wire", "yes"}}}}, "spec.worker.parallel.bf16_wire is not a boolean"},
      {{{"parallel", {{"zero", 2}}}}, "spec.worker.parallel.zero is not a mapping"},
      {{{"train", {{"dtype", 16}}}}, "spec.worker.train.dtype is not one of auto, f32, bf16"},
      {{{"train", {{"dtype", "fp16"}}}}, "spec.worker.train.dtype is not one of auto, f32, bf16"},
      {{{"device", "tpu"}}, "spec.worker.device is not one of cpu, cuda"},
      {{{"train", {{"logits_chunk_mb", 0}}}}, "spec.worker.train.logits_chunk_mb is not auto or a number > 0"},
      {{{"train", {{"logits_chunk_mb", "big"}}}}, "spec.worker.train.logits_chunk_mb is not auto or a number > 0"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.worker.dump());
    tj::TrainingJobSpec s;
    s.worker = b.worker;
    std::string why;
    EXPECT_FALSE(tj::memory_estimate_inputs(s, &why));
    EXPECT_NE(why.find(b.why), std::string::npos) << why;
  }
}

// The shipped examples: both sides agree on each, and each fits its limit.
TEST(EstimateAgreement, EveryExampleFitsItsMemoryLimit) {
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
      // A pod holds procsPerPod ranks of a job of pods x procsPerPod.
      EXPECT_EQ(m.needed_bytes, s.ranks_per_pod() * estimate_memory(cfg, s.world_size()).host_bytes());
    }
  }
  EXPECT_GE(jobs, 5);
}

}  // namespace
}  // namespace weft
