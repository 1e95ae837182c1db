// weft-worker --init-from / init_from as a user runs it: a run starts from a
// transformers checkpoint, its checkpoint is an HF directory that starts the
// next run, and a bad directory is exit 1 naming the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/run_process.h"

namespace {

namespace fs = std::filesystem;
using weft::testing::fresh_dir;
using weft::testing::run_process;
using weft::testing::write_file;
const std::string kWorker = weft::testing::bin("weft-worker");
const fs::path kGqa = fs::path(WEFT_SOURCE_DIR) / "tests/testdata/hf-llama/gqa-untied";

const char* kRun = "train: {steps: 3, seq_len: 16, micro_batch: 2, log_every: 1}\ndata: {branching: 3}\nmetrics: {port: 0}\n";

TEST(InitFromCli, StartsFromHfDirAndItsCheckpointStartsTheNextRun) {
  fs::path d = fresh_dir("initcli");
  std::string cfg = write_file(d / "c.yaml", kRun);
  auto r = run_process({kWorker, cfg, "--init-from", kGqa.string(), "--out", (d / "a").string()});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("initialized 119104 parameters from " + kGqa.string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(2 layers, d_model 64, heads 4/2 kv, ffn 160, vocab 256)"), std::string::npos) << r.output;
  const fs::path ckpt = d / "a/checkpoints/step-3";
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors", "meta.json"})
    EXPECT_TRUE(fs::exists(ckpt / f)) << f;
  // The checkpoint as init_from, written in the YAML this time, sharded.
  std::string cfg2 = write_file(d / "c2.yaml", std::string(kRun) + "init_from: '" + ckpt.string() +
                                                   "'\ncheckpoint: {max_shard_mb: 0.2}\n");
  auto r2 = run_process({kWorker, cfg2, "--out", (d / "b").string()});
  ASSERT_EQ(r2.code, 0) << r2.output;
  EXPECT_NE(r2.output.find("initialized 119104 parameters from " + ckpt.string()), std::string::npos) << r2.output;
  EXPECT_TRUE(fs::exists(d / "b/checkpoints/step-3/model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(d / "b/checkpoints/step-3/model-00001-of-00003.safetensors"));
  EXPECT_FALSE(fs::exists(d / "b/checkpoints/step-3/model.safetensors"));
  fs::remove_all(d);
}

TEST(InitFromCli, PrintConfigShowsTheModelFromConfigJson) {
  auto r = run_process({kWorker, "--init-from", kGqa.string(), "--print-config"});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("d_model: 64"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rope_theta: 50000"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("norm_eps: 1e-06"), std::string::npos) << r.output;
}

TEST(InitFromCli, BadCasesExitOneNamingTheProblem) {
  fs::path d = fresh_dir("initbad");
  auto run = [&](const std::string& yaml, const std::string& init) {
    std::string cfg = write_file(d / "c.yaml", std::string(kRun) + yaml);
    return run_process({kWorker, cfg, "--init-from", init, "--out", (d / "out").string()});
  };
  // Shape.
  auto shape = run("model: {d_model: 32}\n", kGqa.string());
  EXPECT_EQ(shape.code, 1) << shape.output;
  EXPECT_NE(shape.output.find("model.d_model: 32 in the config, but " + (kGqa / "config.json").string() +
                              " has hidden_size 64"),
            std::string::npos)
      << shape.output;
  // Tying.
  auto tie = run("model: {tie_embeddings: true}\n", kGqa.string());
  EXPECT_EQ(tie.code, 1) << tie.output;
  EXPECT_NE(tie.output.find("model.tie_embeddings: true in the config, but"), std::string::npos) << tie.output;
  // Unsupported rope scaling and architecture.
  std::ifstream in(kGqa / "config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  fs::path m = d / "model";
  fs::create_directories(m);
  fs::copy_file(kGqa / "model.safetensors", m / "model.safetensors");
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  write_file(m / "config.json", j.dump());
  auto rope = run("", m.string());
  EXPECT_EQ(rope.code, 1) << rope.output;
  EXPECT_NE(rope.output.find("rope_scaling: rope_type 'yarn' is not supported (weft implements 'default', unscaled, "
                             "and 'llama3'): {\"factor\":4.0,\"rope_type\":\"yarn\"}"),
            std::string::npos)
      << rope.output;
  j.erase("rope_scaling");
  j["architectures"] = {"GPT2LMHeadModel"};
  write_file(m / "config.json", j.dump());
  auto arch = run("", m.string());
  EXPECT_EQ(arch.code, 1) << arch.output;
  EXPECT_NE(arch.output.find("architectures: [\"GPT2LMHeadModel\"] is not supported"), std::string::npos)
      << arch.output;
  // Weights that do not match their own config.json (a tied file, untied config).
  j["architectures"] = {"LlamaForCausalLM"};
  write_file(m / "config.json", j.dump());
  fs::remove(m / "model.safetensors");
  fs::copy_file(kGqa.parent_path() / "mha-tied/model.safetensors", m / "model.safetensors");
  auto weights = run("", m.string());
  EXPECT_EQ(weights.code, 1) << weights.output;
  EXPECT_NE(weights.output.find("init_from: " + m.string() + ": weights do not fit the model"), std::string::npos)
      << weights.output;
  EXPECT_NE(weights.output.find("missing tensor 'lm_head.weight'"), std::string::npos) << weights.output;
  // Not a directory.
  auto missing = run("", (d / "nope").string());
  EXPECT_EQ(missing.code, 1) << missing.output;
  EXPECT_NE(missing.output.find((d / "nope").string() + ": not a directory"), std::string::npos) << missing.output;
  fs::remove_all(d);
}

}  // namespace
