// init_from's config.json: both transformers spellings, explicit fields, and
// every refused case named with the field and both values.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "config/hf_config.h"
#include "support/run_process.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
const fs::path kGqa = fs::path(WEFT_SOURCE_DIR) / "tests/testdata/hf-llama/gqa-untied";

nlohmann::json fixture_json() {
  std::ifstream in(kGqa / "config.json");
  return nlohmann::json::parse(in);
}

// A directory holding `j` as config.json.
fs::path dir_with(const nlohmann::json& j, const std::string& tag) {
  fs::path d = testing::fresh_dir(tag);
  testing::write_file(d / "config.json", j.dump(2));
  return d;
}

std::string error_of(const std::string& yaml) {
  try {
    parse_config(yaml, "c.yaml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string init(const fs::path& d) { return "init_from: '" + d.string() + "'\n"; }

TEST(HfConfig, Transformers4SpellingReadsTheSame) {
  nlohmann::json j = fixture_json();
  j.erase("rope_parameters");
  j.erase("dtype");
  j["rope_theta"] = 50000.0;
  j["rope_scaling"] = nullptr;
  j["torch_dtype"] = "bfloat16";
  fs::path d = dir_with(j, "hf4");
  const HfModelConfig v4 = read_hf_config(d.string());
  const HfModelConfig v5 = read_hf_config(kGqa.string());
  EXPECT_EQ(v4.model, v5.model);
  EXPECT_EQ(v4.model.rope_theta, 50000.0);
  EXPECT_EQ(v4.dtype, "bfloat16");
  EXPECT_EQ(v5.dtype, "float32");
  fs::remove_all(d);
}

TEST(HfConfig, WrittenConfigReadsBack) {
  ModelConfig m;
  m.vocab_size = 1000, m.d_model = 96, m.n_layers = 3, m.n_heads = 6, m.n_kv_heads = 3;
  m.ffn_hidden = 256, m.max_seq_len = 512, m.rope_theta = 500000, m.norm_eps = 1e-5;
  m.tie_embeddings = true, m.init_std = 0.01;
  fs::path d = dir_with(nlohmann::json::parse(hf_config_json(m, "float32")), "hfw");
  HfModelConfig back = read_hf_config(d.string());
  EXPECT_EQ(back.model, m);
  EXPECT_EQ(back.dtype, "float32");
  fs::remove_all(d);
}

// Llama 3 scaling and head_dim are written in both transformers spellings
// and read back.
TEST(HfConfig, WrittenLlama3ConfigReadsBack) {
  ModelConfig m;
  m.vocab_size = 1000, m.d_model = 96, m.n_layers = 2, m.n_heads = 4, m.n_kv_heads = 1, m.explicit_head_dim = 32;
  m.ffn_hidden = 256;
  m.rope_theta = 500000, m.rope_scaling = {"llama3", 32, 1, 4, 8192}, m.tie_embeddings = true;
  const nlohmann::json j = nlohmann::json::parse(hf_config_json(m, "bfloat16"));
  EXPECT_EQ(j["head_dim"], 32);
  EXPECT_EQ(j["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(j["rope_scaling"]["factor"], 32.0);
  EXPECT_EQ(j["rope_scaling"]["original_max_position_embeddings"], 8192);
  EXPECT_EQ(j["rope_parameters"]["rope_type"], "llama3");
  EXPECT_EQ(j["rope_parameters"]["rope_theta"], 500000.0);
  EXPECT_EQ(j["rope_parameters"]["low_freq_factor"], 1.0);
  EXPECT_EQ(j["rope_parameters"]["high_freq_factor"], 4.0);
  fs::path d = dir_with(j, "hfw3");
  EXPECT_EQ(read_hf_config(d.string()).model, m);
  fs::remove_all(d);
}

// Llama 3.1/3.2's rope scaling in both spellings (transformers 4:
// rope_scaling beside rope_theta; transformers 5: all in rope_parameters).
TEST(HfConfig, Llama3RopeScalingReadsInBothSpellings) {
  const nlohmann::json scaling = {{"factor", 32.0},
                                  {"high_freq_factor", 4.0},
                                  {"low_freq_factor", 1.0},
                                  {"original_max_position_embeddings", 8192},
                                  {"rope_type", "llama3"}};
  nlohmann::json v4 = fixture_json();
  v4.erase("rope_parameters");
  v4["rope_theta"] = 500000.0;
  v4["rope_scaling"] = scaling;
  nlohmann::json v5 = fixture_json();
  v5["rope_parameters"] = scaling;
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  nlohmann::json old = v4;  // older transformers 4 configs spell it `type`
  old["rope_scaling"].erase("rope_type");
  old["rope_scaling"]["type"] = "llama3";
  nlohmann::json both = v5;  // weft writes both; they agree
  both["rope_scaling"] = scaling;
  for (const auto& [name, j] : {std::pair{"v4", v4}, {"v5", v5}, {"type", old}, {"both", both}}) {
    SCOPED_TRACE(name);
    fs::path d = dir_with(j, std::string("hfl3-") + name);
    const HfModelConfig c = read_hf_config(d.string());
    EXPECT_EQ(c.model.rope_theta, 500000.0);
    EXPECT_EQ(c.model.rope_scaling, (RopeScalingConfig{"llama3", 32, 1, 4, 8192}));
    // init_from takes it into the model section, and a YAML field overrides it.
    WorkerConfig w = parse_config(init(d) + "train: {seq_len: 32}\n", "c.yaml");
    EXPECT_EQ(w.model.rope_scaling, c.model.rope_scaling);
    w = parse_config(init(d) + "model: {rope_scaling: {factor: 8}}\ntrain: {seq_len: 32}\n", "c.yaml");
    EXPECT_EQ(w.model.rope_scaling, (RopeScalingConfig{"llama3", 8, 1, 4, 8192}));
    fs::remove_all(d);
  }
  nlohmann::json differ = both;
  differ["rope_scaling"]["factor"] = 8.0;
  fs::path d = dir_with(differ, "hfl3-differ");
  EXPECT_NE(error_of(init(d)).find("rope_scaling: {"), std::string::npos) << error_of(init(d));
  EXPECT_NE(error_of(init(d)).find("disagrees with rope_parameters"), std::string::npos) << error_of(init(d));
  fs::remove_all(d);
}

// head_dim apart from hidden_size / num_attention_heads is kept; the usual
// value reads as no head_dim at all.
TEST(HfConfig, HeadDimIsReadAndComparedAsAShape) {
  nlohmann::json j = fixture_json();
  j["head_dim"] = 32;  // hidden 64 / 4 heads = 16
  fs::path d = dir_with(j, "hfhd");
  EXPECT_EQ(read_hf_config(d.string()).model.explicit_head_dim, 32);
  EXPECT_EQ(read_hf_config(d.string()).model.head_dim(), 32);
  EXPECT_EQ(read_hf_config(kGqa.string()).model.explicit_head_dim, 0);  // 16 given, the usual value
  EXPECT_EQ(parse_config(init(d) + "train: {seq_len: 32}\n").model.head_dim(), 32);
  const std::string e = error_of(init(d) + "model: {head_dim: 16}\n");
  EXPECT_NE(e.find("model.head_dim: 16 in the config, but " + (d / "config.json").string() + " has head_dim 32"),
            std::string::npos)
      << e;
  fs::remove_all(d);
}

TEST(HfConfig, ExplicitFieldsWinUnlessTheyChangeShapes) {
  WorkerConfig c = parse_config(init(kGqa) + "model: {max_seq_len: 32, rope_theta: 1e6, n_layers: 2}\ntrain: {seq_len: 32}\n");
  EXPECT_EQ(c.model.max_seq_len, 32);
  EXPECT_EQ(c.model.rope_theta, 1e6);
  EXPECT_EQ(c.model.d_model, 64);
  EXPECT_EQ(c.model.norm_eps, 1e-6);
  // --init-from (the parse argument) replaces the YAML's init_from.
  WorkerConfig o = parse_config("init_from: /nonexistent\ntrain: {seq_len: 32}\n", "c.yaml", kGqa.string());
  EXPECT_EQ(o.init_from, kGqa.string());
  EXPECT_EQ(o.model.d_model, 64);
}

TEST(HfConfig, ShapeMismatchNamesFieldAndBothValuesAtItsLine) {
  std::string e = error_of(init(kGqa) + "model:\n  d_model: 32\n");
  EXPECT_NE(e.find("c.yaml:3: model.d_model: 32 in the config, but " + (kGqa / "config.json").string() +
                   " has hidden_size 64"),
            std::string::npos)
      << e;
  e = error_of(init(kGqa) + "model: {n_kv_heads: 4}\n");
  EXPECT_NE(e.find("model.n_kv_heads: 4 in the config, but"), std::string::npos) << e;
  EXPECT_NE(e.find("num_key_value_heads 2"), std::string::npos) << e;
  e = error_of(init(kGqa) + "model: {ffn_hidden: 128}\n");
  EXPECT_NE(e.find("model.ffn_hidden: 128 in the config, but"), std::string::npos) << e;
}

TEST(HfConfig, TyingMismatchIsRefused) {
  std::string e = error_of(init(kGqa) + "model: {tie_embeddings: true}\n");
  EXPECT_NE(e.find("model.tie_embeddings: true in the config, but"), std::string::npos) << e;
  EXPECT_NE(e.find("tie_word_embeddings false"), std::string::npos) << e;
}

struct Refused {
  const char* key;
  nlohmann::json value;
  const char* expect;
};

TEST(HfConfig, UnsupportedFeaturesAreRefusedNamingTheField) {
  const Refused cases[] = {
      {"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}},
       "rope_scaling: rope_type 'linear' is not supported (weft implements 'default', unscaled, and 'llama3'): "
       "{\"factor\":2.0,\"rope_type\":\"linear\"}"},
      {"rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}, "rope_scaling: rope_type 'dynamic' is not supported"},
      {"rope_parameters", {{"rope_type", "yarn"}, {"rope_theta", 500000.0}, {"factor", 8.0}},
       "rope_parameters: rope_type 'yarn' is not supported"},
      {"rope_parameters", {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0}},
       "rope_parameters.low_freq_factor: missing (rope_type 'llama3' needs it)"},
      {"rope_parameters", {{"rope_type", "llama3"}, {"factor", 0.5}, {"low_freq_factor", 1}, {"high_freq_factor", 4},
                           {"original_max_position_embeddings", 8192}},
       "rope_parameters.factor: must be >= 1, got 0.5"},
      {"rope_parameters", {{"rope_type", "llama3"}, {"factor", 8}, {"low_freq_factor", 4}, {"high_freq_factor", 4},
                           {"original_max_position_embeddings", 8192}},
       "rope_parameters.high_freq_factor: 4 must be greater than low_freq_factor 4"},
      {"rope_parameters", {{"rope_type", "llama3"}, {"factor", 8}, {"low_freq_factor", 1}, {"high_freq_factor", 4},
                           {"original_max_position_embeddings", 81.5}},
       "rope_parameters.original_max_position_embeddings: expected a positive integer, got 81.5"},
      {"rope_parameters", {{"rope_type", "llama3"}, {"factor", "8"}, {"low_freq_factor", 1}, {"high_freq_factor", 4},
                           {"original_max_position_embeddings", 8192}},
       "rope_parameters.factor: expected a positive number, got \"8\""},
      {"rope_parameters", {{"rope_type", 3}}, "rope_parameters.rope_type: expected a string, got 3"},
      {"rope_scaling", 8.0, "rope_scaling: expected an object, got 8.0"},
      {"architectures", {"MistralForCausalLM"}, "architectures: [\"MistralForCausalLM\"] is not supported (weft trains [\"LlamaForCausalLM\"])"},
      {"model_type", "qwen2", "model_type: 'qwen2' is not supported"},
      {"hidden_act", "gelu", "hidden_act: 'gelu' is not supported"},
      {"attention_bias", true, "attention_bias: true is not supported"},
      {"head_dim", 33, "head_dim: 33 is odd; RoPE needs an even head dimension"},
      {"head_dim", -16, "head_dim: expected a positive integer, got -16"},
      {"dtype", "float8_e4m3fn", "dtype: 'float8_e4m3fn' is not supported"},
      {"hidden_size", "64", "hidden_size: expected a positive integer, got \"64\""},
  };
  for (const Refused& r : cases) {
    nlohmann::json j = fixture_json();
    j[r.key] = r.value;
    fs::path d = dir_with(j, "hfbad");
    const std::string e = error_of(init(d));
    EXPECT_NE(e.find("c.yaml:1: init_from: " + (d / "config.json").string() + ": " + r.expect),
              std::string::npos)
        << r.key << ": " << e;
    fs::remove_all(d);
  }
  nlohmann::json j = fixture_json();
  j.erase("vocab_size");
  fs::path d = dir_with(j, "hfbad");
  EXPECT_NE(error_of(init(d)).find("vocab_size: missing"), std::string::npos) << error_of(init(d));
  fs::remove_all(d);
}

TEST(HfConfig, MissingDirectoryOrConfigJson) {
  EXPECT_NE(error_of("init_from: /nonexistent/model\n").find("c.yaml:1: init_from: /nonexistent/model: not a directory"),
            std::string::npos)
      << error_of("init_from: /nonexistent/model\n");
  fs::path d = testing::fresh_dir("hfempty");
  EXPECT_NE(error_of(init(d)).find((d / "config.json").string() + ": cannot read"), std::string::npos)
      << error_of(init(d));
  fs::remove_all(d);
}

}  // namespace
}  // namespace weft
