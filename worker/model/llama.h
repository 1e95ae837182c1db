// Llama-style decoder with explicit forward and backward on weft ops.
//
// Owns the activations of the last forward pass, in the buffer's working
// dtype and on its device (bf16 on a GPU; norm statistics, the attention lse
// and per-position losses stay f32). Reads its weights and writes
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
//     weight is reported once, after the embedding backward;
//   - with a SequenceExchange of n ranks, forward() gets this rank's S/n
//     positions of each sequence (slice rank()), RoPE uses their global
//     positions and attention runs head-split over the whole sequence; when
//     n exceeds the KV heads (n a multiple of them), each KV head is
//     replicated n / n_kv_heads times before the exchange, so every rank
//     receives the one KV head its query heads use, and the replicas'
//     gradients are summed back into it (InternEvo's expandKVPacked);
//   - the first recompute_blocks() blocks keep only their input in forward
//     and recompute the rest (in one shared scratch) during backward, after
//     their before_use(layer, Backward);
//   - with recompute_pointwise(), no block keeps its norms' outputs or its
//     SwiGLU product: they live in one shared scratch, and backward forms
//     them again from what the block keeps (x, xmid, gate, up) with the same
//     kernels on the same inputs, so losses and gradients are bit-identical.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/param_and_grad_buffer.h"
#include "model/param_info.h"
#include "model/weight_source.h"
#include "model/sequence_exchange.h"
#include "tensor/tensor.h"
#include "config/config.h"

namespace weft {

// Builds the table for a config, in backward order with offsets filled in.
std::vector<ParamInfo> llama_param_table(const ModelConfig& cfg);

// The weights Llama::init(seed) draws, by range and without a model: what a
// rank that keeps only part of the model starts from (one tensor's values in
// memory at a time).
class InitialWeights : public PerParamWeightSource {
 public:
  InitialWeights(const ModelConfig& cfg, uint64_t seed)
      : PerParamWeightSource(llama_param_table(cfg)), std_(static_cast<float>(cfg.init_std)), seed_(seed) {}

 protected:
  void read_param(const ParamInfo& p, int64_t first, Tensor dst) const override;

 private:
  float std_;
  uint64_t seed_;
  mutable std::string drawn_;  // the tensor values_ holds
  mutable std::vector<float> values_;
};

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

  // Not owned; nullptr (the default) keeps whole sequences on this rank. Set
  // before the first forward.
  void set_sequence_exchange(SequenceExchange* exchange);
  // Blocks 0..n-1 recompute their activations in backward (0: none).
  void set_recompute_blocks(int n);
  int recompute_blocks() const { return recompute_; }
  // The norms' outputs ([B*T, d] twice) and SwiGLU's product ([B*T, ffn]) of
  // every block recomputed in backward instead of kept (train.recompute
  // pointwise): [B*T, 2 d + ffn] less per block for two RMSNorm forwards and
  // one SwiGLU forward per block in backward, as torch.compile's partitioner
  // does for such memory-bound ops.
  void set_recompute_pointwise(bool on);
  bool recompute_pointwise() const { return pointwise_; }
  // The LM head's logits `rows` positions at a time (0: all B*T at once):
  // forward computes each chunk's logits and losses in one [rows, vocab]
  // buffer and keeps only the losses; backward computes each chunk's logits
  // again, then their gradient and the head's. Same results, one more LM
  // head matmul, and never the whole [B*T, vocab] (train.logits_chunk_mb).
  void set_logits_chunk_rows(int64_t rows);
  int64_t logits_chunk_rows() const { return logits_chunk_rows_; }

  // Normal(0, init_std) for linear and embedding weights, ones for norms.
  // A pure function of the seed.
  void init(uint64_t seed);

  // tokens and targets are [B*T] row-major (T: this rank's positions of each
  // sequence). Keeps the activations for backward and returns the mean
  // cross-entropy over the B*T positions. doc_starts (packed documents, host
  // memory; CPU): the first position of each position's document in its row,
  // for the whole sequences ([B * T * sp], under sequence parallelism too);
  // attention stays inside the document and RoPE positions count from its
  // start, so each document is computed as if it were a sequence of its own.
  double forward(const int32_t* tokens, const int32_t* targets, int B, int T, const int32_t* doc_starts = nullptr);

  // Gradient of loss_scale * sum of per-position losses of the last forward,
  // accumulated into the gradient buffer. For a mean over B*T positions and
  // grad_accum micro-batches, loss_scale = 1 / (B*T*grad_accum).
  void backward(float loss_scale, const GradReadyFn& on_grad_ready = {});

  // [B*T, vocab] logits of the last forward (until backward overwrites them
  // with their gradient); with chunked logits, the last chunk's rows only.
  const Tensor& logits() const { return logits_.t; }

  // Bytes held in activations for the current (B, T).
  size_t activation_bytes() const;
  // The kernels that run this model's attention for micro-batches of B
  // sequences of T positions on this rank (ops::attention_kernel; under
  // sequence parallelism the attention sees every position and H / sp heads;
  // packed: micro-batches of packed documents).
  ops::AttentionKernel attention_kernel(int B, int T, bool packed = false) const;

 private:
  struct LayerParams {
    int ln1, q, k, v, o, ln2, gate, up, down;
  };
  // q, k, v, att are this rank's positions, every head; qh, kh, vh, atth
  // (sequence parallel only) every position, this rank's heads.
  struct LayerActs {
    OwnedTensor x, ln1, rstd1, q, k, v, att, lse, xmid, ln2, rstd2, gate, up, h;
    OwnedTensor qh, kh, vh, atth;
  };
  void ensure_activations(int B, int T);
  void alloc_block_acts(LayerActs& a, int B, int T);
  // One block's forward from input x into a's activations and `next`.
  void forward_block(int l, const Tensor& x, LayerActs& a, Tensor next);
  int sp() const { return seq_ ? seq_->size() : 1; }
  // KV head replicas before the sequence exchange: sp / n_kv_heads when sp
  // exceeds the KV heads, else 1 (no replication).
  int kv_repeat() const { return sp() > cfg_.n_kv_heads ? sp() / cfg_.n_kv_heads : 1; }

  ModelConfig cfg_;
  std::shared_ptr<ParamAndGradBuffer> buf_;
  Device device_;
  std::vector<LayerParams> layer_params_;
  int embed_ = -1, final_norm_ = -1, lm_head_ = -1;  // lm_head_ == embed_ when tied

  // activations of the last forward
  int B_ = 0, T_ = 0;
  std::vector<LayerActs> acts_;  // blocks < recompute_ hold only x
  LayerActs rc_;                  // recomputed blocks' activations (shared)
  SequenceExchange* seq_ = nullptr;
  int recompute_ = 0;
  bool pointwise_ = false;
  OwnedTensor ln_scratch_, h_scratch_;  // recompute_pointwise: every block's ln1/ln2 and h
  int64_t logits_chunk_rows_ = 0;
  OwnedTensor tokens_, targets_, x_final_, lnf_, rstdf_, logits_, losses_;
  // Packed documents of the last forward (host I32): each position's
  // document start in the whole sequence ([B, S], what attention sees) and
  // the position in its document of this rank's positions ([B, T], what
  // RoPE rotates by); packed_ false: none. starts_t_ and positions_t_ view
  // them, or on a GPU their copies in starts_dev_ and positions_dev_.
  bool packed_ = false;
  std::vector<int32_t> doc_starts_, doc_positions_;
  OwnedTensor starts_dev_, positions_dev_;
  Tensor starts_t_, positions_t_;
  // backward scratch
  OwnedTensor dx_, dtmp_, dln_, datt_, dq_, dk_, dv_, dh_, dgate_, dup_;
  OwnedTensor datth_, dqh_, dkh_, dvh_;  // sequence parallel: head-split
  // kv_repeat() > 1: k or v (or their gradients) with replicated heads
  // [B, T, n_kv_heads * kv_repeat(), D], and the same-sized staging that
  // replicates and sums them (shared by every block).
  OwnedTensor kvx_, kvx_tmp_;
};

}  // namespace weft
