// Validation rules of WorkerConfig. Each rule is charged to one field path, the
// one a user most likely has to change, so parse_config can point at the line
// where that field was written. Rules that need the world size (world divisible
// by sp * wp, ...) live where the world is known, not here.
#include <charconv>
#include <cmath>
#include <initializer_list>

#include "config/config.h"
#include "weft_contract.h"

namespace weft {
namespace {

std::string num(int v) { return std::to_string(v); }

// Shortest text that reads back as the same double (0.003, not 0.0030000001).
std::string num(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// A bound as a reader writes it: 1000000, not 1e+06.
std::string whole(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  return std::string(buf, r.ptr);
}

// Collects the first problem; later checks are skipped once one is found so
// that derived rules (e.g. head_dim) never run on values already known bad.
class Checker {
 public:
  bool ok() const { return !problem_; }
  std::optional<ConfigProblem> result() { return std::move(problem_); }

  void fail(const std::string& path, const std::string& message) {
    if (!problem_) problem_ = ConfigProblem{path, message};
  }
  // `cond` must hold; otherwise `path: message`.
  void require(bool cond, const std::string& path, const std::string& message) {
    if (!cond) fail(path, message);
  }
  // Written as !(v > 0) so that NaN is rejected too.
  void positive(double v, const std::string& path) {
    require(v > 0, path, "must be > 0, got " + num(v));
  }
  void non_negative(double v, const std::string& path) {
    require(v >= 0, path, "must be >= 0, got " + num(v));
  }
  void in_closed(double v, double lo, double hi, const std::string& path) {
    require(v >= lo && v <= hi, path,
            "must be in [" + num(lo) + ", " + num(hi) + "], got " + num(v));
  }
  void in_half_open(double v, double lo, double hi, const std::string& path) {
    require(v >= lo && v < hi, path,
            "must be in [" + num(lo) + ", " + num(hi) + "), got " + num(v));
  }
  // A number that later becomes a deadline, a sleep or a byte count: above
  // `hi` it would overflow that arithmetic (1e10 s of timeout used to wrap
  // into a deadline in the past, a false "collective timeout").
  void at_most(double v, double hi, const std::string& path, const std::string& what = "") {
    require(v <= hi, path, "must be <= " + whole(hi) + what + ", got " + num(v));
  }
  void at_most(int v, int hi, const std::string& path, const std::string& what = "") {
    require(v <= hi, path, "must be <= " + num(hi) + what + ", got " + num(v));
  }
  // Seconds of a deadline: > 0, whole milliseconds (a smaller one would be
  // 0 ms, an immediate timeout), at most one day.
  void seconds(double v, const std::string& path) {
    positive(v, path);
    if (!ok()) return;
    require(v >= 0.001, path, "must be >= 0.001 (1 ms), got " + num(v));
    at_most(v, kMaxSeconds, path, " (one day)");
  }

 private:
  std::optional<ConfigProblem> problem_;
};

// The rope types weft implements (kernels/rope_freqs.h); any other is refused
// by name rather than trained as unscaled RoPE.
void check_rope_scaling(Checker& c, const RopeScalingConfig& r) {
  const std::string p = "model.rope_scaling.";
  c.require(r.rope_type == "default" || r.rope_type == "llama3", p + "rope_type",
            "'" + r.rope_type + "' is not implemented (weft implements 'default', unscaled, and 'llama3')");
  const std::pair<const char*, double> numbers[] = {{"factor", r.factor},
                                                     {"low_freq_factor", r.low_freq_factor},
                                                     {"high_freq_factor", r.high_freq_factor},
                                                     {"original_max_position_embeddings",
                                                      static_cast<double>(r.original_max_position_embeddings)}};
  if (r.rope_type == "default") {
    for (const auto& [name, v] : numbers)
      c.require(v == 0, p + name, num(v) + " is set, but model.rope_scaling.rope_type is 'default' (unscaled); "
                                           "set rope_type: llama3 or remove it");
    return;
  }
  c.require(std::isfinite(r.factor) && r.factor >= 1, p + "factor",
            "must be >= 1 with rope_type llama3 (low frequencies are divided by it), got " + num(r.factor));
  c.require(std::isfinite(r.low_freq_factor) && r.low_freq_factor > 0, p + "low_freq_factor",
            "must be > 0 with rope_type llama3, got " + num(r.low_freq_factor));
  c.require(std::isfinite(r.high_freq_factor) && r.high_freq_factor > r.low_freq_factor, p + "high_freq_factor",
            "must be > model.rope_scaling.low_freq_factor " + num(r.low_freq_factor) +
                " with rope_type llama3 (the band between them is interpolated), got " + num(r.high_freq_factor));
  c.require(r.original_max_position_embeddings > 0, p + "original_max_position_embeddings",
            "must be > 0 with rope_type llama3, got " + num(r.original_max_position_embeddings));
}

void check_model(Checker& c, const ModelConfig& m) {
  c.require(m.vocab_size >= 2, "model.vocab_size", "must be >= 2, got " + num(m.vocab_size));
  c.positive(m.d_model, "model.d_model");
  c.positive(m.n_layers, "model.n_layers");
  c.positive(m.n_heads, "model.n_heads");
  c.positive(m.n_kv_heads, "model.n_kv_heads");
  c.non_negative(m.ffn_hidden, "model.ffn_hidden");
  c.positive(m.max_seq_len, "model.max_seq_len");
  c.positive(m.rope_theta, "model.rope_theta");
  c.at_most(m.rope_theta, kMaxRopeTheta, "model.rope_theta");
  c.positive(m.norm_eps, "model.norm_eps");
  c.at_most(m.norm_eps, kMaxEps, "model.norm_eps");
  c.positive(m.init_std, "model.init_std");
  c.at_most(m.init_std, kMaxInitStd, "model.init_std");
  c.require(m.explicit_head_dim >= 0, "model.head_dim",
            "must be >= 0 (0: d_model / n_heads), got " + num(m.explicit_head_dim));
  if (!c.ok()) return;
  c.require(m.explicit_head_dim > 0 || m.d_model % m.n_heads == 0, "model.n_heads",
            num(m.n_heads) + " does not divide model.d_model " + num(m.d_model) + " (or set model.head_dim)");
  c.require(m.n_heads % m.n_kv_heads == 0, "model.n_kv_heads",
            num(m.n_kv_heads) + " does not divide model.n_heads " + num(m.n_heads));
  if (!c.ok()) return;
  // RoPE rotates (even, odd) pairs of each head's channels.
  if (m.explicit_head_dim > 0)
    c.require(m.head_dim() % 2 == 0, "model.head_dim",
              num(m.head_dim()) + " is odd; RoPE needs an even head dimension");
  else
    c.require(m.head_dim() % 2 == 0, "model.n_heads",
              "head_dim = d_model / n_heads = " + num(m.d_model) + " / " + num(m.n_heads) +
                  " = " + num(m.head_dim()) + " is odd; RoPE needs an even head dimension");
  check_rope_scaling(c, m.rope_scaling);
}

// `m` is null when the model's shape is not known here (init_from's
// config.json read elsewhere): the rules that read it are skipped.
void check_train(Checker& c, const TrainConfig& t, const ModelConfig* m) {
  c.positive(t.steps, "train.steps");
  c.positive(t.micro_batch, "train.micro_batch");
  c.positive(t.seq_len, "train.seq_len");
  if (m)
    c.require(t.seq_len <= m->max_seq_len, "train.seq_len",
              num(t.seq_len) + " exceeds model.max_seq_len " + num(m->max_seq_len));
  c.positive(t.grad_accum, "train.grad_accum");
  c.at_most(t.grad_accum, kMaxGradAccum, "train.grad_accum", " micro-batches per step");
  c.non_negative(t.log_every, "train.log_every");
  c.require(!t.out_dir.empty(), "train.out_dir", "must not be empty");
  c.require(std::isfinite(t.logits_chunk_mb) && t.logits_chunk_mb >= 0, "train.logits_chunk_mb",
            "expected auto or a number > 0, got " + num(t.logits_chunk_mb));
  c.at_most(t.logits_chunk_mb, kMaxLogitsChunkMb, "train.logits_chunk_mb", " MiB");
}

void check_optim(Checker& c, const OptimConfig& o) {
  c.positive(o.lr, "optim.lr");
  c.at_most(o.lr, kMaxLr, "optim.lr");
  c.in_closed(o.min_lr_ratio, 0, 1, "optim.min_lr_ratio");
  // warmup_steps > steps is allowed: the run simply ends during warmup.
  c.non_negative(o.warmup_steps, "optim.warmup_steps");
  c.in_half_open(o.beta1, 0, 1, "optim.beta1");
  c.in_half_open(o.beta2, 0, 1, "optim.beta2");
  c.positive(o.eps, "optim.eps");
  c.at_most(o.eps, kMaxEps, "optim.eps");
  c.non_negative(o.weight_decay, "optim.weight_decay");
  c.at_most(o.weight_decay, kMaxWeightDecay, "optim.weight_decay");
  c.non_negative(o.grad_clip, "optim.grad_clip");
  c.at_most(o.grad_clip, kMaxGradClip, "optim.grad_clip", " (0 turns clipping off)");
}

// Packed documents (data.document_boundaries eos): every kernel implements
// them but cuDNN's attention.
void check_documents(Checker& c, const WorkerConfig& cfg, bool shape_known) {
  const DataConfig& d = cfg.data;
  if (!d.packs_documents()) {
    c.require(d.eos_token == -1, "data.eos_token",
              "is set (" + num(d.eos_token) + ") but data.document_boundaries is 'none'; set it to eos to keep "
              "attention inside documents, or remove data.eos_token");
    return;
  }
  c.require(d.eos_token >= 0 && (!shape_known || d.eos_token < cfg.model.vocab_size), "data.eos_token",
            d.eos_token == -1 ? std::string("must be set with data.document_boundaries eos (the token that ends a "
                                            "document, e.g. 50256 for GPT-2's <|endoftext|>)")
                              : num(d.eos_token) + " is outside the vocabulary (model.vocab_size " +
                                    num(cfg.model.vocab_size) + ")");
  c.require(cfg.device == ComputeDevice::Cpu || cfg.train.attention != contract::Attention::Cudnn,
            "data.document_boundaries",
            "'eos' runs on weft's SIMT attention kernels on a GPU (cuDNN's graphs here have no per-document "
            "mask), but train.attention is cudnn; set it to auto or simt");
}

void check_data(Checker& c, const DataConfig& d, const ModelConfig* m) {
  if (d.source == DataSource::Shards) {
    c.require(!d.shards.empty(), "data.shards",
              "data.source is 'shards' but no glob of shard files is given");
  }
  if (d.source == DataSource::Synthetic) {
    // Shards named while the source stays at its default would train on the
    // synthetic chain without a word.
    c.require(d.shards.empty(), "data.shards",
              "is set ('" + d.shards + "') but data.source is 'synthetic'; set data.source: shards to train on "
              "them, or remove data.shards");
    c.require(d.branching >= 1, "data.branching", "must be >= 1, got " + num(d.branching));
    if (m)
      c.require(d.branching <= m->vocab_size, "data.branching",
                num(d.branching) + " exceeds model.vocab_size " + num(m->vocab_size) +
                    " (successors of a state are distinct tokens)");
  }
}

void check_checkpoint(Checker& c, const CheckpointConfig& k) {
  c.non_negative(k.every, "checkpoint.every");
  c.require(k.keep >= 1, "checkpoint.keep", "must be >= 1, got " + num(k.keep));
  c.require(k.save || k.every == 0, "checkpoint.every",
            "is " + num(k.every) + " but checkpoint.save is false (no checkpoint is written): set one of them");
  c.positive(k.max_shard_mb, "checkpoint.max_shard_mb");
  c.at_most(k.max_shard_mb, kMaxShardMb, "checkpoint.max_shard_mb", " MB");
}

void check_eval(Checker& c, const EvalConfig& e, const DataConfig& d, bool evaluating) {
  c.non_negative(e.every, "eval.every");
  // Checked even when nothing evaluates: a value that would be refused the
  // day eval.every is set is refused now.
  c.require(e.batches >= 1, "eval.batches", "must be >= 1, got " + num(e.batches));
  c.at_most(e.batches, kMaxEvalBatches, "eval.batches", " micro-batches per evaluation");
  if (!evaluating) return;
  if (d.source == DataSource::Shards)
    c.require(!e.shards.empty(), "eval.shards",
              "data.source is 'shards': name the held-out shards to evaluate on (llm.c writes them as *_val_*.bin)");
  if (d.source == DataSource::Synthetic)
    c.require(e.shards.empty(), "eval.shards",
              "is set ('" + e.shards + "') but data.source is 'synthetic', whose held-out stream needs no files");
  c.require(e.allow_training_shards || e.shards.empty() || e.shards != d.shards, "eval.shards",
            "is data.shards ('" + d.shards + "'): evaluating on the training data measures memorising, not "
            "learning; name held-out shards, or set eval.allow_training_shards: true");
}

// ISP layouts the model cannot be split into. The world size is checked where
// it is known (RankGrid: parallel.sp and parallel.wp must divide it).
void check_isp(Checker& c, const ParallelConfig& p, const ModelConfig* shape, const TrainConfig& t) {
  if (shape)
    c.require(p.isp.recompute_blocks >= 0 && p.isp.recompute_blocks <= shape->n_layers, "parallel.isp.recompute_blocks",
              "must be in [0, model.n_layers = " + num(shape->n_layers) + "], got " + num(p.isp.recompute_blocks));
  else
    c.require(p.isp.recompute_blocks >= 0, "parallel.isp.recompute_blocks",
              "must be >= 0, got " + num(p.isp.recompute_blocks));
  if (p.sp > 1) {
    if (shape) {
      c.require(shape->n_heads % p.sp == 0, "parallel.sp",
                num(p.sp) + " does not divide model.n_heads " + num(shape->n_heads) + " (attention is split by heads)");
      // Fewer KV heads than sp ranks are replicated until each rank has one.
      c.require(shape->n_kv_heads % p.sp == 0 || p.sp % shape->n_kv_heads == 0, "parallel.sp",
                num(p.sp) + " neither divides model.n_kv_heads " + num(shape->n_kv_heads) +
                    " nor is a multiple of it (attention is split by heads; KV heads are replicated up to sp)");
    }
    c.require(t.seq_len % p.sp == 0, "parallel.sp",
              num(p.sp) + " does not divide train.seq_len " + num(t.seq_len) + " (each rank holds seq_len/sp positions)");
  }
  if (!shape) return;
  const ModelConfig& m = *shape;
  if (p.wp > 1) {
    const int D = m.n_heads > 0 ? m.head_dim() : 0;
    const std::pair<const char*, int> out_dims[] = {
        {"q_proj (n_heads * head_dim)", m.n_heads * D}, {"k_proj/v_proj (n_kv_heads * head_dim)", m.n_kv_heads * D},
        {"o_proj/down_proj (d_model)", m.d_model},      {"gate_proj/up_proj (ffn)", m.ffn()},
        {"embed_tokens/lm_head (vocab_size)", m.vocab_size}};
    for (const auto& [what, dim] : out_dims)
      c.require(dim % p.wp == 0, "parallel.wp",
                num(p.wp) + " does not divide the out-dimension " + num(dim) + " of " + what +
                    " (each rank holds 1/wp of its rows)");
    c.require(!m.tie_embeddings, "model.tie_embeddings",
              "tied embeddings are not supported with parallel.strategy isp and parallel.wp > 1");
  }
}

void check_parallel(Checker& c, const ParallelConfig& p, const ModelConfig* m, const TrainConfig& t) {
  c.require(p.sp >= 1, "parallel.sp", "must be >= 1, got " + num(p.sp));
  c.require(p.wp >= 1, "parallel.wp", "must be >= 1, got " + num(p.wp));
  c.require(p.strategy == Strategy::Isp || (p.sp == 1 && p.wp == 1), "parallel.strategy",
            "'" + std::string(contract::mode_name(p.strategy)) + "' keeps whole sequences and weights on every rank; parallel.sp " + num(p.sp) +
                " and parallel.wp " + num(p.wp) + " need strategy isp");
  if (p.strategy == Strategy::Isp) check_isp(c, p, m, t);
  c.require(p.bucket_cap_mb == 0 || contract::valid_bucket_cap_mb(p.bucket_cap_mb), "parallel.bucket_cap_mb",
            "must be auto or a number of MiB in (0, " + num(contract::kMaxBucketCapMb) + "], got " +
                num(p.bucket_cap_mb));
  c.require(p.first_bucket_mb == 0 || contract::valid_bucket_cap_mb(p.first_bucket_mb), "parallel.first_bucket_mb",
            "must be 0 (the cap, or the rule's first bucket when auto) or a number of MiB in (0, " +
                num(contract::kMaxBucketCapMb) + "], got " + num(p.first_bucket_mb));
  c.require(p.zero.stage == 1 || p.zero.stage == 2, "parallel.zero.stage",
            "must be 1 or 2, got " + num(p.zero.stage) + " (stage 3, sharded parameters, is not implemented)");
}

void check_comm(Checker& c, const CommConfig& k, ComputeDevice device) {
  c.require(!(k.backend == CommBackend::Nccl && device == ComputeDevice::Cpu), "comm.backend",
            "'nccl' needs device 'cuda' (device is 'cpu'); use 'gloo' or 'auto'");
  c.seconds(k.timeout_s, "comm.timeout_s");
  c.seconds(k.rendezvous_timeout_s, "comm.rendezvous_timeout_s");
  c.require(k.lanes >= 1 && k.lanes <= 16, "comm.lanes", "must be in [1, 16], got " + num(k.lanes));
  c.non_negative(k.simulate.latency_us, "comm.simulate.latency_us");
  c.at_most(k.simulate.latency_us, kMaxSimulatedLatencyUs, "comm.simulate.latency_us", " (1 s per message)");
  c.non_negative(k.simulate.bandwidth_gbps, "comm.simulate.bandwidth_gbps");
  // A trickle of bandwidth is a sleep of days per bucket: a hang, not an experiment.
  c.require(k.simulate.bandwidth_gbps == 0 || k.simulate.bandwidth_gbps >= kMinSimulatedGbps,
            "comm.simulate.bandwidth_gbps",
            "must be 0 (unlimited) or >= " + num(kMinSimulatedGbps) + " (1 Mb/s), got " + num(k.simulate.bandwidth_gbps));
  c.at_most(k.simulate.bandwidth_gbps, kMaxSimulatedGbps, "comm.simulate.bandwidth_gbps", " (1 Pb/s)");
  c.require(!(k.simulate.enabled() && k.backend == CommBackend::Nccl), "comm.simulate",
            "the network emulator runs on the Gloo communicator only (comm.backend gloo or auto on cpu)");
}

}  // namespace

std::optional<ConfigProblem> find_problem(const WorkerConfig& cfg) { return find_problem(cfg, false); }

std::optional<ConfigProblem> find_problem(const WorkerConfig& cfg, bool evaluating) {
  return find_problem(cfg, evaluating, /*shape_known=*/true);
}

std::optional<ConfigProblem> find_problem(const WorkerConfig& cfg, bool evaluating, bool shape_known) {
  Checker c;
  const ModelConfig* shape = shape_known ? &cfg.model : nullptr;
  if (shape) {
    check_model(c, cfg.model);
    // weft's CUDA attention holds a head's row in registers: D <= 128 (kernels/cuda/cuda_ops.h).
    if (c.ok() && cfg.device == ComputeDevice::Cuda)  // head_dim() divides by n_heads, checked above
      c.require(cfg.model.head_dim() <= 128, "model.head_dim",
                num(cfg.model.head_dim()) + " exceeds 128, the widest head weft's CUDA attention computes");
  }
  check_train(c, cfg.train, shape);
  check_optim(c, cfg.optim);
  check_data(c, cfg.data, shape);
  check_documents(c, cfg, shape_known);
  check_checkpoint(c, cfg.checkpoint);
  check_eval(c, cfg.eval, cfg.data, evaluating || cfg.eval.every > 0);
  check_parallel(c, cfg.parallel, shape, cfg.train);
  check_comm(c, cfg.comm, cfg.device);
  c.require(cfg.metrics.port >= 0 && cfg.metrics.port <= 65535, "metrics.port",
            "must be in [0, 65535], got " + num(cfg.metrics.port));
  c.require(cfg.metrics.peak_tflops >= 0, "metrics.peak_tflops",
            "must be >= 0, got " + num(cfg.metrics.peak_tflops));
  c.at_most(cfg.metrics.peak_tflops, kMaxPeakTflops, "metrics.peak_tflops");
  c.require(cfg.metrics.linger_seconds == -1 || (cfg.metrics.linger_seconds >= 0 && cfg.metrics.linger_seconds <= 600),
            "metrics.linger_seconds", "must be -1 (auto) or in [0, 600], got " + num(cfg.metrics.linger_seconds));
  return c.result();
}

void validate(const WorkerConfig& cfg) {
  if (auto p = find_problem(cfg)) throw ConfigError(p->path + ": " + p->message, p->path, p->message);
}

void validate_for_eval(const WorkerConfig& cfg) {
  if (auto p = find_problem(cfg, true)) throw ConfigError(p->path + ": " + p->message, p->path, p->message);
}

int scale_to_planned_world(WorkerConfig& cfg, int world, int planned_world) {
  const int before = cfg.train.grad_accum;
  if (planned_world <= 0 || planned_world == world) return before;
  const int64_t micro_steps = int64_t{before} * planned_world;
  if (world <= 0 || planned_world < world || micro_steps % world != 0)
    throw ConfigError("WEFT_PLANNED_WORLD_SIZE: the global batch is planned for " + std::to_string(planned_world) +
                      " ranks x train.grad_accum " + std::to_string(before) + "; " + std::to_string(world) +
                      " ranks cannot train on the same samples per step (train.grad_accum x planned ranks must be a "
                      "multiple of WORLD_SIZE)");
  // The planned gang's samples per step, trained by fewer ranks, come in
  // more micro-batches: bounded like train.grad_accum itself, or a planned
  // size far above the gang's (1048576 on 2) makes a first step that never ends.
  if (micro_steps / world > kMaxGradAccum)
    throw ConfigError("WEFT_PLANNED_WORLD_SIZE: " + std::to_string(planned_world) + " planned ranks x train.grad_accum " +
                      std::to_string(before) + " is " + std::to_string(micro_steps) + " micro-batches per step; " +
                      std::to_string(world) + " ranks would need train.grad_accum " +
                      std::to_string(micro_steps / world) + ", more than the " + std::to_string(kMaxGradAccum) +
                      " a step may have (the planned size is at most WORLD_SIZE x " +
                      std::to_string(kMaxGradAccum / before) + " here)");
  cfg.train.grad_accum = static_cast<int>(micro_steps / world);
  return before;
}

}  // namespace weft
