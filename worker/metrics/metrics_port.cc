#include "metrics/metrics_port.h"

#include <charconv>

#include "weft_contract.h"

namespace weft {

MetricsEndpoint metrics_endpoint(const MetricsConfig& m, int local_rank) {
  MetricsEndpoint e;
  if (m.port == 0) return e;
  if (local_rank < 0 || local_rank > 65535 - m.port) {
    e.problem = "metrics.port " + std::to_string(m.port) + " + " + contract::kEnvLocalRank + " " +
                std::to_string(local_rank) + " is not a TCP port (max 65535)";
    return e;
  }
  e.port = contract::metrics_port(local_rank, m.port);
  return e;
}

int local_rank_from_env(const std::map<std::string, std::string>& env) {
  auto it = env.find(contract::kEnvLocalRank);
  if (it == env.end() || it->second.empty()) return 0;
  const std::string& v = it->second;
  int r = -1;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), r);
  if (ec != std::errc() || end != v.data() + v.size() || r < 0)
    throw ConfigError(std::string(contract::kEnvLocalRank) +
                      ": expected a non-negative integer, got '" + v + "'");
  return r;
}

}  // namespace weft
