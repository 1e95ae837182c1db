// weft worker configuration: one YAML file parsed once into these typed
// structs; nothing below train/config sees YAML. Every field has a default, so
// an empty file (or `preset: tiny`) is a complete config. validate() rejects
// impossible combinations with a ConfigError naming the field path
// (e.g. "model.n_heads: 6 does not divide model.d_model 128").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "weft_contract.h"
#include "weft_presets.h"
#include "weft_modes.h"

namespace weft {

// The named modes (contract/weft_modes.h), parsed from their YAML spellings.
using contract::Attention;
using contract::CheckpointAsync;
using contract::CommBackend;
using contract::ComputeDevice;
using contract::DataSource;
using contract::DocumentBoundaries;
using contract::Recompute;
using contract::Strategy;
using contract::WorkingDtype;
using contract::WdpStrategy;
using contract::ZeroOverlap;

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
  // A problem of one field: what() is "where: path: problem"; `path` (the
  // field path, "" for the document as a whole) and `problem` are kept apart
  // for a reader that names the field its own way (the operator's
  // "spec.worker.<path>").
  ConfigError(const std::string& what, std::string field_path, std::string field_problem)
      : std::runtime_error(what), path(std::move(field_path)), problem(std::move(field_problem)) {}
  std::string path;
  std::string problem;
};

// RoPE frequency scaling (model.rope_scaling; Hugging Face's rope_scaling /
// rope_parameters). "default": unscaled, every number below 0 (unset).
// "llama3": Llama 3.1/3.2's wavelength bands (kernels/rope_freqs.h), every
// number required: factor >= 1, 0 < low_freq_factor < high_freq_factor.
struct RopeScalingConfig {
  std::string rope_type = "default";         // "default" | "llama3"
  double factor = 0;                         // low frequencies divided by this
  double low_freq_factor = 0;                // wavelengths above original / this are scaled
  double high_freq_factor = 0;               // wavelengths below original / this are kept
  int original_max_position_embeddings = 0;  // the context the model was pretrained at

  bool operator==(const RopeScalingConfig&) const = default;
};

struct ModelConfig {
  int vocab_size = 256;       // tokens; must cover the data's token ids
  int d_model = 128;          // hidden size C
  int n_layers = 4;           // decoder blocks
  int n_heads = 4;            // query heads; d_model % n_heads == 0 unless head_dim is set
  int n_kv_heads = 2;         // key/value heads; n_heads % n_kv_heads == 0
  int ffn_hidden = 0;         // SwiGLU width F; 0 = round_up(8*d_model/3, 32)
  int max_seq_len = 256;      // longest sequence the model is trained on
  double rope_theta = 10000;  // RoPE base
  double norm_eps = 1e-5;     // RMSNorm epsilon
  bool tie_embeddings = false;  // lm_head shares model.embed_tokens.weight
  double init_std = 0.02;       // normal init of linear/embedding weights
  // YAML model.head_dim: each head's width D (q_proj is [n_heads * D, d_model]);
  // 0 = d_model / n_heads. Read head_dim(), which resolves it.
  int explicit_head_dim = 0;
  RopeScalingConfig rope_scaling;  // model.rope_scaling

  // 0 while n_heads is not positive (validate() refuses it by name).
  int head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : n_heads > 0 ? d_model / n_heads : 0; }
  int ffn() const { return contract::ffn_width(ffn_hidden, d_model); }

  bool operator==(const ModelConfig&) const = default;
};

struct TrainConfig {
  int steps = 300;       // optimizer steps
  int micro_batch = 16;  // sequences per micro-batch per rank
  int seq_len = 64;      // tokens per sequence (<= model.max_seq_len)
  int grad_accum = 1;    // micro-batches per optimizer step
  uint64_t seed = 42;    // parameter init and data order
  int log_every = 10;    // progress line every N steps (0 = only the summary)
  std::string out_dir = "runs/weft";  // summary.json and logs
  // Working dtype of weights and activations: "f32", "bf16" (fp32 master
  // weights in the optimizer, fp32 gradients) or "auto" (bf16 on cuda, f32 on
  // cpu; resolve() makes it one of them). The CPU runs bf16 too (stored bf16,
  // computed in fp32).
  contract::WorkingDtype dtype = contract::WorkingDtype::Auto;
  // MiB of LM-head logits ([rows, vocab] in the working dtype) computed at a
  // time, with the loss, and recomputed chunk by chunk in backward, so the
  // whole [tokens, vocab] never exists: a memory lever for large vocabularies
  // that costs one more LM-head matmul per micro-batch. 0 (YAML `auto`, the
  // default): 64 MiB on cuda, the whole micro-batch at once on the CPU.
  double logits_chunk_mb = 0;
  // Activations formed again in backward instead of kept: "pointwise" (every
  // block's two RMSNorm outputs and its SwiGLU product, [tokens, 2 d + ffn]
  // per block, for two norm forwards and one SwiGLU forward per block in
  // backward; bit-identical results), "none", or "auto" (the default:
  // pointwise on cuda, none on the CPU; resolve() makes it one of them).
  contract::Recompute recompute = contract::Recompute::Auto;
  // Which CUDA kernels run attention: "auto" (cuDNN's fused flash attention
  // where it can run the call, weft's SIMT kernels otherwise: a per-call
  // choice of the kernels, so it stays auto after resolve()), "cudnn" (cuDNN
  // or an error, never a silent fallback) or "simt". WEFT_ATTENTION overrides
  // it. The CPU has one attention and ignores it.
  contract::Attention attention = contract::Attention::Auto;

  bool operator==(const TrainConfig&) const = default;
};

struct OptimConfig {
  double lr = 3e-3;            // peak learning rate
  double min_lr_ratio = 0.1;   // cosine decays to lr * min_lr_ratio
  int warmup_steps = 20;       // linear warmup from 0
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;   // decoupled; linear weights only by default
  bool decay_norms_and_embeddings = false;  // also decay norms and embeddings
  double grad_clip = 1.0;      // global L2 norm clip; 0 disables

  bool operator==(const OptimConfig&) const = default;
};

struct DataConfig {
  contract::DataSource source = contract::DataSource::Synthetic;  // "synthetic" | "shards"
  std::string shards;                // glob of llm.c token shards (source: shards)
  uint64_t seed = 1234;              // synthetic Markov chain
  int branching = 4;                 // successors per state in the synthetic chain
  // Packed documents: "none" (attention is causal over the whole sequence)
  // or "eos" (each eos_token ends a document: attention stays inside a
  // document and RoPE positions restart after each eos).
  DocumentBoundaries document_boundaries = DocumentBoundaries::None;
  int eos_token = -1;                // the token that ends a document; -1 = none
  bool packs_documents() const { return document_boundaries == DocumentBoundaries::Eos; }

  bool operator==(const DataConfig&) const = default;
};

// Held-out evaluation (eval.every > 0): the same `batches` micro-batches of
// held-out data at every evaluation, forward only, the mean loss over them
// (docs/user-guide/evaluation.md).
struct EvalConfig {
  int every = 0;       // steps between evaluations (and after the last step); 0 = off
  int batches = 8;     // micro-batches of train.micro_batch x train.seq_len per evaluation
  // Glob of held-out llm.c shards (e.g. "data/*_val_*.bin"); needed with
  // data.source shards. Synthetic data: a held-out stream of the same chain,
  // rows the training never samples.
  std::string shards;
  bool allow_training_shards = false;  // evaluate on files the training also reads (refused otherwise)

  bool operator==(const EvalConfig&) const = default;
};

struct CheckpointConfig {
  std::string dir;      // empty = <train.out_dir>/checkpoints (no checkpoints at all: save: false)
  int every = 0;        // steps between checkpoints; 0 = only at the end / on signal
  int keep = 3;         // newest checkpoints kept
  bool resume = true;   // resume from dir/latest when present
  // false: this run writes no checkpoint at all, not even at its end or on a
  // stop (benchmarks, throwaway runs); it still resumes from one (`resume`).
  bool save = true;
  // Model weights are split into model-0000k-of-0000N.safetensors plus
  // model.safetensors.index.json (the Hugging Face layout) when they exceed
  // this many MB (10^6 bytes, as HF's "5GB").
  double max_shard_mb = 5000;
  // Sharded checkpoints (ZeRO, ISP on several ranks): write each rank's file
  // in the background while training goes on, from a host snapshot of the
  // rank's part (weights and optimizer state: about 3/N of the model's f32
  // bytes of host memory). auto: on when training on a GPU (the snapshot then
  // costs host memory, not the device's), off on the CPU, where host memory
  // is the training memory (resolve() makes it true or false). true | false
  // force it.
  contract::CheckpointAsync async = contract::CheckpointAsync::Auto;

  bool operator==(const CheckpointConfig&) const = default;
};

// ZeRO (parallel.strategy: zero): each data-parallel rank owns shard r of
// every gradient bucket and the optimizer state of its shards only.
struct ZeroConfig {
  int stage = 1;  // 1: optimizer state sharded; 2: also the gradients kept between micro-batches
  // When the optimizer step runs against the reduce-scatters: "none" (after all
  // finished), "after_backward" (as each completes, once backward is done),
  // "interleaved" (as each completes, while backward continues).
  contract::ZeroOverlap overlap = contract::ZeroOverlap::Interleaved;
  // The all-gather of updated parameters overlaps the next forward (a layer
  // waits only for its bucket's gather); false: the step ends gathered.
  bool overlap_param_gather = false;

  bool operator==(const ZeroConfig&) const = default;
};

// ISP (parallel.strategy: isp): weights sharded over wp ranks and gathered per
// block, sequences split over sp ranks (docs/architecture/isp.md).
struct IspConfig {
  bool prefetch = true;     // gather block i+1 (backward: i-1) while block i computes
  int recompute_blocks = 0;  // leading blocks that recompute activations in backward
  // How the weight shards' gradients are reduced over wdp (ranks holding the
  // same shard): "dp" (bucketed all-reduce) or "zero" (parallel.zero settings).
  contract::WdpStrategy wdp_strategy = contract::WdpStrategy::Dp;

  bool operator==(const IspConfig&) const = default;
};

// A number field's YAML `auto` (parallel.bucket_cap_mb,
// train.logits_chunk_mb), written 0 in the struct: such a field takes only
// `auto` or a number > 0, so a configured 0 cannot mean auto by accident.
inline constexpr double kAuto = 0;
inline constexpr double kAutoBucketCap = kAuto;

struct ParallelConfig {
  contract::Strategy strategy = contract::Strategy::Dp;  // "dp" | "zero" | "isp"
  int sp = 1;                       // sequence-parallel ranks (ISP)
  int wp = 1;                       // weight-parallel ranks (ISP)
  // Gradient bucket cap in MiB; kAutoBucketCap (YAML `auto`, the default)
  // sizes buckets from the model (parallel/grad_buckets.h).
  double bucket_cap_mb = kAutoBucketCap;
  double first_bucket_mb = 0;       // smaller first bucket; 0 = same as a numeric cap, the rule's when auto
  bool overlap = true;              // launch bucket reductions during backward (dp, zero, isp over wdp); false: after it
  bool bf16_wire = false;           // all-reduce gradients in bf16
  ZeroConfig zero;                  // strategy zero, and isp with isp.wdp_strategy zero
  IspConfig isp;                    // strategy isp only
  // File holding a bucket cap in MiB (the operator's tuner writes it through a
  // ConfigMap). Rank 0 re-reads it when it changes; all ranks switch at the
  // same step boundary. Empty = no tuning.
  std::string bucket_cap_file;

  bool operator==(const ParallelConfig&) const = default;
};

// comm.simulate: a network emulator for experiments on one machine. The Gloo
// communicator sleeps per message (latency + bytes / bandwidth) on its comm
// thread, so collectives take as long as on the modelled network while
// compute still overlaps them. Not a network simulator: no contention, no
// topology. Off while both are 0.
struct CommSimulateConfig {
  double latency_us = 0;      // per message, >= 0
  double bandwidth_gbps = 0;  // Gb/s per link; 0 = unlimited

  bool enabled() const { return latency_us > 0 || bandwidth_gbps > 0; }
  bool operator==(const CommSimulateConfig&) const = default;
};

struct CommConfig {
  // "auto" (nccl on cuda, gloo on cpu; resolve() makes it one of them) |
  // "gloo" | "nccl".
  contract::CommBackend backend = contract::CommBackend::Auto;
  double timeout_s = 300;             // per-collective deadline
  double rendezvous_timeout_s = 600;  // how long ranks wait for each other
  CommSimulateConfig simulate;        // comm.simulate.{latency_us, bandwidth_gbps}
  // Concurrent Gloo lanes per group (1 = one FIFO; N >= 2: N bulk lanes plus
  // an express lane for small collectives). See comm/gloo_communicator.h.
  int lanes = 2;

  bool operator==(const CommConfig&) const = default;
};

struct MetricsConfig {
  int port = contract::kMetricsBasePort;  // Prometheus exposer port (+ LOCAL_RANK); 0 disables
  double peak_tflops = 0;   // per-rank peak for weft_mfu; 0 = unknown (MFU reported as 0)
  // Seconds the metrics server keeps serving after the last step of a run
  // that ends normally, so a scraper's next scrape still reads that step.
  // -1 (auto): 15 s (the chart's scrape interval) when the operator started
  // the rank (WEFT_TERMINATION_LOG set), 0 in standalone runs. A signal ends it.
  double linger_seconds = -1;

  bool operator==(const MetricsConfig&) const = default;
};

struct WorkerConfig {
  contract::ComputeDevice device = contract::ComputeDevice::Cpu;  // "cpu" | "cuda"
  // A Hugging Face Llama directory (config.json + model.safetensors, or shards
  // with model.safetensors.index.json) whose weights a fresh run starts from
  // (step 0, fresh optimizer); a resumable checkpoint takes precedence. The
  // model section is taken from its config.json except for fields the YAML
  // sets (config/hf_config.h). Empty = random init.
  std::string init_from;
  ModelConfig model;
  TrainConfig train;
  OptimConfig optim;
  DataConfig data;
  CheckpointConfig checkpoint;
  EvalConfig eval;
  ParallelConfig parallel;
  CommConfig comm;
  MetricsConfig metrics;

  bool operator==(const WorkerConfig&) const = default;
};

// Ranges of the numbers a config can hold beyond which the arithmetic that
// uses them (deadlines, sleeps, byte counts, loops) would overflow or never
// end; validate() refuses a value outside them by its field path
// (docs/user-guide/worker-config.md, "Ranges").
inline constexpr double kMaxSeconds = 86400;            // comm.timeout_s, comm.rendezvous_timeout_s: one day
inline constexpr int kMaxGradAccum = 16384;             // train.grad_accum, also as scaled to the planned world
inline constexpr int kMaxEvalBatches = 1'000'000;       // eval.batches
inline constexpr double kMaxLogitsChunkMb = 1 << 20;    // train.logits_chunk_mb: 1 TiB
inline constexpr double kMaxShardMb = 1e9;              // checkpoint.max_shard_mb: 1 PB
inline constexpr double kMaxSimulatedLatencyUs = 1e6;   // comm.simulate.latency_us: 1 s per message
inline constexpr double kMinSimulatedGbps = 0.001;      // comm.simulate.bandwidth_gbps when not 0: 1 Mb/s
inline constexpr double kMaxPeakTflops = 1e6;           // metrics.peak_tflops
inline constexpr double kMaxSimulatedGbps = 1e6;        // comm.simulate.bandwidth_gbps: 1 Pb/s
// Training numbers beyond which a run diverges at its first steps (a NaN
// loss, exit 5) or its arithmetic overflows: refused at start instead.
inline constexpr double kMaxLr = 10;                    // optim.lr
inline constexpr double kMaxWeightDecay = 10;           // optim.weight_decay
inline constexpr double kMaxGradClip = 1e6;             // optim.grad_clip (0: off)
inline constexpr double kMaxEps = 1;                    // optim.eps, model.norm_eps
inline constexpr double kMaxInitStd = 10;               // model.init_std
inline constexpr double kMaxRopeTheta = 1e12;           // model.rope_theta

// Built-in presets: "tiny" (CPU demo, about a minute on 2 cores) and
// "gpt2-124m" (GPT-2 small sized Llama). Throws ConfigError for other names.
WorkerConfig preset(const std::string& name);

// Parses YAML text over a base config. A top-level `preset: NAME` key selects
// the base first. Unknown keys, wrong types and bad values throw ConfigError
// naming the field path. `origin` names the file in messages.
// A non-empty `init_from` (the --init-from flag) replaces the YAML's before the
// model section is resolved against that directory's config.json.
WorkerConfig parse_config(const std::string& yaml_text, const std::string& origin = "config",
                          const std::string& init_from = "");
WorkerConfig load_config_file(const std::string& path, const std::string& init_from = "");

// The config a rank would run with `yaml_text` as its config file and `env`
// as its environment, read where the rank's files are not (weft-operator,
// from a TrainingJob's spec.worker): parse_config, apply_env_overrides,
// validate and resolve, the steps weft-worker takes. With init_from set, the
// model's shape is in that directory's config.json on the rank's host: the
// fields are parsed as usual (names, types, values) and the rules that do not
// read the model section apply; the others are the worker's when it starts
// (`shape_known` false, nothing resolved). A problem the overrides cause is an EnvConfigError (its message
// names the variable).
struct ConfigElsewhere {
  WorkerConfig cfg;
  bool shape_known = true;
};
struct EnvConfigError : ConfigError {
  using ConfigError::ConfigError;
};
ConfigElsewhere read_config_elsewhere(const std::string& yaml_text, const std::string& origin,
                                      const std::map<std::string, std::string>& env);

// Applies WEFT_* environment overrides (WEFT_STEPS, WEFT_BUCKET_CAP_MB,
// WEFT_BUCKET_CAP_FILE, WEFT_CHECKPOINT_DIR, WEFT_METRICS_PORT, WEFT_DEVICE,
// WEFT_OUT_DIR, WEFT_ATTENTION) from env.
void apply_env_overrides(WorkerConfig& cfg, const std::map<std::string, std::string>& env);

// Throws ConfigError naming the first impossible field.
void validate(const WorkerConfig& cfg);

// The one place an `auto` mode becomes concrete, after the env overrides and
// validate(): comm.backend (nccl on cuda, gloo on cpu), train.dtype (bf16 on
// cuda, f32 on cpu), train.recompute (pointwise on cuda, none on cpu) and
// checkpoint.async (true on cuda, false on cpu). Nothing after it decides
// them again; --print-config shows the result. Idempotent: a resolved config
// stays as it is. Left as they are, because they are not decided from the
// config: train.attention auto (the kernels choose per call, by what cuDNN
// can run), parallel.bucket_cap_mb auto (sized from the model's parameters
// when the buckets are built, and re-read from parallel.bucket_cap_file),
// train.logits_chunk_mb auto and metrics.linger_seconds auto (which reads
// whether the operator started the rank).
void resolve(WorkerConfig& cfg);
WorkerConfig resolved(WorkerConfig cfg);
// Whether resolve() has nothing left to do.
bool is_resolved(const WorkerConfig& cfg);
// validate() with every eval.* rule applied whether or not eval.every is set:
// weft-worker --eval evaluates whatever eval.every says.
void validate_for_eval(const WorkerConfig& cfg);

// A gang smaller than the one its global batch was planned for (an elastic
// job on fewer pods: WEFT_PLANNED_WORLD_SIZE): multiplies train.grad_accum by
// planned_world / world, so that every optimizer step trains on the same
// global samples as at the planned size (a sample's row is a function of
// (step * grad_accum + micro) * data ranks + rank, and the data ranks shrink
// by the same factor). Throws ConfigError naming both sizes when
// train.grad_accum * planned_world is not a multiple of world. Returns the
// grad_accum the run had before (equal to the new one at the planned size).
int scale_to_planned_world(WorkerConfig& cfg, int world, int planned_world);

// The first rule a config breaks: the field path it is charged to and what is
// wrong ("6 does not divide model.d_model 128"); nullopt when the config is
// valid. validate() throws "path: message" from this; parse_config adds the
// file and line where that field was set.
struct ConfigProblem {
  std::string path;
  std::string message;
};
std::optional<ConfigProblem> find_problem(const WorkerConfig& cfg);
// `evaluating`: the eval.* rules apply even with eval.every 0 (--eval).
std::optional<ConfigProblem> find_problem(const WorkerConfig& cfg, bool evaluating);
// `shape_known` false: the model section is not the model's (init_from's
// config.json is read elsewhere), so every rule that reads it is skipped and
// the rest apply.
std::optional<ConfigProblem> find_problem(const WorkerConfig& cfg, bool evaluating, bool shape_known);

// The run fingerprint's settings: every field as (path, value text) in the
// field table's order, except the per-rank ones (kPerRankSettings: a rank's
// own paths and ports), which may differ between the ranks of one job. Every
// other one must be the same on every rank (comm/run_fingerprint.h).
inline constexpr const char* kPerRankSettings[] = {
    "train.out_dir",             // rank 0's summary.json; every rank's own scratch
    "checkpoint.dir",            // the mount path of the checkpoint volume on the rank's host
    "parallel.bucket_cap_file",  // only rank 0 reads it
    "metrics.port",              // each rank serves its own metrics
    "metrics.peak_tflops",       // the rank's own device's peak
    "comm.rendezvous_timeout_s", // how long this rank waits for the others
};
std::vector<std::pair<std::string, std::string>> shared_settings(const WorkerConfig& cfg);

// Round-trips through parse_config (used in checkpoints and logs).
std::string to_yaml(const WorkerConfig& cfg);

}  // namespace weft
