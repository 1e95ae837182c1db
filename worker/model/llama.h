// Llama-style decoder with explicit forward and backward on weft ops.
//
// Owns the activations of the last forward pass. Reads its weights and writes
// its gradients through a ParamAndGradBuffer (shared: the gradient sync and
// the optimizer work on the same buffer), calling the buffer's before_use
// hook for each layer before touching its weights.
//
// Invariants:
//   - parameters are laid out in BACKWARD order (llama_param_table):
//     params()[0] is the first whose gradient becomes final during backward
//     (lm_head), the last is model.embed_tokens.weight;
//   - backward() ACCUMULATES (+=) into the gradient views and calls
//     on_grad_ready(i) exactly once per parameter, right after parameter i's
//     gradient is final for this micro-batch. With tied embeddings the shared
//     weight is reported once, after the embedding backward.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/param_and_grad_buffer.h"
#include "model/param_info.h"
#include "tensor/tensor.h"
#include "config/config.h"

namespace weft {

// Builds the table for a config, in backward order with offsets filled in.
std::vector<ParamInfo> llama_param_table(const ModelConfig& cfg);

class Llama {
 public:
  using GradReadyFn = std::function<void(int param_index)>;

  // Without a buffer the model makes its own (f32 on the CPU). A given buffer
  // must hold llama_param_table(cfg).
  explicit Llama(const ModelConfig& cfg, std::shared_ptr<ParamAndGradBuffer> buffer = nullptr);

  const ModelConfig& config() const { return cfg_; }
  ParamAndGradBuffer& buffer() const { return *buf_; }
  const std::shared_ptr<ParamAndGradBuffer>& shared_buffer() const { return buf_; }
  const std::vector<ParamInfo>& params() const { return buf_->params(); }
  int64_t num_params() const { return buf_->numel(); }
  int find_param(const std::string& name) const { return buf_->find(name); }

  Tensor param(int i) const { return buf_->param(i); }
  Tensor grad(int i) const { return buf_->grad(i); }
  Tensor flat_params() const { return buf_->flat_params(); }
  Tensor flat_grads() const { return buf_->flat_grads(); }
  void zero_grads() { buf_->zero_grads(); }

  // Normal(0, init_std) for linear and embedding weights, ones for norms.
  // A pure function of the seed.
  void init(uint64_t seed);

  // tokens and targets are [B*T] row-major. Keeps the activations for backward
  // and returns the mean cross-entropy over the B*T positions.
  double forward(const int32_t* tokens, const int32_t* targets, int B, int T);

  // Gradient of loss_scale * sum of per-position losses of the last forward,
  // accumulated into the gradient buffer. For a mean over B*T positions and
  // grad_accum micro-batches, loss_scale = 1 / (B*T*grad_accum).
  void backward(float loss_scale, const GradReadyFn& on_grad_ready = {});

  // [B*T, vocab] logits of the last forward (until backward overwrites them
  // with their gradient).
  const Tensor& logits() const { return logits_.t; }

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
  std::shared_ptr<ParamAndGradBuffer> buf_;
  Device device_;
  std::vector<LayerParams> layer_params_;
  int embed_ = -1, final_norm_ = -1, lm_head_ = -1;  // lm_head_ == embed_ when tied

  // activations of the last forward
  int B_ = 0, T_ = 0;
  std::vector<LayerActs> acts_;
  OwnedTensor tokens_, targets_, x_final_, lnf_, rstdf_, logits_, losses_;
  // backward scratch
  OwnedTensor dx_, dtmp_, dln_, datt_, dq_, dk_, dv_, dh_, dgate_, dup_;
};

}  // namespace weft
