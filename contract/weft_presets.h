// The built-in presets and the SwiGLU width rule, as the worker's config unit
// applies them (worker/config/config.cc, preset()), the unit the operator
// reads spec.worker with too. Standard library only, like the contract
// header.
#pragma once

#include <string_view>

#include "weft_modes.h"

namespace weft::contract {

// The SwiGLU width of a model: model.ffn_hidden, or when that is 0,
// 8 * d_model / 3 rounded up to a multiple of 32 (Llama's rule).
constexpr int ffn_width(int ffn_hidden, int d_model) {
  return ffn_hidden > 0 ? ffn_hidden : (8 * d_model / 3 + 31) / 32 * 32;
}

// The fields a preset sets. `tiny` is also the config's defaults: a config
// file that names no preset is tiny.
struct Preset {
  std::string_view name;
  ComputeDevice device;
  int vocab_size, d_model, n_layers, n_heads, n_kv_heads;
  int ffn_hidden;  // 0: ffn_width's rule
  int max_seq_len;
  bool tie_embeddings;
  int steps, micro_batch, seq_len, grad_accum;
  std::string_view out_dir;
  double lr;
  int warmup_steps;
  double min_lr_ratio, weight_decay;
};

inline constexpr Preset kPresets[] = {
    // CPU demo, about a minute on 2 cores.
    {"tiny", ComputeDevice::Cpu, 256, 128, 4, 4, 2, 0, 256, false, 300, 16, 64, 1, "runs/weft", 3e-3, 20, 0.1, 0.1},
    // GPT-2 small as a Llama: 12 x 768, 12 heads of 64, full KV heads, tied
    // embeddings. A SwiGLU of width 2048 has the same 3 * 768 * 2048 = 4.7M
    // weights per block as GPT-2's 4x MLP, so the model has about 124M
    // parameters (38.6M embedding + 12 * 7.1M blocks). Optimizer and schedule
    // follow llm.c's GPT-2 run: lr 6e-4, 700 warmup steps, 19073 steps of
    // 4 x 1024 x 16 accumulation x 8 ranks = 524288 tokens (10B tokens).
    // Data stays synthetic (vocab 50304, GPT-2's 50257 padded to a multiple
    // of 128) so the preset runs anywhere; see configs/gpt2-124m-shards.yaml
    // for FineWeb shards.
    {"gpt2-124m", ComputeDevice::Cuda, 50304, 768, 12, 12, 12, 2048, 1024, true, 19073, 4, 1024, 16, "runs/gpt2-124m", 6e-4, 700,
     0.1, 0.1},
};

inline constexpr std::string_view kPresetNames = "tiny, gpt2-124m";

// The preset called `name`, or nullptr.
constexpr const Preset* find_preset(std::string_view name) {
  for (const Preset& p : kPresets)
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace weft::contract
