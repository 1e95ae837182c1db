// The launch environment of one rank: weft_contract.h's RANK .. WEFT_BIND_ADDR
// as one value. Whoever reads it (weft-worker, weft-run) parses it here, once,
// with one set of rules; whoever starts ranks (weft-run, the operator's pod
// builder) writes it through launch_env_vars(), so a launcher and a rank
// cannot disagree on a name or a format. Standard library only, like the
// contract header.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace weft::contract {

// A variable that is set but malformed or out of range, named with its value
// and the range: "MASTER_PORT: '70000' is not an integer in [1, 65535]".
// Bad launch input: the worker exits kExitBadConfig.
struct LaunchEnvError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct LaunchEnv {
  int rank = 0;              // RANK, in [0, world)
  int world = 1;             // WORLD_SIZE
  int local_rank = 0;        // LOCAL_RANK: the rank's index on its host (its GPU, its metrics port)
  int local_world = 1;       // LOCAL_WORLD_SIZE: ranks on this host (they share its memory)
  int node_rank = 0;         // NODE_RANK: this host's index among the launchers
  std::string master_addr;   // MASTER_ADDR: required when world > 1
  uint16_t master_port = 0;  // MASTER_PORT: required when world > 1
  int attempt = 0;           // WEFT_ATTEMPT
  std::string token;         // WEFT_RDZV_TOKEN
  std::string bind_addr;     // WEFT_BIND_ADDR; empty: the address that reaches MASTER_ADDR
  int planned_world = 0;     // WEFT_PLANNED_WORLD_SIZE; 0 (unset): the job runs at its planned size
  std::string job_uid;       // WEFT_JOB_UID: the TrainingJob's uid; empty outside one

  // The world size the global batch is planned for.
  int planned() const { return planned_world > 0 ? planned_world : world; }
};

using EnvMap = std::map<std::string, std::string>;

// Unset and empty variables take the defaults above (a process started by
// hand is rank 0 of 1), but for an empty RANK in a WORLD_SIZE above 1. Throws LaunchEnvError for the first bad variable:
// not a whole number, out of range (RANK beyond WORLD_SIZE, LOCAL_RANK beyond
// LOCAL_WORLD_SIZE when that is set), MASTER_ADDR or MASTER_PORT missing in a
// world of several ranks, WEFT_PLANNED_WORLD_SIZE below WORLD_SIZE, or a RANK other than NODE_RANK * LOCAL_WORLD_SIZE
// + LOCAL_RANK when all four are set.
LaunchEnv parse_launch_env(const EnvMap& env);

// What a launcher sets for one rank, in this order: RANK, LOCAL_RANK,
// WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT,
// WEFT_ATTEMPT, WEFT_PLANNED_WORLD_SIZE when set, WEFT_JOB_UID when set, and
// WEFT_RDZV_TOKEN when it is not empty (WEFT_BIND_ADDR is
// the host's to set). `per_rank` false leaves out RANK and LOCAL_RANK: the
// environment of a host whose launcher (weft-run) starts several ranks and
// sets those two for each.
std::vector<std::pair<std::string, std::string>> launch_env_vars(const LaunchEnv& e, bool per_rank = true);

}  // namespace weft::contract
