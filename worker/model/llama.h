// Llama-style decoder with explicit forward and backward on weft ops.
//
// Owns: the parameter table (Hugging Face LlamaForCausalLM names), one flat
// parameter buffer and one flat fp32 gradient buffer with the same layout, and
// the activations of the last forward pass.
//
// Invariants:
//   - parameters are laid out in BACKWARD order: params()[0] is the first whose
//     gradient becomes final during backward (lm_head), the last is
//     model.embed_tokens.weight. Gradient buckets are contiguous ranges of this
//     layout, so they fill front to back while backward runs.
//   - backward() ACCUMULATES (+=) into the gradient views and calls
//     on_grad_ready(i) exactly once per parameter, right after parameter i's
//     gradient is final for this micro-batch. With tied embeddings the shared
//     weight is reported once, after the embedding backward.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tensor/tensor.h"
#include "train/config.h"

namespace weft {

enum class ParamKind : uint8_t { Linear, Norm, Embedding };

struct ParamInfo {
  std::string name;  // HF name, e.g. model.layers.3.self_attn.q_proj.weight
  Shape shape;
  int64_t offset = 0;  // elements from the start of the flat buffers
  int64_t numel = 0;
  ParamKind kind = ParamKind::Linear;
};

// Builds the table for a config, in backward order with offsets filled in.
std::vector<ParamInfo> llama_param_table(const ModelConfig& cfg);

class Llama {
 public:
  using GradReadyFn = std::function<void(int param_index)>;

  explicit Llama(const ModelConfig& cfg, Device device = Device::CPU);

  const ModelConfig& config() const { return cfg_; }
  const std::vector<ParamInfo>& params() const { return table_; }
  int64_t num_params() const { return num_params_; }
  int find_param(const std::string& name) const;  // -1 if absent

  Tensor param(int i) const;  // view into the flat parameter buffer
  Tensor grad(int i) const;   // view into the flat gradient buffer
  Tensor flat_params() const { return params_.as(DType::F32, {num_params_}); }
  Tensor flat_grads() const { return grads_.as(DType::F32, {num_params_}); }

  // Normal(0, init_std) for linear and embedding weights, ones for norms.
  // A pure function of the seed.
  void init(uint64_t seed);
  void zero_grads() { grads_.zero(); }

  // tokens and targets are [B*T] row-major. Keeps the activations for backward
  // and returns the mean cross-entropy over the B*T positions.
  double forward(const int32_t* tokens, const int32_t* targets, int B, int T);

  // Gradient of loss_scale * sum of per-position losses of the last forward,
  // accumulated into the gradient buffer. For a mean over B*T positions and
  // grad_accum micro-batches, loss_scale = 1 / (B*T*grad_accum).
  void backward(float loss_scale, const GradReadyFn& on_grad_ready = {});

  // Bytes held in activations for the current (B, T).
  size_t activation_bytes() const;

 private:
  struct LayerParams {
    int ln1, q, k, v, o, ln2, gate, up, down;
  };
  struct LayerActs {
    OwnedTensor x, ln1, rstd1, q, k, v, att, lse, xmid, ln2, rstd2, gate, up, h;
  };
  void ensure_activations(int B, int T);

  ModelConfig cfg_;
  Device device_;
  std::vector<ParamInfo> table_;
  std::vector<LayerParams> layer_params_;
  int embed_ = -1, final_norm_ = -1, lm_head_ = -1;  // lm_head_ == embed_ when tied
  int64_t num_params_ = 0;
  Buffer params_, grads_;

  // activations of the last forward
  int B_ = 0, T_ = 0;
  std::vector<LayerActs> acts_;
  OwnedTensor tokens_, targets_, x_final_, lnf_, rstdf_, logits_, losses_;
  // backward scratch
  OwnedTensor dx_, dtmp_, dln_, datt_, dq_, dk_, dv_, dh_, dgate_, dup_;
};

}  // namespace weft
