// How much memory one rank needs, from the resolved worker config: the
// arithmetic weft-worker checks against its limits before it builds the model
// (worker/train/memory_estimate.h) and weft-operator compares with a pod's
// memory limit before the pods start (operator/trainingjob/memory_policy.h).
// Both read the config with this unit's parser (config.h) and call this one
// function, so both say the same number for the same job.
//
// The estimate mirrors what the strategies allocate (worker/parallel/*.h): the
// working-dtype weights, the f32 gradients, the AdamW moments and f32 master
// copy (ZeRO: 1/N of them; ISP: of the weight shard), the activations the
// model keeps for backward (worker/model/llama.h, with recompute_blocks), the
// transient f32 full model of initialisation, and a runtime overhead.
#pragma once

#include <cstdint>
#include <string>

#include "config/config.h"

namespace weft {

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

// The estimate for one rank of a job of `world` ranks (ZeRO shards over it,
// ISP divides it by sp * wp), from a config that resolve() has decided
// (train.dtype and train.recompute are not auto; ConfigError otherwise: the
// auto rules are resolve()'s alone). Each part saturates at 2^60 bytes, so a
// config with 10^9 layers yields a huge estimate, not an overflowed one.
MemoryEstimate estimate_memory(const WorkerConfig& cfg, int world);

// What to change when the estimate does not fit, naming the config fields
// after `prefix` ("" for the worker's file, "spec.worker." for a
// TrainingJob): "Make the model or the micro-batch smaller (model.d_model,
// ...) or shard it over more ranks (...)".
std::string memory_fix_hint(const std::string& prefix);

// "1.50 GiB", "12.0 MiB", "1.2 TiB"
std::string format_bytes(int64_t bytes);

}  // namespace weft
