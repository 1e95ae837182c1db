// How much memory one rank will need, estimated from the config before the
// model is built, and how much it can have: a model that cannot fit is refused
// with a ConfigError (exit 1) naming the estimate, the limit and the fields to
// change, instead of dying in an allocation (a check failure, std::bad_alloc,
// or the kernel's OOM killer) after minutes of work.
//
// The estimate mirrors what the strategies allocate (parallel/*.h): the
// working-dtype weights, the f32 gradients, the AdamW moments and f32 master
// copy (ZeRO: 1/N of them; ISP: of the weight shard), the activations the
// model keeps for backward (model/llama.h, with recompute_blocks), the
// transient f32 full model of initialisation, and a fixed runtime overhead.
//
// Limits, the smallest wins: the cgroup's memory.max (v2) or
// memory.limit_in_bytes (v1) and /proc/meminfo's MemAvailable, both shared by
// the LOCAL_WORLD_SIZE ranks of this host; the address space RLIMIT_AS leaves
// this process; on cuda, the GPU's free memory.
//
// Environment: WEFT_SKIP_MEMORY_CHECK=1 skips the check (for an estimate that
// is wrong about a setup); WEFT_CGROUP_MEMORY_MAX names a file read instead of
// the cgroup's memory.max (tests).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/config.h"

namespace weft {

inline constexpr const char* kEnvSkipMemoryCheck = "WEFT_SKIP_MEMORY_CHECK";
inline constexpr const char* kEnvCgroupMemoryMax = "WEFT_CGROUP_MEMORY_MAX";

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
  // initialisation copy (one is dropped before the other exists).
  int64_t host_bytes() const;
  int64_t device_bytes() const { return on_device ? state() + activations : 0; }
  int64_t total() const { return host_bytes() + device_bytes(); }
  // "1.23 GiB (weights 0.50 GiB, gradients ..., ...)"
  std::string describe() const;
};

// `world` ranks in the job (ZeRO shards over it, ISP divides it by sp * wp).
MemoryEstimate estimate_memory(const WorkerConfig& cfg, int world);

struct MemoryLimit {
  int64_t bytes = -1;  // < 0: no limit known
  std::string source;  // "cgroup memory.max 4.00 GiB / 2 ranks on this host"
};

// The memory limits of this rank's host share, from the files and the
// environment above; `env` supplies LOCAL_WORLD_SIZE and the test seam.
std::vector<MemoryLimit> host_memory_limits(const std::map<std::string, std::string>& env);

// Throws ConfigError when the estimate exceeds a limit (unless
// WEFT_SKIP_MEMORY_CHECK is set in env). Call after validate(), before the
// model is built; on cuda after the rank's GPU is current.
void check_memory_fits(const WorkerConfig& cfg, const std::map<std::string, std::string>& env);

// The rank count of the job from WORLD_SIZE (1 when unset or not a number).
int world_size_from_env(const std::map<std::string, std::string>& env);

// "1.50 GiB", "12.0 MiB"
std::string format_bytes(int64_t bytes);

}  // namespace weft
