// YAML <-> WorkerConfig. One table (kSections) lists every field with its YAML
// name and its place in the structs; parsing, unknown-key suggestions, env
// overrides and to_yaml all walk that table, so a new field is added in
// config.h and one line here.
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <functional>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <variant>
#include <vector>

#include "config/config.h"

#include "small_file.h"
#include "config/hf_config.h"

#include "weft_contract.h"
#include "weft_presets.h"

namespace weft {
namespace {

// A mode (contract/weft_modes.h) is read and written by its spellings.
using FieldRef = std::variant<int*, uint64_t*, double*, bool*, std::string*, Strategy*, WdpStrategy*,
                              ZeroOverlap*, Recompute*, ComputeDevice*, CommBackend*, WorkingDtype*, DataSource*,
                              CheckpointAsync*, Attention*, DocumentBoundaries*>;

struct Field {
  const char* name;
  FieldRef (*ref)(WorkerConfig&);
  // A number field that also takes `auto`, held as kAuto (0); its numbers
  // must then be > 0.
  bool takes_auto = false;
};

struct Section {
  const char* name;
  std::vector<Field> fields;
};

#define WEFT_FIELD(sec, f) \
  Field { #f, [](WorkerConfig& c) -> FieldRef { return &c.sec.f; } }
#define WEFT_AUTO_FIELD(sec, f) \
  Field { #f, [](WorkerConfig& c) -> FieldRef { return &c.sec.f; }, true }

const std::vector<Section>& sections() {
  static const std::vector<Section> kSections = {
      {"model",
       {WEFT_FIELD(model, vocab_size), WEFT_FIELD(model, d_model), WEFT_FIELD(model, n_layers),
        WEFT_FIELD(model, n_heads), WEFT_FIELD(model, n_kv_heads), WEFT_FIELD(model, ffn_hidden),
        WEFT_FIELD(model, max_seq_len), WEFT_FIELD(model, rope_theta),
        WEFT_FIELD(model, norm_eps), WEFT_FIELD(model, tie_embeddings),
        WEFT_FIELD(model, init_std),
        Field{"head_dim", [](WorkerConfig& c) -> FieldRef { return &c.model.explicit_head_dim; }}}},
      {"model.rope_scaling",
       {WEFT_FIELD(model.rope_scaling, rope_type), WEFT_FIELD(model.rope_scaling, factor),
        WEFT_FIELD(model.rope_scaling, low_freq_factor), WEFT_FIELD(model.rope_scaling, high_freq_factor),
        WEFT_FIELD(model.rope_scaling, original_max_position_embeddings)}},
      {"train",
       {WEFT_FIELD(train, steps), WEFT_FIELD(train, micro_batch), WEFT_FIELD(train, seq_len),
        WEFT_FIELD(train, grad_accum), WEFT_FIELD(train, seed), WEFT_FIELD(train, log_every),
        WEFT_FIELD(train, out_dir), WEFT_FIELD(train, dtype), WEFT_AUTO_FIELD(train, logits_chunk_mb),
        WEFT_FIELD(train, recompute), WEFT_FIELD(train, attention)}},
      {"optim",
       {WEFT_FIELD(optim, lr), WEFT_FIELD(optim, min_lr_ratio), WEFT_FIELD(optim, warmup_steps),
        WEFT_FIELD(optim, beta1), WEFT_FIELD(optim, beta2), WEFT_FIELD(optim, eps),
        WEFT_FIELD(optim, weight_decay), WEFT_FIELD(optim, decay_norms_and_embeddings),
        WEFT_FIELD(optim, grad_clip)}},
      {"data",
       {WEFT_FIELD(data, source), WEFT_FIELD(data, shards), WEFT_FIELD(data, seed),
        WEFT_FIELD(data, branching), WEFT_FIELD(data, document_boundaries), WEFT_FIELD(data, eos_token)}},
      {"checkpoint",
       {WEFT_FIELD(checkpoint, dir), WEFT_FIELD(checkpoint, every), WEFT_FIELD(checkpoint, keep),
        WEFT_FIELD(checkpoint, resume), WEFT_FIELD(checkpoint, save), WEFT_FIELD(checkpoint, max_shard_mb), WEFT_FIELD(checkpoint, async)}},
      {"eval",
       {WEFT_FIELD(eval, every), WEFT_FIELD(eval, batches), WEFT_FIELD(eval, shards),
        WEFT_FIELD(eval, allow_training_shards)}},
      {"parallel",
       {WEFT_FIELD(parallel, strategy), WEFT_FIELD(parallel, sp), WEFT_FIELD(parallel, wp),
        WEFT_AUTO_FIELD(parallel, bucket_cap_mb), WEFT_FIELD(parallel, first_bucket_mb),
        WEFT_FIELD(parallel, overlap), WEFT_FIELD(parallel, bf16_wire),
        WEFT_FIELD(parallel, bucket_cap_file)}},
      // A dotted name is a subsection, written as a mapping inside its parent.
      {"parallel.zero",
       {WEFT_FIELD(parallel.zero, stage), WEFT_FIELD(parallel.zero, overlap),
        WEFT_FIELD(parallel.zero, overlap_param_gather)}},
      {"parallel.isp",
       {WEFT_FIELD(parallel.isp, prefetch), WEFT_FIELD(parallel.isp, recompute_blocks),
        WEFT_FIELD(parallel.isp, wdp_strategy)}},
      {"comm",
       {WEFT_FIELD(comm, backend), WEFT_FIELD(comm, timeout_s),
        WEFT_FIELD(comm, rendezvous_timeout_s), WEFT_FIELD(comm, lanes)}},
      {"comm.simulate", {WEFT_FIELD(comm.simulate, latency_us), WEFT_FIELD(comm.simulate, bandwidth_gbps)}},
      {"metrics", {WEFT_FIELD(metrics, port), WEFT_FIELD(metrics, peak_tflops), WEFT_FIELD(metrics, linger_seconds)}},
  };
  return kSections;
}

#undef WEFT_FIELD
#undef WEFT_AUTO_FIELD

// `device` and `init_from` are the top-level scalar fields; `preset` picks the
// base config.
const Field kDeviceField{"device", [](WorkerConfig& c) -> FieldRef { return &c.device; }};
const Field kInitFromField{"init_from", [](WorkerConfig& c) -> FieldRef { return &c.init_from; }};

std::vector<std::string> top_level_keys() {
  std::vector<std::string> keys{"preset", "device", "init_from"};
  for (const Section& s : sections())
    if (!std::strchr(s.name, '.')) keys.push_back(s.name);
  return keys;
}

// The sections nested directly inside `parent` ("parallel.zero" in "parallel").
std::vector<const Section*> subsections(const Section& parent) {
  std::vector<const Section*> out;
  const std::string prefix = std::string(parent.name) + ".";
  for (const Section& s : sections()) {
    const std::string name = s.name;
    if (name.rfind(prefix, 0) == 0 && name.find('.', prefix.size()) == std::string::npos)
      out.push_back(&s);
  }
  return out;
}

// Finds the field at "section.name" (or "device"); nullptr when unknown.
const Field* find_field(const std::string& path) {
  if (path == "device") return &kDeviceField;
  if (path == "init_from") return &kInitFromField;
  for (const Section& s : sections()) {
    for (const Field& f : s.fields) {
      if (path == std::string(s.name) + "." + f.name) return &f;
    }
  }
  return nullptr;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diag = up;
    }
  }
  return row[b.size()];
}

// "unknown key (did you mean n_heads?)" for a near miss (a typo or a missing
// plural), otherwise the list of keys the section accepts.
std::string unknown_key_message(const std::string& key, const std::vector<std::string>& known) {
  const std::string* best = nullptr;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const std::string& k : known) {
    size_t d = edit_distance(key, k);
    if (d < best_d) best_d = d, best = &k;
  }
  if (best && best_d <= 2 && best_d < key.size()) {
    return "unknown key (did you mean " + *best + "?)";
  }
  std::string msg = "unknown key (known keys:";
  for (const std::string& k : known) msg += " " + k;
  return msg + ")";
}

std::string double_text(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// Reads one value of the field's type from text. Returns an error message
// ("expected an integer, got 'ten'") or an empty string on success.
std::string assign_from_text(const FieldRef& ref, const std::string& text, bool takes_auto = false) {
  auto got = " got '" + text + "'";
  if (takes_auto) {
    double* p = std::get<double*>(ref);
    if (text == "auto") {
      *p = kAuto;
      return {};
    }
    double v = 0;
    if (!assign_from_text(&v, text).empty() || !(v > 0)) return "expected auto or a number > 0," + got;
    *p = v;
    return {};
  }
  // from_chars rejects a leading '+', which YAML and humans both write.
  std::string t = (!text.empty() && text[0] == '+') ? text.substr(1) : text;
  const char* b = t.data();
  const char* e = t.data() + t.size();
  if (auto* p = std::get_if<int*>(&ref)) {
    long long v = 0;
    auto r = std::from_chars(b, e, v);
    if (t.empty() || r.ec != std::errc() || r.ptr != e) return "expected an integer," + got;
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
      return "integer out of range," + got;
    }
    **p = static_cast<int>(v);
  } else if (auto* p = std::get_if<uint64_t*>(&ref)) {
    uint64_t v = 0;
    auto r = std::from_chars(b, e, v);
    if (t.empty() || r.ec != std::errc() || r.ptr != e) {
      return "expected a non-negative integer," + got;
    }
    **p = v;
  } else if (auto* p = std::get_if<double*>(&ref)) {
    double v = 0;
    auto r = std::from_chars(b, e, v);
    if (t.empty() || r.ec != std::errc() || r.ptr != e) return "expected a number," + got;
    if (!std::isfinite(v)) return "expected a finite number," + got;
    **p = v;
  } else if (auto* p = std::get_if<bool*>(&ref)) {
    YAML::Node n(text);
    bool v = false;
    if (!YAML::convert<bool>::decode(n, v)) return "expected true or false," + got;
    **p = v;
  } else if (auto* p = std::get_if<std::string*>(&ref)) {
    **p = text;
  } else {
    return std::visit(
        [&](auto* p) -> std::string {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (contract::kIsMode<T>) {
            const std::optional<T> mode = contract::parse_mode<T>(text);
            if (!mode) return contract::not_a_mode<T>(text);
            *p = *mode;
          }
          return {};
        },
        ref);
  }
  return {};
}

bool is_mode(const FieldRef& ref) {
  return std::visit([](auto* p) { return contract::kIsMode<std::remove_pointer_t<decltype(p)>>; }, ref);
}

const char* kind_name(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a sequence";
    case YAML::NodeType::Null: return "nothing";
    default: return "a scalar";
  }
}

// Parses one YAML document into a WorkerConfig, remembering the line where
// each field was set so later validation errors can point at it.
class Parser {
 public:
  // `shape_unread`: a reader away from the rank's host leaves init_from's
  // config.json unread and applies no rule (read_config_elsewhere).
  explicit Parser(std::string origin, std::string init_from, bool shape_unread = false)
      : origin_(std::move(origin)), init_from_(std::move(init_from)), shape_unread_(shape_unread) {}

  WorkerConfig parse(const std::string& text) {
    YAML::Node root;
    std::vector<YAML::Node> documents;
    try {
      documents = YAML::LoadAll(text);
    } catch (const YAML::DeepRecursion& e) {
      // yaml-cpp's own message for it is "bad file".
      throw ConfigError(origin_ + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                        ": invalid YAML: nested " + std::to_string(e.depth()) +
                        " levels deep, more than the parser follows (a config is a few levels deep)");
    } catch (const YAML::ParserException& e) {
      throw ConfigError(origin_ + ":" + std::to_string(e.mark.line + 1) + ":" +
                        std::to_string(e.mark.column + 1) + ": invalid YAML: " + e.msg);
    }
    // A second document (after `---`) would be silently dropped by a reader
    // of the first: its settings would never apply.
    if (documents.size() > 1) {
      const int line = documents[1].Mark().line;  // -1 for an empty document
      throw ConfigError(origin_ + (line >= 0 ? ":" + std::to_string(line + 1) : std::string()) +
                        ": a second YAML document (after '---'): a config is one document; merge them into one");
    }
    if (!documents.empty()) root = documents[0];
    if (root.IsNull()) return with_init_from(preset("tiny"));
    if (!root.IsMap()) {
      fail(root, "", std::string("the top level must be a mapping of sections, got ") +
                         kind_name(root));
    }
    WorkerConfig cfg = preset("tiny");
    if (YAML::Node p = root["preset"]) {
      if (!p.IsScalar()) fail(p, "preset", std::string("expected a name, got ") + kind_name(p));
      try {
        cfg = preset(p.Scalar());
      } catch (const ConfigError& e) {
        fail(p, "", e.what());
      }
    }
    std::vector<std::string> top = top_level_keys();
    for_each_key(root, "", top, [&](const std::string& key, const YAML::Node& value) {
      if (key == "preset") return;
      if (key == "device") return set_field(cfg, kDeviceField, "device", value);
      if (key == "init_from") return set_field(cfg, kInitFromField, "init_from", value);
      for (const Section& s : sections()) {
        if (key == s.name) return parse_section(cfg, s, value);
      }
    });
    if (shape_unread_ && !cfg.init_from.empty()) return cfg;
    cfg = with_init_from(std::move(cfg));
    if (auto problem = find_problem(cfg)) throw at_field(*problem);
    return cfg;
  }

 private:
  // Fills the model fields the YAML left out from init_from's config.json; a
  // field the YAML set that contradicts it is reported at its line. (Autos
  // are decided later, by weft::resolve, once the environment has spoken.)
  WorkerConfig with_init_from(WorkerConfig cfg) {
    if (!init_from_.empty()) cfg.init_from = init_from_;
    if (cfg.init_from.empty()) return cfg;
    std::set<std::string> explicit_fields;
    for (const auto& [path, line] : lines_) explicit_fields.insert(path);
    if (auto problem = apply_hf_model_config(cfg, explicit_fields)) throw at_field(*problem);
    return cfg;
  }

  // A rule's problem, at the line where its field was set.
  ConfigError at_field(const ConfigProblem& problem) const {
    auto it = lines_.find(problem.path);
    std::string where = origin_ + (it != lines_.end() ? ":" + std::to_string(it->second) : "");
    return ConfigError(where + ": " + problem.path + ": " + problem.message, problem.path, problem.message);
  }

  [[noreturn]] void fail(const YAML::Node& at, const std::string& path, const std::string& msg) {
    std::string where = origin_;
    if (at.Mark().line >= 0) where += ":" + std::to_string(at.Mark().line + 1);
    throw ConfigError(where + ": " + (path.empty() ? "" : path + ": ") + msg, path, msg);
  }

  // Calls fn(key, value) for each entry of `map`, rejecting non-scalar,
  // unknown and repeated keys. `prefix` is "" or "section.".
  template <class Fn>
  void for_each_key(const YAML::Node& map, const std::string& prefix,
                    const std::vector<std::string>& known, Fn fn) {
    std::set<std::string> seen;
    for (const auto& entry : map) {
      const YAML::Node k = entry.first;  // Node is a handle; copies are cheap
      if (!k.IsScalar()) fail(k, prefix, std::string("keys must be names, got ") + kind_name(k));
      const std::string& key = k.Scalar();
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        fail(k, prefix + key, unknown_key_message(key, known));
      }
      if (!seen.insert(key).second) fail(k, prefix + key, "given more than once");
      fn(key, YAML::Node(entry.second));
    }
  }

  void parse_section(WorkerConfig& cfg, const Section& s, const YAML::Node& node) {
    if (node.IsNull()) return;  // `model:` with nothing under it keeps the base
    if (!node.IsMap()) {
      fail(node, s.name, std::string("expected a mapping of fields, got ") + kind_name(node));
    }
    std::vector<std::string> known;
    for (const Field& f : s.fields) known.push_back(f.name);
    const std::vector<const Section*> subs = subsections(s);
    for (const Section* sub : subs) known.push_back(sub->name + std::strlen(s.name) + 1);
    for_each_key(node, std::string(s.name) + ".", known,
                 [&](const std::string& key, const YAML::Node& value) {
                   for (const Field& f : s.fields) {
                     if (key == f.name) set_field(cfg, f, std::string(s.name) + "." + key, value);
                   }
                   for (const Section* sub : subs) {
                     if (std::string(s.name) + "." + key == sub->name) parse_section(cfg, *sub, value);
                   }
                 });
  }

  void set_field(WorkerConfig& cfg, const Field& f, const std::string& path,
                 const YAML::Node& value) {
    FieldRef ref = f.ref(cfg);
    // An empty value clears a string (`checkpoint.dir:` = the default, out_dir/checkpoints).
    if (value.IsNull() && std::holds_alternative<std::string*>(ref)) {
      std::get<std::string*>(ref)->clear();
    } else if (!value.IsScalar()) {
      fail(value, path, std::string("expected a single value, got ") + kind_name(value));
    } else if (std::string err = assign_from_text(ref, value.Scalar(), f.takes_auto); !err.empty()) {
      fail(value, path, err);
    }
    lines_[path] = value.Mark().line + 1;
  }

  std::string origin_;
  std::string init_from_;  // --init-from, overrides the YAML's
  bool shape_unread_ = false;
  std::map<std::string, int> lines_;  // field path -> 1-based line where it was set
};

void emit_field(YAML::Emitter& out, const char* name, const FieldRef& ref, bool takes_auto = false) {
  out << YAML::Key << name << YAML::Value;
  if (takes_auto && *std::get<double*>(ref) == kAuto) {
    out << "auto";
    return;
  }
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, double>) {
          out << double_text(*p);
        } else if constexpr (std::is_same_v<T, std::string>) {
          out << YAML::DoubleQuoted << *p;
        } else if constexpr (std::is_same_v<T, bool>) {
          out << YAML::TrueFalseBool << *p;
        } else if constexpr (contract::kIsMode<T>) {
          out << YAML::DoubleQuoted << std::string(contract::mode_name(*p));
        } else {
          out << *p;
        }
      },
      ref);
}

}  // namespace

WorkerConfig preset(const std::string& name) {
  const contract::Preset* p = contract::find_preset(name);
  if (!p)
    throw ConfigError("preset: unknown preset '" + name + "' (known: " + std::string(contract::kPresetNames) + ")");
  WorkerConfig c;
  c.device = p->device;
  c.model.vocab_size = p->vocab_size;
  c.model.d_model = p->d_model;
  c.model.n_layers = p->n_layers;
  c.model.n_heads = p->n_heads;
  c.model.n_kv_heads = p->n_kv_heads;
  c.model.ffn_hidden = p->ffn_hidden;
  c.model.max_seq_len = p->max_seq_len;
  c.model.tie_embeddings = p->tie_embeddings;
  c.train.steps = p->steps;
  c.train.micro_batch = p->micro_batch;
  c.train.seq_len = p->seq_len;
  c.train.grad_accum = p->grad_accum;
  c.train.out_dir = p->out_dir;
  c.optim.lr = p->lr;
  c.optim.warmup_steps = p->warmup_steps;
  c.optim.min_lr_ratio = p->min_lr_ratio;
  c.optim.weight_decay = p->weight_decay;
  return c;
}

WorkerConfig parse_config(const std::string& yaml_text, const std::string& origin,
                          const std::string& init_from) {
  return Parser(origin, init_from).parse(yaml_text);
}

WorkerConfig load_config_file(const std::string& path, const std::string& init_from) {
  // A directory opens as a stream on Linux and reads as empty: it would train
  // on the defaults instead of failing.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(path + ": is a directory, not a config file");
  const SmallFile f = read_small_file(path, kMaxTextFileBytes);
  if (f.status == SmallFile::Status::Missing) throw ConfigError(path + ": cannot read config file (no such file)");
  if (!f.ok()) throw ConfigError(f.problem + " (the config file)");
  return parse_config(f.text, path, init_from);
}

ConfigElsewhere read_config_elsewhere(const std::string& yaml_text, const std::string& origin,
                                      const std::map<std::string, std::string>& env) {
  ConfigElsewhere out;
  out.cfg = Parser(origin, "", /*shape_unread=*/true).parse(yaml_text);
  out.shape_known = out.cfg.init_from.empty();
  try {
    apply_env_overrides(out.cfg, env);
  } catch (const ConfigError& e) {
    throw EnvConfigError(e.what(), e.path, e.problem);
  }
  if (!out.shape_known) {
    if (auto p = find_problem(out.cfg, false, /*shape_known=*/false))
      throw ConfigError(p->path + ": " + p->message, p->path, p->message);
    return out;
  }
  validate(out.cfg);
  resolve(out.cfg);
  return out;
}

void apply_env_overrides(WorkerConfig& cfg, const std::map<std::string, std::string>& env) {
  static const std::pair<const char*, const char*> kOverrides[] = {
      {contract::kEnvSteps, "train.steps"},
      {contract::kEnvBucketCapMb, "parallel.bucket_cap_mb"},
      {contract::kEnvBucketCapFile, "parallel.bucket_cap_file"},
      {contract::kEnvCheckpointDir, "checkpoint.dir"},
      {contract::kEnvMetricsPort, "metrics.port"},
      {contract::kEnvDevice, "device"},
      {contract::kEnvOutDir, "train.out_dir"},
      {contract::kEnvAttention, "train.attention"},
  };
  std::optional<ConfigProblem> before = find_problem(cfg);
  std::map<std::string, std::string> applied;  // field path -> "VAR=value"
  for (const auto& [var, path] : kOverrides) {
    auto it = env.find(var);
    // Unset and empty are the same: Kubernetes often renders missing values as "".
    if (it == env.end() || it->second.empty()) continue;
    const Field* field = find_field(path);
    const FieldRef ref = field->ref(cfg);
    std::string err = assign_from_text(ref, it->second, field->takes_auto);
    // A mode's spelling is charged to its field, as validate() would: "WEFT_DEVICE=tpu: device: 'tpu' is
    // not one of cpu, cuda".
    if (!err.empty() && is_mode(ref))
      throw ConfigError(std::string(var) + "=" + it->second + ": " + path + ": " + err, path, err);
    if (!err.empty()) throw ConfigError(std::string(var) + ": " + err, path, err);
    applied[path] = std::string(var) + "=" + it->second;
  }
  std::optional<ConfigProblem> after = find_problem(cfg);
  if (!after || (before && before->path == after->path && before->message == after->message)) {
    return;
  }
  // The overrides broke the config: name the variable charged with the
  // problem, or all applied ones when the rule is charged to another field.
  std::string cause;
  if (auto it = applied.find(after->path); it != applied.end()) {
    cause = it->second;
  } else {
    for (const auto& [path, assignment] : applied) cause += (cause.empty() ? "" : ", ") + assignment;
  }
  throw ConfigError(cause + ": " + after->path + ": " + after->message, after->path, after->message);
}

void resolve(WorkerConfig& cfg) {
  const bool cuda = cfg.device == ComputeDevice::Cuda;
  if (cfg.comm.backend == CommBackend::Auto) cfg.comm.backend = cuda ? CommBackend::Nccl : CommBackend::Gloo;
  if (cfg.train.dtype == WorkingDtype::Auto) cfg.train.dtype = cuda ? WorkingDtype::Bf16 : WorkingDtype::F32;
  if (cfg.train.recompute == Recompute::Auto) cfg.train.recompute = cuda ? Recompute::Pointwise : Recompute::None;
  if (cfg.checkpoint.async == CheckpointAsync::Auto)
    cfg.checkpoint.async = cuda ? CheckpointAsync::On : CheckpointAsync::Off;
}

WorkerConfig resolved(WorkerConfig cfg) {
  resolve(cfg);
  return cfg;
}

bool is_resolved(const WorkerConfig& cfg) { return resolved(cfg) == cfg; }

std::vector<std::pair<std::string, std::string>> shared_settings(const WorkerConfig& cfg) {
  WorkerConfig c = cfg;  // the field table hands out mutable references
  std::vector<std::pair<std::string, std::string>> out;
  auto add = [&](const std::string& path, const Field& f) {
    if (std::find(std::begin(kPerRankSettings), std::end(kPerRankSettings), path) != std::end(kPerRankSettings))
      return;
    // One field's YAML, as to_yaml writes it: the text a user reads back.
    YAML::Emitter e;
    e << YAML::BeginMap;
    emit_field(e, "v", f.ref(c), f.takes_auto);
    e << YAML::EndMap;
    std::string text = e.c_str();
    out.emplace_back(path, text.substr(text.find(": ") + 2));
  };
  add("device", kDeviceField);
  add("init_from", kInitFromField);
  for (const Section& s : sections())
    for (const Field& f : s.fields) add(std::string(s.name) + "." + f.name, f);
  return out;
}

std::string to_yaml(const WorkerConfig& cfg) {
  WorkerConfig c = cfg;  // the field table hands out mutable references
  YAML::Emitter out;
  out << YAML::BeginMap;
  emit_field(out, "device", kDeviceField.ref(c));
  emit_field(out, "init_from", kInitFromField.ref(c));
  std::function<void(const Section&, const char*)> emit_section = [&](const Section& s,
                                                                       const char* key) {
    out << YAML::Key << key << YAML::Value << YAML::BeginMap;
    for (const Field& f : s.fields) emit_field(out, f.name, f.ref(c), f.takes_auto);
    for (const Section* sub : subsections(s)) emit_section(*sub, sub->name + std::strlen(s.name) + 1);
    out << YAML::EndMap;
  };
  for (const Section& s : sections())
    if (!std::strchr(s.name, '.')) emit_section(s, s.name);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace weft
