#include "launch_env.h"

#include <charconv>

#include "weft_contract.h"

namespace weft::contract {
namespace {

constexpr int64_t kMaxRanks = int64_t{1} << 20;

// The variable as a whole number in [lo, hi]; `dflt` when unset or empty.
int64_t whole(const EnvMap& env, const char* name, int64_t dflt, int64_t lo, int64_t hi) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return dflt;
  const std::string& s = it->second;
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi)
    throw LaunchEnvError(std::string(name) + ": '" + s + "' is not an integer in [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + "]");
  return v;
}

std::string text(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

bool is_set(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return it != env.end() && !it->second.empty();
}

}  // namespace

LaunchEnv parse_launch_env(const EnvMap& env) {
  LaunchEnv e;
  e.world = static_cast<int>(whole(env, kEnvWorldSize, 1, 1, kMaxRanks));
  // In a gang an empty RANK is a launch mistake, not rank 0: taken for 0 it
  // would start a second rank 0 (and a second store) beside the real one.
  if (e.world > 1 && env.count(kEnvRank) && env.at(kEnvRank).empty())
    throw LaunchEnvError(std::string(kEnvRank) + ": set but empty; each rank of a " + kEnvWorldSize + " of " +
                         std::to_string(e.world) + " needs its own in [0, " + std::to_string(e.world - 1) + "]");
  e.rank = static_cast<int>(whole(env, kEnvRank, 0, 0, e.world - 1));
  e.local_world = static_cast<int>(whole(env, kEnvLocalWorldSize, 1, 1, kMaxRanks));
  const bool local_world_set = is_set(env, kEnvLocalWorldSize);
  e.local_rank = static_cast<int>(whole(env, kEnvLocalRank, 0, 0, (local_world_set ? e.local_world : kMaxRanks) - 1));
  e.node_rank = static_cast<int>(whole(env, kEnvNodeRank, 0, 0, kMaxRanks - 1));
  e.master_addr = text(env, kEnvMasterAddr);
  e.master_port = static_cast<uint16_t>(whole(env, kEnvMasterPort, 0, 1, 65535));
  e.attempt = static_cast<int>(whole(env, kEnvAttempt, 0, 0, int64_t{1} << 30));
  e.token = text(env, kEnvRdzvToken);
  e.bind_addr = text(env, kEnvBindAddr);
  e.job_uid = text(env, kEnvJobUid);
  e.planned_world = static_cast<int>(whole(env, kEnvPlannedWorldSize, 0, e.world, kMaxRanks));
  if (e.world > 1 && e.master_addr.empty())
    throw LaunchEnvError(std::string(kEnvMasterAddr) + ": must be set when " + kEnvWorldSize + " is " +
                         std::to_string(e.world));
  if (e.world > 1 && e.master_port == 0)
    throw LaunchEnvError(std::string(kEnvMasterPort) + ": must be set when " + kEnvWorldSize + " is " +
                         std::to_string(e.world));
  if (is_set(env, kEnvRank) && is_set(env, kEnvNodeRank) && local_world_set && is_set(env, kEnvLocalRank)) {
    const int64_t want = int64_t{e.node_rank} * e.local_world + e.local_rank;
    if (want != e.rank)
      throw LaunchEnvError(std::string(kEnvRank) + ": '" + std::to_string(e.rank) + "' is not " + kEnvNodeRank +
                           " * " + kEnvLocalWorldSize + " + " + kEnvLocalRank + " = " + std::to_string(e.node_rank) +
                           " * " + std::to_string(e.local_world) + " + " + std::to_string(e.local_rank) + " = " +
                           std::to_string(want));
  }
  return e;
}

std::vector<std::pair<std::string, std::string>> launch_env_vars(const LaunchEnv& e, bool per_rank) {
  std::vector<std::pair<std::string, std::string>> v;
  if (per_rank) {
    v.emplace_back(kEnvRank, std::to_string(e.rank));
    v.emplace_back(kEnvLocalRank, std::to_string(e.local_rank));
  }
  v.emplace_back(kEnvWorldSize, std::to_string(e.world));
  v.emplace_back(kEnvLocalWorldSize, std::to_string(e.local_world));
  v.emplace_back(kEnvNodeRank, std::to_string(e.node_rank));
  v.emplace_back(kEnvMasterAddr, e.master_addr);
  v.emplace_back(kEnvMasterPort, std::to_string(e.master_port));
  v.emplace_back(kEnvAttempt, std::to_string(e.attempt));
  if (e.planned_world > 0) v.emplace_back(kEnvPlannedWorldSize, std::to_string(e.planned_world));
  if (!e.job_uid.empty()) v.emplace_back(kEnvJobUid, e.job_uid);
  if (!e.token.empty()) v.emplace_back(kEnvRdzvToken, e.token);
  return v;
}

}  // namespace weft::contract
