// Hugging Face interop: checkpoints written by transformers 5.17
// (tests/testdata/hf-llama, see make_fixture.py there) load through init_from
// and give the loss and logits transformers computed; weft's checkpoints are
// HF model directories (config.json, shards + index) that reload bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "config/hf_config.h"
#include "data/source.h"
#include "tensor/bf16.h"
#include "train/checkpoint.h"
#include "train/hf_weights.h"
#include "train/train_util.h"
#include "train/trainer.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using testing::fresh_dir;
using testing::small_config;

const fs::path kFixtures = fs::path(WEFT_SOURCE_DIR) / "tests/testdata/hf-llama";

WorkerConfig config_for(const fs::path& dir, const std::string& more_yaml = "") {
  return parse_config("init_from: '" + dir.string() + "'\n" + more_yaml, "test");
}

std::vector<char> raw(const SafetensorsIndex& f, const std::string& name) {
  const auto& e = f.at(name);
  std::vector<char> out(e.bytes);
  f.read_raw(name, 0, e.numel, out.data());
  return out;
}

struct Expected {
  int B = 0, T = 0, V = 0;
  std::vector<int32_t> ids;  // [B*T]
  std::vector<float> logits;  // [B*T*V]
  float loss = 0;
};

Expected read_expected(const fs::path& dir) {
  SafetensorsIndex f = SafetensorsIndex::open((dir / "expected.safetensors").string());
  Expected x;
  const auto& ids = f.at("input_ids");
  EXPECT_EQ(ids.dtype, "I64");
  x.B = static_cast<int>(ids.shape[0]);
  x.T = static_cast<int>(ids.shape[1]);
  std::vector<int64_t> ids64(ids.numel);
  f.read_raw("input_ids", 0, ids.numel, ids64.data());
  x.ids.assign(ids64.begin(), ids64.end());
  const auto& lg = f.at("logits");
  x.V = static_cast<int>(lg.shape[2]);
  x.logits.resize(lg.numel);
  f.read_raw("logits", 0, lg.numel, x.logits.data());
  f.read_raw("loss", 0, 1, &x.loss);
  return x;
}

struct Diffs {
  double loss_rel = 0;    // |loss - expected| / |expected|
  double logits_rel = 0;  // max |a - b| / max |b|
  double logits_elem = 0; // max |a - b| / (|b| + 1e-2): elementwise, floored
};

// HF's causal-LM loss: logits[:, t] predicts ids[:, t+1], mean over B*(T-1).
Diffs compare_with_transformers(const ModelConfig& mc, const fs::path& dir,
                                const fs::path& expected_dir = {}) {
  Llama model(mc);
  load_hf_weights(HfWeights::open(dir.string()), model);
  const Expected x = read_expected(expected_dir.empty() ? dir : expected_dir);
  Diffs d;
  // Logits of all T positions (targets only feed the loss, unused here).
  std::vector<int32_t> targets(x.ids.size(), 0);
  model.forward(x.ids.data(), targets.data(), x.B, x.T);
  const float* got = model.logits().f32();
  double max_ref = 0, max_diff = 0;
  for (size_t i = 0; i < x.logits.size(); ++i) {
    const double diff = std::fabs(double(got[i]) - x.logits[i]);
    max_ref = std::max(max_ref, std::fabs(double(x.logits[i])));
    max_diff = std::max(max_diff, diff);
    d.logits_elem = std::max(d.logits_elem, diff / (std::fabs(double(x.logits[i])) + 1e-2));
  }
  d.logits_rel = max_diff / max_ref;
  // The loss on T-1 positions, shifted as transformers does.
  const int T1 = x.T - 1;
  std::vector<int32_t> in, tg;
  for (int b = 0; b < x.B; ++b)
    for (int t = 0; t < T1; ++t) {
      in.push_back(x.ids[b * x.T + t]);
      tg.push_back(x.ids[b * x.T + t + 1]);
    }
  const double loss = model.forward(in.data(), tg.data(), x.B, T1);
  d.loss_rel = std::fabs(loss - x.loss) / std::fabs(x.loss);
  return d;
}

class Fixture : public ::testing::TestWithParam<const char*> {
 protected:
  fs::path dir() const { return kFixtures / GetParam(); }
};

TEST_P(Fixture, ModelSectionComesFromConfigJson) {
  const ModelConfig m = config_for(dir()).model;
  const bool tied = std::string(GetParam()) == "mha-tied";
  EXPECT_EQ(m.vocab_size, 256);
  EXPECT_EQ(m.d_model, 64);
  EXPECT_EQ(m.n_layers, tied ? 3 : 2);
  EXPECT_EQ(m.n_heads, 4);
  EXPECT_EQ(m.n_kv_heads, tied ? 4 : 2);
  EXPECT_EQ(m.ffn(), tied ? 176 : 160);
  EXPECT_EQ(m.tie_embeddings, tied);
  EXPECT_EQ(m.rope_theta, 50000.0);  // from rope_parameters (transformers 5)
  EXPECT_EQ(m.norm_eps, 1e-6);
  EXPECT_EQ(m.max_seq_len, 64);
}

TEST_P(Fixture, InitFromGivesTransformersLossAndLogits) {
  const Diffs d = compare_with_transformers(config_for(dir()).model, dir());
  std::printf("[ measured ] %s: loss rel diff %.3g, logits max|diff|/max|ref| %.3g, elementwise %.3g\n",
              GetParam(), d.loss_rel, d.logits_rel, d.logits_elem);
  RecordProperty("loss_rel_diff", std::to_string(d.loss_rel));
  RecordProperty("logits_rel_diff", std::to_string(d.logits_rel));
  EXPECT_LT(d.loss_rel, 1e-5);
  EXPECT_LT(d.logits_rel, 1e-5);
  EXPECT_LT(d.logits_elem, 1e-4);
}

// The fixture is sensitive to the config: ignoring rope_theta or
// rms_norm_eps from config.json would be caught by the test above.
TEST_P(Fixture, ConfigFieldsMatterForTheComparison) {
  ModelConfig m = config_for(dir()).model;
  m.rope_theta = 10000;
  EXPECT_GT(compare_with_transformers(m, dir()).logits_rel, 1e-4);
  m = config_for(dir()).model;
  m.norm_eps = 1e-2;
  EXPECT_GT(compare_with_transformers(m, dir()).logits_rel, 1e-4);
}

// Export -> import: the weights and the model section come back exactly.
TEST_P(Fixture, ExportImportRoundTripIsBitIdentical) {
  const fs::path out = fresh_dir("hf-export");
  const ModelConfig mc = config_for(dir()).model;
  Llama model(mc);
  load_hf_weights(HfWeights::open(dir().string()), model);
  write_hf_model(out.string(), model);
  EXPECT_TRUE(fs::exists(out / "generation_config.json"));
  EXPECT_FALSE(fs::exists(out / "model.safetensors.index.json"));
  // The tensors are byte for byte those transformers wrote (same names; a
  // tied model has no lm_head.weight, as transformers saves it).
  SafetensorsIndex theirs = SafetensorsIndex::open((dir() / "model.safetensors").string());
  SafetensorsIndex ours = SafetensorsIndex::open((out / "model.safetensors").string());
  ASSERT_EQ(ours.tensors().size(), theirs.tensors().size());
  for (const auto& [name, e] : theirs.tensors()) {
    ASSERT_TRUE(ours.has(name)) << name;
    EXPECT_EQ(ours.at(name).shape, e.shape) << name;
    EXPECT_TRUE(raw(ours, name) == raw(theirs, name)) << name;
  }
  const ModelConfig back = config_for(out).model;
  EXPECT_EQ(back, mc);
  Llama again(back);
  load_hf_weights(HfWeights::open(out.string()), again);
  for (size_t i = 0; i < model.params().size(); ++i) {
    const Tensor a = model.param(int(i)), b = again.param(int(i));
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes()), 0) << model.params()[i].name;
  }
  fs::remove_all(out);
}

TEST_P(Fixture, ShardedExportReloadsIdentically) {
  const fs::path out = fresh_dir("hf-shards");
  const ModelConfig mc = config_for(dir()).model;
  Llama model(mc);
  load_hf_weights(HfWeights::open(dir().string()), model);
  const uint64_t limit = 100'000;
  const auto files = write_hf_model(out.string(), model, limit);
  EXPECT_FALSE(fs::exists(out / "model.safetensors"));
  std::ifstream in(out / "model.safetensors.index.json");
  const nlohmann::json index = nlohmann::json::parse(in);
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), model.num_params() * 4);
  EXPECT_EQ(index["weight_map"].size(), model.params().size());
  std::set<std::string> shards;
  for (const auto& f : index["weight_map"]) shards.insert(f.get<std::string>());
  ASSERT_GE(shards.size(), 4u);
  const std::string n = std::to_string(shards.size());
  for (const std::string& s : shards) {
    EXPECT_EQ(s.size(), std::string("model-00001-of-00005.safetensors").size()) << s;
    EXPECT_NE(s.find("-of-" + std::string(5 - n.size(), '0') + n + ".safetensors"), std::string::npos) << s;
    SafetensorsIndex f = SafetensorsIndex::open((out / s).string());
    uint64_t bytes = 0;
    for (const auto& [name, e] : f.tensors()) bytes += e.bytes;
    EXPECT_TRUE(bytes <= limit || f.tensors().size() == 1) << s << ": " << bytes << " bytes";
  }
  EXPECT_EQ(files.size(), shards.size() + 3);  // + index, config.json, generation_config.json
  Llama again(mc);
  const HfWeights w = HfWeights::open(out.string());
  EXPECT_EQ(w.files().size(), shards.size());
  load_hf_weights(w, again);
  for (size_t i = 0; i < model.params().size(); ++i) {
    const Tensor a = model.param(int(i)), b = again.param(int(i));
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes()), 0) << model.params()[i].name;
  }
  // An element range of one tensor: what a rank holding a shard reads.
  const ParamInfo& p = model.params()[3];
  std::vector<float> part(10);
  w.read(p.name, 7, Tensor::f32(part.data(), {10}));
  EXPECT_EQ(std::memcmp(part.data(), model.param(3).f32() + 7, 40), 0);
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(HfLlama, Fixture, ::testing::Values("gqa-untied", "mha-tied"),
                         [](const auto& info) {
                           std::string s = info.param;
                           s.erase(std::remove(s.begin(), s.end(), '-'), s.end());
                           return s;
                         });

// Independent of the loader's conversion: value of IEEE half bits.
float half_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const float v = e == 0 ? std::ldexp(float(m), -24) : std::ldexp(1.0f + m / 1024.0f, e - 15);
  return (h & 0x8000) ? -v : v;
}
// Truncating f32 -> half for the normal range; tiny values flush to zero.
uint16_t to_half(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const int e = int((u >> 23) & 0xff) - 127 + 15;
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  if (e <= 0) return sign;
  return static_cast<uint16_t>(sign | (e << 10) | ((u >> 13) & 0x3ff));
}

// bf16 and fp16 checkpoints load, converted exactly, in the working dtype.
TEST(HfImport, Bf16AndF16TensorsConvert) {
  const fs::path src = kFixtures / "gqa-untied";
  const ModelConfig mc = config_for(src).model;
  Llama ref(mc);
  load_hf_weights(HfWeights::open(src.string()), ref);
  for (const std::string dtype : {"BF16", "F16"}) {
    const fs::path out = fresh_dir("hf-" + dtype);
    fs::copy_file(src / "config.json", out / "config.json");
    std::vector<std::vector<uint16_t>> store;
    SafetensorsWriter w;
    for (size_t i = 0; i < ref.params().size(); ++i) {
      const Tensor t = ref.param(int(i));
      store.emplace_back(t.numel());
      for (int64_t k = 0; k < t.numel(); ++k)
        store.back()[k] = dtype == "BF16" ? f32_to_bf16(t.f32()[k]) : to_half(t.f32()[k]);
      w.add(ref.params()[i].name, dtype, std::vector<int64_t>(t.shape.d.begin(), t.shape.d.begin() + t.rank()),
            store.back().data());
    }
    w.write((out / "model.safetensors").string());
    Llama m(mc);
    load_hf_weights(HfWeights::open(out.string()), m);
    for (size_t i = 0; i < m.params().size(); ++i) {
      const float* got = m.param(int(i)).f32();
      for (int64_t k = 0; k < m.params()[i].numel; ++k) {
        const float want = dtype == "BF16" ? bf16_to_f32(store[i][k]) : half_value(store[i][k]);
        ASSERT_EQ(got[k], want) << dtype << " " << m.params()[i].name << "[" << k << "]";
      }
    }
    const Diffs d = compare_with_transformers(mc, out, src);
    EXPECT_LT(d.loss_rel, 1e-2) << dtype;  // rounded weights: close, not exact
    EXPECT_GT(d.loss_rel, 0) << dtype;
    fs::remove_all(out);
  }
}

// Weights that do not fit are named, all at once.
TEST(HfImport, MissingAndExtraTensorsAreNamed) {
  const fs::path src = kFixtures / "gqa-untied";
  const fs::path out = fresh_dir("hf-missing");
  fs::copy_file(src / "config.json", out / "config.json");
  SafetensorsIndex f = SafetensorsIndex::open((src / "model.safetensors").string());
  std::vector<std::vector<char>> keep;
  SafetensorsWriter w;
  for (const auto& [name, e] : f.tensors()) {
    if (name == "lm_head.weight") continue;
    keep.push_back(raw(f, name));
    w.add(name == "model.norm.weight" ? "model.final_norm.weight" : name, e.dtype, e.shape, keep.back().data());
  }
  w.write((out / "model.safetensors").string());
  Llama m(config_for(src).model);
  try {
    load_hf_weights(HfWeights::open(out.string()), m);
    ADD_FAILURE() << "loaded weights without lm_head";
  } catch (const CheckpointError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("missing tensor 'lm_head.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("missing tensor 'model.norm.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'model.final_norm.weight' is not a weight of this model"), std::string::npos) << msg;
  }
  fs::remove_all(out);
}

// A training run's checkpoint is an HF directory that init_from reloads bit
// for bit, and resume works through sharded model files.
TEST(HfExport, TrainedCheckpointReloadsAndShardedResumeMatches) {
  const fs::path dir = fresh_dir("hf-resume");
  WorkerConfig full = small_config((dir / "full").string());
  TrainSummary ref = Trainer(full).run();

  WorkerConfig part = full;
  part.train.out_dir = (dir / "part").string();
  part.checkpoint.every = 8;
  part.checkpoint.max_shard_mb = 0.004;  // 4000 bytes: a dozen shards
  Trainer first(part);
  EXPECT_EQ(first.run().losses, ref.losses);
  const std::string ckpt_dir = part.train.out_dir + "/checkpoints";
  const fs::path last = fs::path(ckpt_dir) / "step-20";
  ASSERT_TRUE(fs::exists(last / "model.safetensors.index.json"));
  ASSERT_TRUE(fs::exists(last / "config.json"));
  ASSERT_FALSE(fs::exists(last / "model.safetensors"));
  // The model files are what the trainer ended with.
  WorkerConfig imported = config_for(last, "train: {seq_len: 16}\n");
  EXPECT_EQ(imported.model.ffn(), part.model.ffn());
  imported.model.ffn_hidden = part.model.ffn_hidden;
  EXPECT_EQ(imported.model, part.model);
  Llama back(imported.model);
  load_hf_weights(HfWeights::open(last.string()), back);
  for (size_t i = 0; i < back.params().size(); ++i) {
    const Tensor a = first.model().param(int(i)), b = back.param(int(i));
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes()), 0) << back.params()[i].name;
  }
  // Resume from the sharded step-8 reproduces the uninterrupted run.
  testing::expect_exact_resume(part, ref, 8);
  fs::remove_all(dir);
}

// A Llama 3 checkpoint (llama3 RoPE scaling, head_dim apart from d_model /
// n_heads, tied) is an HF directory whose config.json brings the same model
// back through init_from, with the trained weights bit for bit, and a run
// from it starts where the trained one ended.
TEST(HfExport, Llama3RopeAndHeadDimCheckpointReloads) {
  const fs::path dir = fresh_dir("hf-llama3");
  WorkerConfig c = small_config((dir / "run").string());
  c.model.explicit_head_dim = 12;  // 4 heads x 12, d_model 32
  c.model.tie_embeddings = true;
  c.model.rope_theta = 500000;
  c.model.rope_scaling = {"llama3", 32, 1, 4, 16};
  c.train.steps = 4;
  Trainer t(c);
  t.run();
  const fs::path last = fs::path(c.train.out_dir) / "checkpoints" / "step-4";
  ASSERT_TRUE(fs::exists(last / "config.json"));
  WorkerConfig imported = config_for(last, "train: {seq_len: 16}\n");
  imported.model.ffn_hidden = c.model.ffn_hidden;
  EXPECT_EQ(imported.model, c.model);
  Llama back(imported.model);
  load_hf_weights(HfWeights::open(last.string()), back);
  for (size_t i = 0; i < back.params().size(); ++i) {
    const Tensor a = t.model().param(int(i)), b = back.param(int(i));
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes()), 0) << back.params()[i].name;
  }
  fs::remove_all(dir);
}

// init_from seeds step 0 with the HF weights and a fresh optimizer; once the
// run has its own checkpoint, a restart resumes from that instead.
TEST(HfImport, TrainerStartsFromHfWeightsThenResumesOwnCheckpoint) {
  const fs::path dir = fresh_dir("hf-trainer");
  const fs::path src = kFixtures / "gqa-untied";
  WorkerConfig c = parse_config("init_from: '" + src.string() +
                                    "'\ntrain: {steps: 2, seq_len: 16, micro_batch: 2, log_every: 0, out_dir: '" +
                                    dir.string() + "'}\ndata: {branching: 3}\n",
                                "test");
  // The first step's loss is the HF model's loss on the trainer's first batch.
  Llama hf(c.model);
  load_hf_weights(HfWeights::open(src.string()), hf);
  Batch batch;
  make_source(c)->fill(batch, 2, 16, BatchIndex{0, 0, 1, 0, 1});
  const double want = hf.forward(batch.inputs.data(), batch.targets.data(), 2, 16);
  TrainSummary s = Trainer(c).run();
  ASSERT_EQ(s.start_step, 0);
  ASSERT_EQ(s.losses.size(), 2u);
  EXPECT_DOUBLE_EQ(s.losses[0], want);
  // A restart with more steps resumes at step 2 rather than re-initializing.
  c.train.steps = 3;
  TrainSummary r = Trainer(c).run();
  EXPECT_EQ(r.start_step, 2);
  fs::remove_all(dir);
}

// A config that contradicts the directory fails before any weight is read,
// even when built without parse_config.
TEST(HfImport, TrainerRejectsMismatchedModel) {
  const fs::path dir = fresh_dir("hf-mismatch");
  WorkerConfig c = small_config(dir.string());
  c.init_from = (kFixtures / "gqa-untied").string();
  try {
    Trainer(c).run();
    ADD_FAILURE() << "trained a model of another shape from init_from";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.vocab_size: 32 in the config, but"), std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace weft
