// How much memory one rank needs, from the handful of config fields that
// decide it: the arithmetic weft-worker checks against its limits before it
// builds the model (worker/train/memory_estimate.h) and weft-operator
// compares with a pod's memory limit before the pods start
// (operator/trainingjob/memory_policy.h). One copy, so both say the same
// number. Standard library only: neither side links anything for it.
//
// The estimate mirrors what the strategies allocate (worker/parallel/*.h): the
// working-dtype weights, the f32 gradients, the AdamW moments and f32 master
// copy (ZeRO: 1/N of them; ISP: of the weight shard), the activations the
// model keeps for backward (worker/model/llama.h, with recompute_blocks), the
// transient f32 full model of initialisation, and a runtime overhead.
#pragma once

#include <cstdint>
#include <string>

#include "weft_modes.h"

namespace weft::contract {

// Set to anything but "" or "0" in a rank's environment, the worker skips its
// memory check (for an estimate that is wrong about a setup); the operator
// then warns that the pod may be killed for memory instead of refused.
inline constexpr const char* kEnvSkipMemoryCheck = "WEFT_SKIP_MEMORY_CHECK";

// The fields the estimate reads, named as in the worker's config
// (worker/config/config.h). Whoever fills it resolves the config first
// (presets, defaults, environment overrides); the values are taken as given.
struct MemoryEstimateInputs {
  ComputeDevice device = ComputeDevice::Cpu;  // device
  WorkingDtype dtype = WorkingDtype::Auto;    // train.dtype (auto: bf16 on cuda, f32 on cpu)
  int vocab_size = 0;          // model.vocab_size
  int d_model = 0;             // model.d_model
  int n_layers = 0;            // model.n_layers
  int n_heads = 0;             // model.n_heads
  int n_kv_heads = 0;          // model.n_kv_heads
  int head_dim = 0;            // model.head_dim (0: d_model / n_heads)
  int ffn = 0;                 // the SwiGLU width the model uses (ModelConfig::ffn(), not ffn_hidden)
  bool tie_embeddings = false; // model.tie_embeddings
  int micro_batch = 0;         // train.micro_batch
  int seq_len = 0;             // train.seq_len
  double logits_chunk_mb = 0;  // train.logits_chunk_mb (0: auto)
  Recompute recompute = Recompute::Auto;  // train.recompute
  Strategy strategy = Strategy::Dp;       // parallel.strategy
  int sp = 1;                  // parallel.sp
  int wp = 1;                  // parallel.wp
  bool bf16_wire = false;      // parallel.bf16_wire
  int zero_stage = 1;          // parallel.zero.stage
  int recompute_blocks = 0;    // parallel.isp.recompute_blocks
  WdpStrategy wdp_strategy = WdpStrategy::Dp;  // parallel.isp.wdp_strategy
  int world = 1;               // ranks in the job (WORLD_SIZE)
};

struct MemoryEstimate {
  int64_t params = 0;       // working-dtype weights held (ISP: the shard and the gathered pool)
  int64_t grads = 0;        // f32 gradients (and bf16 wire staging, ZeRO stage 2's shard, ISP's scratch)
  int64_t optimizer = 0;    // AdamW moments, plus the f32 master copy when weights are not f32
  int64_t activations = 0;  // kept for backward, and backward's scratch
  int64_t init = 0;         // the f32 full model initialisation builds and drops (not with f32 cpu dp/zero)
  int64_t overhead = 0;     // runtime, libraries, thread buffers, data
  bool on_device = false;   // device: cuda (params .. activations live on the GPU)

  int64_t state() const { return params + grads + optimizer; }
  // Peak host bytes: on cpu the state plus the larger of activations and the
  // initialisation copy (one is dropped before the other exists); on cuda the
  // initialisation copy and the runtime.
  int64_t host_bytes() const;
  int64_t device_bytes() const { return on_device ? state() + activations : 0; }
  int64_t total() const { return host_bytes() + device_bytes(); }
  // "1.23 GiB (weights 0.50 GiB, gradients ..., ...)"
  std::string describe() const;

  bool operator==(const MemoryEstimate&) const = default;
};

// train.logits_chunk_mb as rows of logits computed at a time (the worker's
// Llama::set_logits_chunk_rows): `chunk_mb` MiB of [rows, vocab] logits of
// `working_bytes` per element, at least one row; 0 (auto) means 64 MiB on
// cuda and the whole micro-batch (returned as 0) on the CPU.
inline constexpr double kAutoLogitsChunkCudaMb = 64;
int64_t logits_chunk_rows(double chunk_mb, bool cuda, int64_t vocab, int working_bytes);

// train.recompute as the worker's Llama::set_recompute_pointwise: pointwise,
// or auto on cuda.
bool recompute_pointwise(Recompute recompute, bool cuda);

// Each part saturates at 2^60 bytes, so a config with 10^9 layers yields a
// huge estimate, not an overflowed one.
MemoryEstimate estimate_memory(const MemoryEstimateInputs& in);

// What to change when the estimate does not fit, naming the config fields
// after `prefix` ("" for the worker's file, "spec.worker." for a
// TrainingJob): "Make the model or the micro-batch smaller (model.d_model,
// ...) or shard it over more ranks (...)".
std::string memory_fix_hint(const std::string& prefix);

// "1.50 GiB", "12.0 MiB", "1.2 TiB"
std::string format_bytes(int64_t bytes);

}  // namespace weft::contract
