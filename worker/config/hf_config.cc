#include "config/hf_config.h"

#include <cerrno>
#include <cmath>
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
    {"head_dim", "head_dim", true},
    {"rope_scaling.rope_type", "rope_type", false},
    {"rope_scaling.factor", "factor", false},
    {"rope_scaling.low_freq_factor", "low_freq_factor", false},
    {"rope_scaling.high_freq_factor", "high_freq_factor", false},
    {"rope_scaling.original_max_position_embeddings", "original_max_position_embeddings", false},
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
  if (f == "head_dim") return std::to_string(m.head_dim());
  const RopeScalingConfig& r = m.rope_scaling;
  if (f == "rope_scaling.rope_type") return r.rope_type;
  if (f == "rope_scaling.factor") return text(r.factor);
  if (f == "rope_scaling.low_freq_factor") return text(r.low_freq_factor);
  if (f == "rope_scaling.high_freq_factor") return text(r.high_freq_factor);
  if (f == "rope_scaling.original_max_position_embeddings") return std::to_string(r.original_max_position_embeddings);
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
  else if (f == "head_dim") to.explicit_head_dim = from.explicit_head_dim;
  else if (f == "rope_scaling.rope_type") to.rope_scaling.rope_type = from.rope_scaling.rope_type;
  else if (f == "rope_scaling.factor") to.rope_scaling.factor = from.rope_scaling.factor;
  else if (f == "rope_scaling.low_freq_factor") to.rope_scaling.low_freq_factor = from.rope_scaling.low_freq_factor;
  else if (f == "rope_scaling.high_freq_factor") to.rope_scaling.high_freq_factor = from.rope_scaling.high_freq_factor;
  else if (f == "rope_scaling.original_max_position_embeddings")
    to.rope_scaling.original_max_position_embeddings = from.rope_scaling.original_max_position_embeddings;
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
  // head_dim (LlamaConfig's default is hidden_size / num_attention_heads):
  // kept only where it differs, so a config that spells out the default
  // reads as one that does not.
  if (r.has("head_dim")) {
    const int head_dim = r.integer("head_dim");
    if (head_dim % 2 != 0) r.fail("head_dim", std::to_string(head_dim) + " is odd; RoPE needs an even head dimension");
    if (m.d_model % m.n_heads != 0 || head_dim != m.d_model / m.n_heads) m.explicit_head_dim = head_dim;
  }

  // RoPE: transformers 5 nests theta, type and scaling in rope_parameters;
  // transformers 4 has top-level rope_theta and an optional rope_scaling
  // (older configs spell rope_type `type`). Both may be present (weft writes
  // both); they must then agree.
  m.rope_theta = r.number_or(j, "rope_theta", 10000.0, "rope_theta");
  auto read_rope = [&](const json& obj, const std::string& name) {
    RopeScalingConfig out;
    if (!obj.is_object()) r.fail(name, "expected an object, got " + obj.dump());
    for (const char* k : {"type", "rope_type"})
      if (obj.contains(k) && !obj[k].is_null()) {
        if (!obj[k].is_string()) r.fail(name + "." + k, "expected a string, got " + obj[k].dump());
        out.rope_type = obj[k].get<std::string>();
      }
    if (out.rope_type == "default") return out;
    if (out.rope_type != "llama3")
      r.fail(name, "rope_type '" + out.rope_type + "' is not supported (weft implements 'default', unscaled, and "
                   "'llama3'): " + obj.dump());
    auto number = [&](const char* k) {
      const std::string field = name + "." + k;
      if (!obj.contains(k) || obj[k].is_null()) r.fail(field, "missing (rope_type 'llama3' needs it)");
      if (!obj[k].is_number() || !(obj[k].get<double>() > 0))
        r.fail(field, "expected a positive number, got " + obj[k].dump());
      return obj[k].get<double>();
    };
    out.factor = number("factor");
    out.low_freq_factor = number("low_freq_factor");
    out.high_freq_factor = number("high_freq_factor");
    const double original = number("original_max_position_embeddings");
    if (original != std::floor(original) || original > INT32_MAX)
      r.fail(name + ".original_max_position_embeddings", "expected a positive integer, got " +
                                                             obj["original_max_position_embeddings"].dump());
    out.original_max_position_embeddings = static_cast<int>(original);
    if (out.factor < 1) r.fail(name + ".factor", "must be >= 1, got " + obj["factor"].dump());
    if (!(out.high_freq_factor > out.low_freq_factor))
      r.fail(name + ".high_freq_factor", obj["high_freq_factor"].dump() + " must be greater than low_freq_factor " +
                                             obj["low_freq_factor"].dump());
    return out;
  };
  std::optional<RopeScalingConfig> from_parameters, from_scaling;
  if (r.has("rope_parameters")) {
    const json& rp = j["rope_parameters"];
    from_parameters = read_rope(rp, "rope_parameters");
    m.rope_theta = r.number_or(rp, "rope_theta", m.rope_theta, "rope_parameters.rope_theta");
  }
  if (r.has("rope_scaling")) from_scaling = read_rope(j["rope_scaling"], "rope_scaling");
  if (from_parameters && from_scaling && !(*from_parameters == *from_scaling))
    r.fail("rope_scaling", j["rope_scaling"].dump() + " disagrees with rope_parameters " + j["rope_parameters"].dump());
  if (from_parameters) m.rope_scaling = *from_parameters;
  else if (from_scaling) m.rope_scaling = *from_scaling;

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
  j["rope_theta"] = m.rope_theta;  // transformers 4
  const RopeScalingConfig& rs = m.rope_scaling;
  if (rs.rope_type == "llama3") {
    nlohmann::ordered_json scaling = {{"factor", rs.factor},
                                      {"low_freq_factor", rs.low_freq_factor},
                                      {"high_freq_factor", rs.high_freq_factor},
                                      {"original_max_position_embeddings", rs.original_max_position_embeddings}};
    nlohmann::ordered_json params = {{"rope_theta", m.rope_theta}, {"rope_type", "llama3"}};
    params.update(scaling);
    scaling["rope_type"] = "llama3";
    j["rope_scaling"] = scaling;     // transformers 4
    j["rope_parameters"] = params;   // transformers 5
  } else {
    j["rope_parameters"] = {{"rope_theta", m.rope_theta}, {"rope_type", "default"}};  // transformers 5
  }
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
