#include "config/hf_config.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "small_file.h"

namespace weft {
namespace {

using json = nlohmann::json;

// One model field and its config.json name.
struct Mapped {
  const char* weft;  // field under model.
  const char* hf;
  bool shape;        // changes tensor shapes or tying: a disagreement is an error
};
constexpr Mapped kMapped[] = {
    {"vocab_size", "vocab_size", true},
    {"d_model", "hidden_size", true},
    {"ffn_hidden", "intermediate_size", true},
    {"n_layers", "num_hidden_layers", true},
    {"n_heads", "num_attention_heads", true},
    {"n_kv_heads", "num_key_value_heads", true},
    {"tie_embeddings", "tie_word_embeddings", true},
    {"max_seq_len", "max_position_embeddings", false},
    {"rope_theta", "rope_theta", false},
    {"norm_eps", "rms_norm_eps", false},
    {"init_std", "initializer_range", false},
};

std::string text(double v) {
  std::string s = json(v).dump();
  return s;
}

std::string field_text(const ModelConfig& m, const std::string& f) {
  if (f == "vocab_size") return std::to_string(m.vocab_size);
  if (f == "d_model") return std::to_string(m.d_model);
  if (f == "ffn_hidden") return std::to_string(m.ffn());
  if (f == "n_layers") return std::to_string(m.n_layers);
  if (f == "n_heads") return std::to_string(m.n_heads);
  if (f == "n_kv_heads") return std::to_string(m.n_kv_heads);
  if (f == "tie_embeddings") return m.tie_embeddings ? "true" : "false";
  if (f == "max_seq_len") return std::to_string(m.max_seq_len);
  if (f == "rope_theta") return text(m.rope_theta);
  if (f == "norm_eps") return text(m.norm_eps);
  if (f == "init_std") return text(m.init_std);
  return "?";
}

void copy_field(ModelConfig& to, const ModelConfig& from, const std::string& f) {
  if (f == "vocab_size") to.vocab_size = from.vocab_size;
  else if (f == "d_model") to.d_model = from.d_model;
  else if (f == "ffn_hidden") to.ffn_hidden = from.ffn_hidden;
  else if (f == "n_layers") to.n_layers = from.n_layers;
  else if (f == "n_heads") to.n_heads = from.n_heads;
  else if (f == "n_kv_heads") to.n_kv_heads = from.n_kv_heads;
  else if (f == "tie_embeddings") to.tie_embeddings = from.tie_embeddings;
  else if (f == "max_seq_len") to.max_seq_len = from.max_seq_len;
  else if (f == "rope_theta") to.rope_theta = from.rope_theta;
  else if (f == "norm_eps") to.norm_eps = from.norm_eps;
  else if (f == "init_std") to.init_std = from.init_std;
}

class Reader {
 public:
  Reader(const json& j, std::string path) : j_(j), path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw ConfigError(path_ + ": " + field + ": " + what);
  }
  bool has(const char* k) const { return j_.contains(k) && !j_[k].is_null(); }
  int integer(const char* k) const {
    if (!has(k)) fail(k, "missing (a Llama config.json must give it)");
    const json& v = j_[k];
    if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > INT32_MAX)
      fail(k, "expected a positive integer, got " + v.dump());
    return static_cast<int>(v.get<int64_t>());
  }
  int integer_or(const char* k, int dflt) const { return has(k) ? integer(k) : dflt; }
  double number_or(const json& obj, const char* k, double dflt, const std::string& name) const {
    if (!obj.contains(k) || obj[k].is_null()) return dflt;
    if (!obj[k].is_number() || !(obj[k].get<double>() > 0))
      fail(name, "expected a positive number, got " + obj[k].dump());
    return obj[k].get<double>();
  }
  bool boolean_or(const char* k, bool dflt) const {
    if (!has(k)) return dflt;
    if (!j_[k].is_boolean()) fail(k, "expected true or false, got " + j_[k].dump());
    return j_[k].get<bool>();
  }
  std::string string_or(const char* k, const std::string& dflt) const {
    if (!has(k)) return dflt;
    if (!j_[k].is_string()) fail(k, "expected a string, got " + j_[k].dump());
    return j_[k].get<std::string>();
  }

 private:
  const json& j_;
  std::string path_;
};

}  // namespace

HfModelConfig read_hf_config(const std::string& dir) {
  namespace fs = std::filesystem;
  HfModelConfig out;
  out.path = (fs::path(dir) / "config.json").string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw ConfigError(dir + ": not a directory (init_from names a Hugging Face model directory)");
  const SmallFile f = read_small_file(out.path, kMaxTextFileBytes);
  if (f.status == SmallFile::Status::Missing) throw ConfigError(out.path + ": cannot read (no such file)");
  if (!f.ok()) throw ConfigError(f.problem);
  json j;
  try {
    j = json::parse(f.text);
  } catch (const std::exception& e) {
    throw ConfigError(out.path + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw ConfigError(out.path + ": not a JSON object");
  Reader r(j, out.path);

  if (r.has("architectures")) {
    const json& a = j["architectures"];
    if (!a.is_array() || a.size() != 1 || a[0] != "LlamaForCausalLM")
      r.fail("architectures", a.dump() + " is not supported (weft trains [\"LlamaForCausalLM\"])");
  }
  if (std::string t = r.string_or("model_type", "llama"); t != "llama")
    r.fail("model_type", "'" + t + "' is not supported (weft trains 'llama')");
  if (std::string act = r.string_or("hidden_act", "silu"); act != "silu")
    r.fail("hidden_act", "'" + act + "' is not supported (weft's MLP is SwiGLU with silu)");
  for (const char* bias : {"attention_bias", "mlp_bias"})
    if (r.boolean_or(bias, false)) r.fail(bias, "true is not supported (weft's linear layers have no bias)");

  ModelConfig& m = out.model;
  m.vocab_size = r.integer("vocab_size");
  m.d_model = r.integer("hidden_size");
  m.ffn_hidden = r.integer("intermediate_size");
  m.n_layers = r.integer("num_hidden_layers");
  m.n_heads = r.integer("num_attention_heads");
  m.n_kv_heads = r.integer_or("num_key_value_heads", m.n_heads);
  m.max_seq_len = r.integer_or("max_position_embeddings", 2048);
  m.norm_eps = r.number_or(j, "rms_norm_eps", 1e-6, "rms_norm_eps");
  m.init_std = r.number_or(j, "initializer_range", m.init_std, "initializer_range");
  m.tie_embeddings = r.boolean_or("tie_word_embeddings", false);  // LlamaConfig's default
  if (r.has("head_dim") && (m.d_model % m.n_heads != 0 || r.integer("head_dim") != m.d_model / m.n_heads))
    r.fail("head_dim", j["head_dim"].dump() + " is not supported (weft uses hidden_size / num_attention_heads = " +
                           std::to_string(m.d_model / m.n_heads) + ")");

  // RoPE: transformers 5 nests theta and type in rope_parameters;
  // transformers 4 has top-level rope_theta and an optional rope_scaling.
  m.rope_theta = r.number_or(j, "rope_theta", 10000.0, "rope_theta");
  auto check_rope_type = [&](const json& obj, const std::string& name) {
    std::string type = "default";
    for (const char* k : {"rope_type", "type"})
      if (obj.contains(k) && obj[k].is_string()) type = obj[k].get<std::string>();
    if (type != "default")
      r.fail(name, obj.dump() + " is not supported (weft implements unscaled RoPE, rope_type 'default')");
  };
  if (r.has("rope_parameters")) {
    const json& rp = j["rope_parameters"];
    if (!rp.is_object()) r.fail("rope_parameters", "expected an object, got " + rp.dump());
    check_rope_type(rp, "rope_parameters");
    m.rope_theta = r.number_or(rp, "rope_theta", m.rope_theta, "rope_parameters.rope_theta");
  }
  if (r.has("rope_scaling")) {
    const json& rs = j["rope_scaling"];
    if (!rs.is_object()) r.fail("rope_scaling", rs.dump() + " is not supported");
    check_rope_type(rs, "rope_scaling");
  }

  out.dtype = r.string_or("dtype", r.string_or("torch_dtype", ""));
  if (!out.dtype.empty() && out.dtype != "float32" && out.dtype != "bfloat16" && out.dtype != "float16")
    r.fail(r.has("dtype") ? "dtype" : "torch_dtype",
           "'" + out.dtype + "' is not supported (float32, bfloat16 or float16)");
  return out;
}

std::string hf_config_json(const ModelConfig& m, const std::string& dtype) {
  nlohmann::ordered_json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["vocab_size"] = m.vocab_size;
  j["hidden_size"] = m.d_model;
  j["intermediate_size"] = m.ffn();
  j["num_hidden_layers"] = m.n_layers;
  j["num_attention_heads"] = m.n_heads;
  j["num_key_value_heads"] = m.n_kv_heads;
  j["head_dim"] = m.head_dim();
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = m.max_seq_len;
  j["rms_norm_eps"] = m.norm_eps;
  j["rope_theta"] = m.rope_theta;                                              // transformers 4
  j["rope_parameters"] = {{"rope_theta", m.rope_theta}, {"rope_type", "default"}};  // transformers 5
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["mlp_bias"] = false;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["initializer_range"] = m.init_std;
  j["torch_dtype"] = dtype;  // transformers 4
  j["dtype"] = dtype;        // transformers 5
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

std::string hf_generation_config_json() {
  nlohmann::ordered_json j;
  j["_from_model_config"] = true;
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

std::vector<ConfigProblem> hf_model_mismatches(const HfModelConfig& hf, const ModelConfig& m) {
  std::vector<ConfigProblem> out;
  for (const Mapped& f : kMapped) {
    if (!f.shape) continue;
    const std::string want = field_text(hf.model, f.weft), have = field_text(m, f.weft);
    if (want != have)
      out.push_back({std::string("model.") + f.weft,
                     have + " in the config, but " + hf.path + " has " + f.hf + " " + want});
  }
  return out;
}

std::optional<ConfigProblem> apply_hf_model_config(WorkerConfig& cfg,
                                                   const std::set<std::string>& explicit_fields) {
  HfModelConfig hf;
  try {
    hf = read_hf_config(cfg.init_from);
  } catch (const ConfigError& e) {
    return ConfigProblem{"init_from", e.what()};
  }
  ModelConfig resolved = cfg.model;
  for (const Mapped& f : kMapped)
    if (!explicit_fields.count(std::string("model.") + f.weft)) copy_field(resolved, hf.model, f.weft);
  const auto diff = hf_model_mismatches(hf, resolved);
  if (!diff.empty()) return diff.front();
  cfg.model = resolved;
  return std::nullopt;
}

}  // namespace weft
