#include "metrics/metrics_port.h"

#include <charconv>

namespace weft {

MetricsEndpoint metrics_endpoint(const MetricsConfig& m, int local_rank) {
  MetricsEndpoint e;
  if (m.port == 0) return e;
  const long port = static_cast<long>(m.port) + local_rank;
  if (local_rank < 0 || port > 65535) {
    e.problem = "metrics.port " + std::to_string(m.port) + " + LOCAL_RANK " +
                std::to_string(local_rank) + " is not a TCP port (max 65535)";
    return e;
  }
  e.port = static_cast<int>(port);
  return e;
}

int local_rank_from_env(const std::map<std::string, std::string>& env) {
  auto it = env.find("LOCAL_RANK");
  if (it == env.end() || it->second.empty()) return 0;
  const std::string& v = it->second;
  int r = -1;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), r);
  if (ec != std::errc() || end != v.data() + v.size() || r < 0)
    throw ConfigError("LOCAL_RANK: expected a non-negative integer, got '" + v + "'");
  return r;
}

}  // namespace weft
