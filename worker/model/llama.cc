#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/init.h"

namespace weft {

namespace {

std::string layer_name(int l, const char* rest) {
  return "model.layers." + std::to_string(l) + "." + rest;
}

// out [B, T, H * r, D] = each head of in [B, T, H, D] r times in a row
// (head h -> heads h r .. h r + r - 1); tmp is out-sized. Built from copies
// and a swap of leading dimensions, which every backend has.
void repeat_heads(Tensor out, const Tensor& in, Tensor tmp, int64_t r) {
  const int64_t rows = in.dim(0) * in.dim(1) * in.dim(2), D = in.dim(3);
  Tensor flat_in = in.view({rows, D}), stacked = tmp.view({r * rows, D});
  for (int64_t i = 0; i < r; ++i) ops::copy(stacked.slice0(i * rows, (i + 1) * rows), flat_in);  // [r, rows, D]
  ops::swap_leading_dims(out.view({rows * r, D}), stacked, r, rows);                        // [rows, r, D]
}

// The transpose: out [B, T, H, D] = the sum of each head's r replicas in in
// [B, T, H * r, D]; tmp is in-sized.
void sum_head_replicas(Tensor out, const Tensor& in, Tensor tmp, int64_t r) {
  const int64_t rows = out.dim(0) * out.dim(1) * out.dim(2), D = out.dim(3);
  Tensor stacked = tmp.view({r * rows, D}), flat_out = out.view({rows, D});
  ops::swap_leading_dims(stacked, in.view({rows * r, D}), rows, r);  // [r, rows, D]
  ops::copy(flat_out, stacked.slice0(0, rows));
  for (int64_t i = 1; i < r; ++i) ops::add_acc(flat_out, stacked.slice0(i * rows, (i + 1) * rows));
}

Rope rope_of(const ModelConfig& m) {
  const RopeScalingConfig& s = m.rope_scaling;
  if (s.rope_type == "llama3")
    return Rope::llama3(m.rope_theta, s.factor, s.low_freq_factor, s.high_freq_factor,
                        s.original_max_position_embeddings);
  WEFT_CHECK(s.rope_type == "default", "model.rope_scaling.rope_type '" + s.rope_type + "' is not implemented");
  return Rope(m.rope_theta);
}

}  // namespace

std::vector<ParamInfo> llama_param_table(const ModelConfig& cfg) {
  const int64_t C = cfg.d_model, V = cfg.vocab_size, F = cfg.ffn();
  const int64_t D = cfg.head_dim(), Hq = cfg.n_heads, Hkv = cfg.n_kv_heads;
  std::vector<ParamInfo> t;
  auto add = [&](std::string name, Shape s, ParamKind kind, int layer) {
    ParamInfo p;
    p.name = std::move(name);
    p.shape = s;
    p.numel = s.numel();
    p.kind = kind;
    p.layer = layer;
    p.offset = t.empty() ? 0 : t.back().offset + t.back().numel;
    t.push_back(std::move(p));
  };
  // Backward order: the order in which gradients become final.
  if (!cfg.tie_embeddings) add("lm_head.weight", {V, C}, ParamKind::Linear, kHeadLayer);
  add("model.norm.weight", {C}, ParamKind::Norm, kHeadLayer);
  for (int l = cfg.n_layers - 1; l >= 0; --l) {
    add(layer_name(l, "mlp.down_proj.weight"), {C, F}, ParamKind::Linear, l);
    add(layer_name(l, "mlp.up_proj.weight"), {F, C}, ParamKind::Linear, l);
    add(layer_name(l, "mlp.gate_proj.weight"), {F, C}, ParamKind::Linear, l);
    add(layer_name(l, "post_attention_layernorm.weight"), {C}, ParamKind::Norm, l);
    add(layer_name(l, "self_attn.o_proj.weight"), {C, Hq * D}, ParamKind::Linear, l);
    add(layer_name(l, "self_attn.v_proj.weight"), {Hkv * D, C}, ParamKind::Linear, l);
    add(layer_name(l, "self_attn.k_proj.weight"), {Hkv * D, C}, ParamKind::Linear, l);
    add(layer_name(l, "self_attn.q_proj.weight"), {Hq * D, C}, ParamKind::Linear, l);
    add(layer_name(l, "input_layernorm.weight"), {C}, ParamKind::Norm, l);
  }
  add("model.embed_tokens.weight", {V, C}, ParamKind::Embedding, kEmbeddingLayer);
  return t;
}

Llama::Llama(const ModelConfig& cfg, std::shared_ptr<ParamAndGradBuffer> buffer)
    : cfg_(cfg),
      buf_(buffer ? std::move(buffer)
                  : std::make_shared<ParamAndGradBuffer>(llama_param_table(cfg))),
      device_(buf_->device()) {
  const std::vector<ParamInfo> want = llama_param_table(cfg);
  WEFT_CHECK(buf_->params().size() == want.size() && buf_->numel() == want.back().offset + want.back().numel,
             "parameter buffer does not hold this model's parameter table");
  layer_params_.resize(cfg.n_layers);
  for (int l = 0; l < cfg.n_layers; ++l) {
    LayerParams& lp = layer_params_[l];
    lp.ln1 = find_param(layer_name(l, "input_layernorm.weight"));
    lp.q = find_param(layer_name(l, "self_attn.q_proj.weight"));
    lp.k = find_param(layer_name(l, "self_attn.k_proj.weight"));
    lp.v = find_param(layer_name(l, "self_attn.v_proj.weight"));
    lp.o = find_param(layer_name(l, "self_attn.o_proj.weight"));
    lp.ln2 = find_param(layer_name(l, "post_attention_layernorm.weight"));
    lp.gate = find_param(layer_name(l, "mlp.gate_proj.weight"));
    lp.up = find_param(layer_name(l, "mlp.up_proj.weight"));
    lp.down = find_param(layer_name(l, "mlp.down_proj.weight"));
  }
  embed_ = find_param("model.embed_tokens.weight");
  final_norm_ = find_param("model.norm.weight");
  lm_head_ = cfg.tie_embeddings ? embed_ : find_param("lm_head.weight");
}

void Llama::init(uint64_t seed) {
  WEFT_CHECK(device_ == Device::CPU, "init runs on the host; copy to the device afterwards");
  for (size_t i = 0; i < params().size(); ++i) {
    const ParamInfo& p = params()[i];
    float* w = param(static_cast<int>(i)).f32();
    if (p.kind == ParamKind::Norm) {
      for (int64_t j = 0; j < p.numel; ++j) w[j] = 1.0f;
    } else {
      // Each tensor gets its own stream, so adding a layer does not change
      // the initial values of the others.
      fill_normal(w, p.numel, static_cast<float>(cfg_.init_std), seed, hash_name(p.name));
    }
  }
}

void InitialWeights::read_param(const ParamInfo& p, int64_t first, Tensor dst) const {
  float* out = dst.f32();
  if (p.kind == ParamKind::Norm) {
    std::fill(out, out + dst.numel(), 1.0f);
    return;
  }
  if (drawn_ != p.name) {  // the same stream as Llama::init
    values_.assign(static_cast<size_t>(p.numel), 0.0f);
    fill_normal(values_.data(), p.numel, std_, seed_, hash_name(p.name));
    drawn_ = p.name;
  }
  std::copy(values_.begin() + first, values_.begin() + first + dst.numel(), out);
}

void Llama::set_sequence_exchange(SequenceExchange* exchange) {
  const int n = exchange ? exchange->size() : 1;
  WEFT_CHECK(cfg_.n_heads % n == 0 && (cfg_.n_kv_heads % n == 0 || n % cfg_.n_kv_heads == 0),
             "sequence parallel size " + std::to_string(n) + " must divide the heads (" +
                 std::to_string(cfg_.n_heads) + ") and divide or be a multiple of the kv heads (" +
                 std::to_string(cfg_.n_kv_heads) + ")");
  seq_ = exchange;
  B_ = T_ = 0;  // re-plan the activations
}

void Llama::set_recompute_blocks(int n) {
  WEFT_CHECK(n >= 0 && n <= cfg_.n_layers, "recompute blocks must be in [0, n_layers], got " + std::to_string(n));
  recompute_ = n;
  B_ = T_ = 0;
}

void Llama::set_recompute_pointwise(bool on) {
  pointwise_ = on;
  B_ = T_ = 0;
}

void Llama::set_logits_chunk_rows(int64_t rows) {
  WEFT_CHECK(rows >= 0, "logits chunk rows must be >= 0, got " + std::to_string(rows));
  logits_chunk_rows_ = rows;
  B_ = T_ = 0;
}

void Llama::alloc_block_acts(LayerActs& a, int B, int T) {
  const int64_t N = int64_t(B) * T, C = cfg_.d_model, F = cfg_.ffn();
  const int64_t D = cfg_.head_dim(), Hq = cfg_.n_heads, Hkv = cfg_.n_kv_heads;
  const int64_t n = sp(), S = int64_t(T) * n;
  const Device dev = device_;
  const DType wt = buf_->param_dtype();
  auto act = [dev, wt](Shape s) { return OwnedTensor(wt, s, dev); };
  auto f32 = [dev](Shape s) { return OwnedTensor(DType::F32, s, dev); };
  // Pointwise recompute: the norms' outputs and SwiGLU's product are views
  // of the shared scratch (no storage of their own).
  auto scratch = [](const OwnedTensor& s) {
    OwnedTensor v;
    v.t = s.t;
    return v;
  };
  a.ln1 = pointwise_ ? scratch(ln_scratch_) : act({N, C});
  a.rstd1 = f32({N});
  a.q = act({B, T, Hq, D});
  a.k = act({B, T, Hkv, D});
  a.v = act({B, T, Hkv, D});
  a.att = act({B, T, Hq, D});
  a.lse = f32({B, Hq / n, S});
  a.xmid = act({N, C});
  a.ln2 = pointwise_ ? scratch(ln_scratch_) : act({N, C});
  a.rstd2 = f32({N});
  a.gate = act({N, F});
  a.up = act({N, F});
  a.h = pointwise_ ? scratch(h_scratch_) : act({N, F});
  if (n > 1) {
    const int64_t kv_local = Hkv * kv_repeat() / n;  // 1 when the KV heads are replicated
    a.qh = act({B, S, Hq / n, D});
    a.kh = act({B, S, kv_local, D});
    a.vh = act({B, S, kv_local, D});
    a.atth = act({B, S, Hq / n, D});
  }
}

void Llama::ensure_activations(int B, int T) {
  if (B == B_ && T == T_) return;
  B_ = B;
  T_ = T;
  const int64_t N = int64_t(B) * T, C = cfg_.d_model, F = cfg_.ffn(), V = cfg_.vocab_size;
  const int64_t D = cfg_.head_dim(), Hq = cfg_.n_heads, Hkv = cfg_.n_kv_heads;
  const int64_t n = sp(), S = int64_t(T) * n;
  // Activations and their gradients in the working dtype; norm statistics,
  // per-position losses (and the attention lse, in alloc_block_acts) in f32.
  const Device dev = device_;
  const DType wt = buf_->param_dtype();
  auto act = [dev, wt](Shape s) { return OwnedTensor(wt, s, dev); };
  auto f32 = [dev](Shape s) { return OwnedTensor(DType::F32, s, dev); };
  ln_scratch_ = pointwise_ ? act({N, C}) : OwnedTensor{};
  h_scratch_ = pointwise_ ? act({N, F}) : OwnedTensor{};
  acts_.clear();
  acts_.resize(cfg_.n_layers);
  for (int l = 0; l < cfg_.n_layers; ++l) {
    acts_[l].x = act({N, C});
    if (l >= recompute_) alloc_block_acts(acts_[l], B, T);
  }
  rc_ = LayerActs{};
  if (recompute_ > 0) alloc_block_acts(rc_, B, T);
  tokens_ = OwnedTensor(DType::I32, {N}, dev);
  targets_ = OwnedTensor(DType::I32, {N}, dev);
  x_final_ = act({N, C});
  lnf_ = act({N, C});
  rstdf_ = f32({N});
  logits_ = act({logits_chunk_rows_ > 0 ? std::min(N, logits_chunk_rows_) : N, V});
  losses_ = f32({N});
  dx_ = act({N, C});
  dtmp_ = recompute_ > 0 ? act({N, C}) : OwnedTensor{};  // the recomputed blocks' output sink
  dln_ = act({N, C});
  datt_ = act({B, T, Hq, D});
  dq_ = act({B, T, Hq, D});
  dk_ = act({B, T, Hkv, D});
  dv_ = act({B, T, Hkv, D});
  dh_ = act({N, F});
  dgate_ = act({N, F});
  dup_ = act({N, F});
  for (OwnedTensor* t : {&datth_, &dqh_, &dkh_, &dvh_, &kvx_, &kvx_tmp_}) *t = OwnedTensor{};
  if (n > 1) {
    const int64_t r = kv_repeat(), kv_local = Hkv * r / n;
    datth_ = act({B, S, Hq / n, D});
    dqh_ = act({B, S, Hq / n, D});
    dkh_ = act({B, S, kv_local, D});
    dvh_ = act({B, S, kv_local, D});
    if (r > 1) {
      kvx_ = act({B, T, Hkv * r, D});
      kvx_tmp_ = act({B, T, Hkv * r, D});
    }
  }
}

ops::AttentionKernel Llama::attention_kernel(int B, int T, bool packed) const {
  const int64_t n = sp();
  return ops::attention_kernel(device_, buf_->param_dtype(), B, int64_t(T) * n, cfg_.n_heads / n,
                               int64_t(cfg_.n_kv_heads) * kv_repeat() / n, cfg_.head_dim(), packed);
}

size_t Llama::activation_bytes() const {
  size_t total = 0;
  auto add = [&total](const OwnedTensor& t) { total += t.buf.bytes(); };
  auto add_block = [&](const LayerActs& a) {
    for (const OwnedTensor* t : {&a.x, &a.ln1, &a.rstd1, &a.q, &a.k, &a.v, &a.att, &a.lse, &a.xmid, &a.ln2,
                                 &a.rstd2, &a.gate, &a.up, &a.h, &a.qh, &a.kh, &a.vh, &a.atth})
      add(*t);
  };
  for (const LayerActs& a : acts_) add_block(a);
  add_block(rc_);
  for (const OwnedTensor* t : {&ln_scratch_, &h_scratch_, &tokens_, &targets_, &x_final_, &lnf_, &rstdf_, &logits_,
                               &losses_, &dx_, &dtmp_, &dln_, &datt_, &dq_, &dk_, &dv_, &dh_, &dgate_, &dup_, &datth_,
                               &dqh_, &dkh_, &dvh_, &kvx_, &kvx_tmp_})
    add(*t);
  return total;
}

void Llama::forward_block(int l, const Tensor& x, LayerActs& a, Tensor next) {
  const LayerParams& p = layer_params_[l];
  const int64_t N = int64_t(B_) * T_;
  const int64_t Hq = cfg_.n_heads, Hkv = cfg_.n_kv_heads, D = cfg_.head_dim();
  const float eps = static_cast<float>(cfg_.norm_eps);
  const Rope rope = rope_of(cfg_);
  const int64_t pos0 = seq_ ? int64_t(seq_->rank()) * T_ : 0;
  ops::rmsnorm_forward(a.ln1.t, a.rstd1.t, x, param(p.ln1), eps);
  ops::matmul(a.q.t.view({N, Hq * D}), a.ln1, param(p.q), false, true);
  ops::matmul(a.k.t.view({N, Hkv * D}), a.ln1, param(p.k), false, true);
  ops::matmul(a.v.t.view({N, Hkv * D}), a.ln1, param(p.v), false, true);
  const Tensor* positions = packed_ ? &positions_t_ : nullptr;
  ops::rope_forward(a.q.t, a.q, rope, pos0, positions);
  ops::rope_forward(a.k.t, a.k, rope, pos0, positions);
  if (sp() > 1) {
    // Ulysses: every position of this rank's heads, then back.
    seq_->to_heads(a.qh.t, a.q);
    if (const int r = kv_repeat(); r > 1) {
      repeat_heads(kvx_.t, a.k, kvx_tmp_.t, r);
      seq_->to_heads(a.kh.t, kvx_);
      repeat_heads(kvx_.t, a.v, kvx_tmp_.t, r);
      seq_->to_heads(a.vh.t, kvx_);
    } else {
      seq_->to_heads(a.kh.t, a.k);
      seq_->to_heads(a.vh.t, a.v);
    }
    ops::attention_forward(a.atth.t, a.lse.t, a.qh, a.kh, a.vh, packed_ ? &starts_t_ : nullptr);
    seq_->to_sequence(a.att.t, a.atth);
  } else {
    ops::attention_forward(a.att.t, a.lse.t, a.q, a.k, a.v, packed_ ? &starts_t_ : nullptr);
  }
  // xmid = x + att @ Wo^T
  ops::copy(a.xmid.t, x);
  ops::matmul(a.xmid.t, a.att.t.view({N, Hq * D}), param(p.o), false, true, 1.0f, 1.0f);
  ops::rmsnorm_forward(a.ln2.t, a.rstd2.t, a.xmid, param(p.ln2), eps);
  ops::matmul(a.gate.t, a.ln2, param(p.gate), false, true);
  ops::matmul(a.up.t, a.ln2, param(p.up), false, true);
  ops::swiglu_forward(a.h.t, a.gate, a.up);
  // next residual = xmid + h @ Wdown^T
  ops::copy(next, a.xmid);
  ops::matmul(next, a.h, param(p.down), false, true, 1.0f, 1.0f);
}

double Llama::forward(const int32_t* tokens, const int32_t* targets, int B, int T, const int32_t* doc_starts) {
  WEFT_CHECK(int64_t(T) * sp() <= cfg_.max_seq_len,
             "sequence length " + std::to_string(int64_t(T) * sp()) + " exceeds model.max_seq_len " +
                 std::to_string(cfg_.max_seq_len));
  ensure_activations(B, T);
  const int64_t N = int64_t(B) * T;
  packed_ = doc_starts != nullptr;
  if (packed_) {
    // This rank's positions are [first, first + T) of sequences of S.
    const int64_t S = int64_t(T) * sp(), first = seq_ ? int64_t(seq_->rank()) * T : 0;
    doc_starts_.assign(doc_starts, doc_starts + int64_t(B) * S);
    doc_positions_.resize(static_cast<size_t>(N));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t global = first + t;
        doc_positions_[b * T + t] = static_cast<int32_t>(global - doc_starts_[b * S + global]);
      }
    starts_t_ = Tensor(doc_starts_.data(), DType::I32, {B, S});
    positions_t_ = Tensor(doc_positions_.data(), DType::I32, {B, T});
    if (device_ == Device::CUDA) {  // the kernels read the tables on the device
      // and index by them unchecked (the CPU kernels check them themselves)
      for (int64_t r = 0; r < B * S; ++r)
        WEFT_CHECK(doc_starts_[r] >= 0 && doc_starts_[r] <= r % S,
                   "packed documents: start " + std::to_string(doc_starts_[r]) + " of position " +
                       std::to_string(r % S) + " is not in [0, position]");
      if (starts_dev_.t.shape != starts_t_.shape) starts_dev_ = OwnedTensor(DType::I32, starts_t_.shape, device_);
      if (positions_dev_.t.shape != positions_t_.shape)
        positions_dev_ = OwnedTensor(DType::I32, positions_t_.shape, device_);
      ops::transfer(starts_dev_.t, starts_t_);
      ops::transfer(positions_dev_.t, positions_t_);
      starts_t_ = starts_dev_.t;
      positions_t_ = positions_dev_.t;
    }
  }
  const float eps = static_cast<float>(cfg_.norm_eps);
  ops::transfer(tokens_.t, Tensor(const_cast<int32_t*>(tokens), DType::I32, {N}));
  ops::transfer(targets_.t, Tensor(const_cast<int32_t*>(targets), DType::I32, {N}));

  buf_->before_use(kEmbeddingLayer, WeightUse::Forward);
  ops::embedding_forward(acts_.empty() ? x_final_.t : acts_[0].x.t, tokens_, param(embed_));
  for (int l = 0; l < cfg_.n_layers; ++l) {
    buf_->before_use(l, WeightUse::Forward);
    Tensor next = l + 1 < cfg_.n_layers ? acts_[l + 1].x.t : x_final_.t;
    forward_block(l, acts_[l].x, l < recompute_ ? rc_ : acts_[l], next);
  }
  buf_->before_use(kHeadLayer, WeightUse::Forward);
  ops::rmsnorm_forward(lnf_.t, rstdf_.t, x_final_, param(final_norm_), eps);
  const int64_t R = logits_.t.dim(0);
  if (R == N) {
    ops::matmul(logits_.t, lnf_, param(lm_head_), false, true);
    return ops::cross_entropy_forward(losses_.t, logits_, targets_);
  }
  // Chunked: each chunk's logits in the one buffer, then its losses; their
  // mean once at the end (on a GPU one host sync a step, not one a chunk).
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t r1 = std::min(N, r0 + R);
    Tensor logits = logits_.t.slice0(0, r1 - r0);
    ops::matmul(logits, lnf_.t.slice0(r0, r1), param(lm_head_), false, true);
    ops::cross_entropy_losses(losses_.t.slice0(r0, r1), logits, targets_.t.slice0(r0, r1));
  }
  return ops::mean_loss(losses_);
}

void Llama::backward(float loss_scale, const GradReadyFn& on_grad_ready) {
  WEFT_CHECK(B_ > 0, "backward called before forward");
  const int64_t N = int64_t(B_) * T_;
  const int64_t Hq = cfg_.n_heads, Hkv = cfg_.n_kv_heads, D = cfg_.head_dim();
  const Rope rope = rope_of(cfg_);
  const float eps = static_cast<float>(cfg_.norm_eps);
  const int64_t pos0 = seq_ ? int64_t(seq_->rank()) * T_ : 0;
  auto ready = [&](int i) {
    if (on_grad_ready) on_grad_ready(i);
  };

  // Loss -> logits (in place) -> LM head and final norm; chunk by chunk
  // when the logits are chunked, each chunk's logits computed again first.
  buf_->before_use(kHeadLayer, WeightUse::Backward);
  const int64_t R = logits_.t.dim(0);
  if (R == N) {
    ops::cross_entropy_backward(logits_.t, logits_, targets_, loss_scale, &losses_.t);
    ops::matmul(grad(lm_head_), logits_, lnf_, true, false, 1.0f, 1.0f);  // dW += dlogits^T lnf
    if (!cfg_.tie_embeddings) ready(lm_head_);
    ops::matmul(dln_.t, logits_, param(lm_head_), false, false);  // dlnf = dlogits W
  } else {
    for (int64_t r0 = 0; r0 < N; r0 += R) {
      const int64_t r1 = std::min(N, r0 + R);
      Tensor logits = logits_.t.slice0(0, r1 - r0), lnf = lnf_.t.slice0(r0, r1), losses = losses_.t.slice0(r0, r1);
      ops::matmul(logits, lnf, param(lm_head_), false, true);
      ops::cross_entropy_backward(logits, logits, targets_.t.slice0(r0, r1), loss_scale, &losses);
      ops::matmul(grad(lm_head_), logits, lnf, true, false, 1.0f, 1.0f);
      ops::matmul(dln_.t.slice0(r0, r1), logits, param(lm_head_), false, false);
    }
    if (!cfg_.tie_embeddings) ready(lm_head_);
  }
  ops::rmsnorm_backward(dx_.t, grad(final_norm_), dln_, x_final_, param(final_norm_), rstdf_);
  ready(final_norm_);

  for (int l = cfg_.n_layers - 1; l >= 0; --l) {
    const bool recomputed = l < recompute_;
    LayerActs& a = recomputed ? rc_ : acts_[l];
    const Tensor x = acts_[l].x.t;
    const LayerParams& p = layer_params_[l];
    buf_->before_use(l, WeightUse::Backward);
    // dtmp is free until the norm backward below: a sink for the recomputed
    // block's output, which the next block's stored input already holds.
    if (recomputed) forward_block(l, x, rc_, dtmp_.t);
    // Pointwise recompute: ln2 and h into the scratch (a recomputed block
    // has just formed them there). The norm rewrites rstd2 with its own value.
    if (pointwise_ && !recomputed) {
      ops::rmsnorm_forward(a.ln2.t, a.rstd2.t, a.xmid, param(p.ln2), eps);
      ops::swiglu_forward(a.h.t, a.gate, a.up);
    }
    // MLP: dx holds d(next residual) = d(xmid) through the skip connection.
    ops::matmul(grad(p.down), dx_, a.h, true, false, 1.0f, 1.0f);
    ready(p.down);
    ops::matmul(dh_.t, dx_, param(p.down), false, false);
    ops::swiglu_backward(dgate_.t, dup_.t, dh_, a.gate, a.up);
    ops::matmul(grad(p.up), dup_, a.ln2, true, false, 1.0f, 1.0f);
    ready(p.up);
    ops::matmul(grad(p.gate), dgate_, a.ln2, true, false, 1.0f, 1.0f);
    ready(p.gate);
    ops::matmul(dln_.t, dgate_, param(p.gate), false, false);
    ops::matmul(dln_.t, dup_, param(p.up), false, false, 1.0f, 1.0f);
    // dx = d(xmid): the skip connection's gradient plus the norm's.
    ops::rmsnorm_backward(dx_.t, grad(p.ln2), dln_, a.xmid, param(p.ln2), a.rstd2, true);
    ready(p.ln2);

    // Attention.
    Tensor att2d = a.att.t.view({N, Hq * D});
    ops::matmul(grad(p.o), dx_, att2d, true, false, 1.0f, 1.0f);
    ready(p.o);
    ops::matmul(datt_.t.view({N, Hq * D}), dx_, param(p.o), false, false);
    if (sp() > 1) {
      // The all-to-alls' backward: the other direction.
      seq_->to_heads(datth_.t, datt_);
      ops::attention_backward(dqh_.t, dkh_.t, dvh_.t, datth_, a.qh, a.kh, a.vh, a.atth, a.lse,
                              packed_ ? &starts_t_ : nullptr);
      seq_->to_sequence(dq_.t, dqh_);
      if (const int r = kv_repeat(); r > 1) {
        seq_->to_sequence(kvx_.t, dkh_);
        sum_head_replicas(dk_.t, kvx_, kvx_tmp_.t, r);
        seq_->to_sequence(kvx_.t, dvh_);
        sum_head_replicas(dv_.t, kvx_, kvx_tmp_.t, r);
      } else {
        seq_->to_sequence(dk_.t, dkh_);
        seq_->to_sequence(dv_.t, dvh_);
      }
    } else {
      ops::attention_backward(dq_.t, dk_.t, dv_.t, datt_, a.q, a.k, a.v, a.att, a.lse, packed_ ? &starts_t_ : nullptr);
    }
    const Tensor* positions = packed_ ? &positions_t_ : nullptr;
    ops::rope_backward(dq_.t, dq_, rope, pos0, positions);
    ops::rope_backward(dk_.t, dk_, rope, pos0, positions);
    Tensor dq2 = dq_.t.view({N, Hq * D}), dk2 = dk_.t.view({N, Hkv * D});
    Tensor dv2 = dv_.t.view({N, Hkv * D});
    // ln1 shares the scratch with ln2, which the MLP's gradients have used.
    if (pointwise_) ops::rmsnorm_forward(a.ln1.t, a.rstd1.t, x, param(p.ln1), eps);
    ops::matmul(grad(p.v), dv2, a.ln1, true, false, 1.0f, 1.0f);
    ready(p.v);
    ops::matmul(grad(p.k), dk2, a.ln1, true, false, 1.0f, 1.0f);
    ready(p.k);
    ops::matmul(grad(p.q), dq2, a.ln1, true, false, 1.0f, 1.0f);
    ready(p.q);
    ops::matmul(dln_.t, dq2, param(p.q), false, false);
    ops::matmul(dln_.t, dk2, param(p.k), false, false, 1.0f, 1.0f);
    ops::matmul(dln_.t, dv2, param(p.v), false, false, 1.0f, 1.0f);
    // dx = d(x) of this layer = d(residual) below.
    ops::rmsnorm_backward(dx_.t, grad(p.ln1), dln_, x, param(p.ln1), a.rstd1, true);
    ready(p.ln1);
  }
  buf_->before_use(kEmbeddingLayer, WeightUse::Backward);
  ops::embedding_backward(grad(embed_), tokens_, dx_);
  ready(embed_);
}

}  // namespace weft
