#include "metrics/metrics_port.h"

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

double metrics_linger_seconds(const MetricsConfig& m, bool in_training_job) {
  if (m.linger_seconds >= 0) return m.linger_seconds;
  return in_training_job ? kTrainingJobLingerSeconds : 0;
}

}  // namespace weft
