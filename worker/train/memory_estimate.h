// How much memory one rank will need, estimated from the config before the
// model is built, and how much it can have: a model that cannot fit is refused
// with a ConfigError (exit 1) naming the estimate, the limit and the fields to
// change, instead of dying in an allocation (a check failure, std::bad_alloc,
// or the kernel's OOM killer) after minutes of work.
//
// The arithmetic is config/rank_memory.h, which the operator calls too (to
// compare it with a pod's memory limit before the pods start); this unit owns
// the limits and the check.
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
#include "launch_env.h"
#include "config/rank_memory.h"

namespace weft {

using contract::kEnvSkipMemoryCheck;  // WEFT_SKIP_MEMORY_CHECK
inline constexpr const char* kEnvCgroupMemoryMax = "WEFT_CGROUP_MEMORY_MAX";

struct MemoryLimit {
  int64_t bytes = -1;  // < 0: no limit known
  std::string source;  // "cgroup memory.max 4.00 GiB / 2 ranks on this host"
};

// The memory limits of this rank's host share (divided among
// launch.local_world ranks), from the files above; `env` supplies the test
// seam.
std::vector<MemoryLimit> host_memory_limits(const std::map<std::string, std::string>& env,
                                            const contract::LaunchEnv& launch = {});

// Throws ConfigError when the estimate exceeds a limit (unless
// WEFT_SKIP_MEMORY_CHECK is set in env). Call after validate(), before the
// model is built; on cuda after the rank's GPU is current. The estimate is
// for launch.world ranks.
void check_memory_fits(const WorkerConfig& cfg, const std::map<std::string, std::string>& env,
                       const contract::LaunchEnv& launch = {});

}  // namespace weft
