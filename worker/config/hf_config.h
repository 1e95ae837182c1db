// Hugging Face Llama config.json <-> ModelConfig: what `init_from` reads and
// what every checkpoint writes beside its weights, so a checkpoint directory
// is also a model directory for transformers' from_pretrained.
//
// Reads both spellings transformers has used: transformers 5 writes
// `rope_parameters: {rope_theta, rope_type, ...}` and `dtype`, transformers 4
// wrote `rope_theta` (with `rope_scaling`) and `torch_dtype`. rope_type
// 'llama3' (Llama 3.1/3.2) and an explicit head_dim are read; anything weft's
// model does not implement (another architecture, another rope_type, biases,
// an activation other than SiLU) is refused by name rather than silently
// trained as something else (docs/checkpoints.md lists them).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "config/config.h"

namespace weft {

struct HfModelConfig {
  ModelConfig model;          // the fields config.json defines; the rest default
  std::string dtype;          // "float32", "bfloat16", "float16" or "" when not given
  std::string path;           // the config.json read, for messages
};

// Reads dir/config.json. Throws ConfigError naming the file and the field for
// an unreadable file, a missing required field, or an unsupported feature.
HfModelConfig read_hf_config(const std::string& dir);

// config.json text for `m` with tensors stored as `dtype` ("float32",
// "bfloat16"); both transformers 4 and 5 spellings are written.
std::string hf_config_json(const ModelConfig& m, const std::string& dtype);
// generation_config.json text (weft has no tokenizer: no special token ids).
std::string hf_generation_config_json();

// The model fields that differ between an HF config and `m`, as
// "model.FIELD: X in the config, but PATH has HF_FIELD Y"; only fields that
// change tensor shapes or tying (the rest may be overridden).
std::vector<ConfigProblem> hf_model_mismatches(const HfModelConfig& hf, const ModelConfig& m);

// Resolves cfg.init_from: the model fields not in `explicit_fields` (paths
// such as "model.d_model") are taken from init_from/config.json; an explicit
// field that changes shapes or tying and disagrees is returned as a problem,
// as is an unreadable or unsupported config.json (charged to "init_from").
std::optional<ConfigProblem> apply_hf_model_config(WorkerConfig& cfg,
                                                   const std::set<std::string>& explicit_fields);

}  // namespace weft
